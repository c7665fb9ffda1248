// Command floor measures what FUSE itself costs a small-file workload on
// this machine, with no S3 server at all: go-fuse's own loopback example
// filesystem (the library fencefs uses) over a tmpfs directory, and the
// same create+write+close of 4 KiB files the benchmark times. Its rate is
// an upper bound for any go-fuse filesystem here; subtract its time per
// file from a mount's to see what the mount adds.
//
//	go run ./bench/floor [-n 1000] [-runs 3] [-size 4096]
//
// It builds the loopback example with the go command, mounts it as a
// separate process (never in-process: a process touching its own FUSE mount
// can deadlock), and unmounts and removes everything on exit.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	n := flag.Int("n", 1000, "files per run")
	runs := flag.Int("runs", 3, "runs (the median is printed)")
	size := flag.Int("size", 4096, "bytes per file")
	flag.Parse()
	if err := run(*n, *runs, *size); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

func run(n, runs, size int) error {
	base := "/dev/shm"
	if fi, err := os.Stat(base); err != nil || !fi.IsDir() {
		base = os.TempDir()
	}
	dir, err := os.MkdirTemp(base, "fencefs-floor-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "loopback")
	build := exec.Command("go", "build", "-o", bin, "github.com/hanwen/go-fuse/v2/example/loopback")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building go-fuse's loopback example: %w", err)
	}
	src, mnt := filepath.Join(dir, "src"), filepath.Join(dir, "mnt")
	for _, d := range []string{src, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	fs := exec.Command(bin, "-q", mnt, src)
	fs.Stderr = os.Stderr
	if err := fs.Start(); err != nil {
		return err
	}
	defer func() {
		_ = exec.Command("fusermount3", "-u", mnt).Run()
		_ = fs.Process.Signal(syscall.SIGTERM)
		_ = fs.Wait()
	}()
	if err := waitMounted(mnt, 10*time.Second); err != nil {
		return err
	}
	data := make([]byte, size)
	var rates []float64
	for r := 0; r < runs; r++ {
		d := filepath.Join(mnt, fmt.Sprintf("run%d", r))
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
		start := time.Now()
		for i := 0; i < n; i++ {
			if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%05d", i)), data, 0o644); err != nil {
				return err
			}
		}
		el := time.Since(start)
		rates = append(rates, float64(n)/el.Seconds())
		fmt.Printf("run %d: %.0f creates/s (%.3f ms per create+write+close)\n", r+1, rates[r], el.Seconds()*1000/float64(n))
	}
	slices.Sort(rates)
	med := rates[len(rates)/2]
	fmt.Printf("FUSE floor (go-fuse loopback over %s, %d×%d B): median %.0f creates/s, %.3f ms each\n", base, n, size, med, 1000/med)
	return nil
}

// waitMounted waits until mnt shows in this process's mount table.
func waitMounted(mnt string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 4 && f[4] == mnt {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("the loopback filesystem did not mount (is /dev/fuse available, and fuse3's fusermount3 installed?)")
}
