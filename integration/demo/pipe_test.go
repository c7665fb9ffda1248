package main

import (
	"bufio"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
)

// TestCtrlCAfterTheOutputsReaderExitedUnmountsBoth is `make run | tee
// run.log`, then Ctrl-C: tee exits, and the demo (the real binary, with
// the real fencefs mounts and gateway) must still flush and unmount both
// mounts, stop the gateway and exit 0, although every line it prints from
// then on goes to a pipe without a reader. It used to die of SIGPIPE on
// its "stopping" line, taking both mounts with it and leaving their
// mountpoints answering "Transport endpoint is not connected".
func TestCtrlCAfterTheOutputsReaderExitedUnmountsBoth(t *testing.T) {
	harness.RequireFUSE(t)
	gwBin, err := gateway.FindBinary()
	if err != nil {
		gateway.SkipOrFail(t, "%v", err)
	}
	bin, demo := harness.Binary(t), demoBinary(t)
	dir := t.TempDir()
	state, mntA := filepath.Join(dir, "state"), filepath.Join(dir, "mnt")
	mntB := mntA + "-b"

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(demo, "--bin", bin, "--gateway", gwBin, "--state", state, "--mountpoint", mntA)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
		for _, d := range []string{mntA, mntB} {
			if isMounted(d) {
				_ = exec.Command("fusermount3", "-uz", d).Run()
			}
		}
	})

	// The reader (tee) reads the story up to the prompt, then exits.
	told := make(chan string, 1)
	go func() {
		var text strings.Builder
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			text.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "Press Ctrl-C") {
				break
			}
		}
		r.Close()
		told <- text.String()
	}()
	var text string
	select {
	case text = <-told:
	case <-time.After(3 * time.Minute):
		t.Fatal("the demo did not reach its prompt within 3 minutes")
	}
	if !strings.Contains(text, "Press Ctrl-C") {
		<-done
		t.Fatalf("the demo ended before its prompt (%v); it printed:\n%s", cmd.ProcessState, text)
	}
	for _, d := range []string{mntA, mntB} {
		if !isMounted(d) {
			t.Fatalf("%s is not mounted at the prompt; the demo printed:\n%s", d, text)
		}
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the demo did not exit within 2 minutes of Ctrl-C")
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Errorf("the demo was killed by %v after Ctrl-C; want exit status 0", ws.Signal())
	} else if !cmd.ProcessState.Success() {
		t.Errorf("the demo exited %v after Ctrl-C; want status 0", cmd.ProcessState)
	}
	for _, d := range []string{mntA, mntB} {
		if isMounted(d) {
			t.Errorf("%s is still mounted after the demo exited", d)
		}
		if _, err := os.Stat(d); errors.Is(err, syscall.ENOTCONN) {
			t.Errorf("%s: %v: its fencefs died instead of unmounting", d, err)
		}
		if pids := fencefsPids(bin, d); len(pids) > 0 {
			t.Errorf("fencefs %v still running for %s after the demo exited", pids, d)
		}
	}
	if m := regexp.MustCompile(`serving at http://(127\.0\.0\.1:\d+)`).FindStringSubmatch(text); m == nil {
		t.Errorf("the demo did not say where its gateway served:\n%s", text)
	} else if c, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
		c.Close()
		t.Errorf("the demo's gateway still accepts connections at %s after it exited", m[1])
	}
}

// demoBinary is $FENCEFS_DEMO_BIN (the Makefile's bin/fencefs-demo), else
// a fresh build of this package.
func demoBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FENCEFS_DEMO_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("FENCEFS_DEMO_BIN=%s: %v", p, err)
		}
		return p
	}
	p := filepath.Join(t.TempDir(), "fencefs-demo")
	if out, err := exec.Command("go", "build", "-o", p, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build ./integration/demo: %v\n%s", err, out)
	}
	return p
}

// fencefsPids are the pids of bin's processes whose arguments name dir.
func fencefsPids(bin, dir string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) < 2 || filepath.Base(args[0]) != filepath.Base(bin) {
			continue
		}
		for _, a := range args[1:] {
			if a == dir {
				pids = append(pids, e.Name())
				break
			}
		}
	}
	return pids
}
