// Command fencefs-demo is what `make run` runs: it starts a local Versity S3
// gateway on a free loopback port (data under --state), creates the bucket
// "demo", mounts it with fencefs at --mountpoint with a fresh fencing token,
// checks that a file written through the mount is an object in the bucket,
// and prints what to try next. Ctrl-C (or SIGTERM) flushes and unmounts the
// mount, then stops the gateway; nothing is left mounted or running. Running
// it again reuses the data: the register keeps its epoch, so the new mount
// takes the next token ("auto").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/minio/minio-go/v7"
)

const (
	bucket    = "demo"
	accessKey = "fencefs-demo"
	secretKey = "fencefs-demo-secret-key"
)

func main() {
	bin := flag.String("bin", "bin/fencefs", "fencefs binary")
	gw := flag.String("gateway", "bin/versitygw", "versitygw binary")
	state := flag.String("state", ".run", "directory for the gateway's data, the cache and logs")
	mnt := flag.String("mountpoint", "mnt", "where to mount the bucket")
	flag.Parse()
	if err := run(*bin, *gw, *state, *mnt); err != nil {
		fmt.Fprintln(os.Stderr, "fencefs-demo:", err)
		os.Exit(1)
	}
}

func run(bin, gwBin, state, mnt string) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)

	for _, p := range []*string{&bin, &gwBin, &state, &mnt} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	// A previous run killed hard may have left a dead mount: clear it.
	_ = exec.Command("fusermount3", "-uz", mnt).Run()
	for _, d := range []string{state, mnt, filepath.Join(state, "cache")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := gateway.Start(ctx, gateway.Options{
		Bin: gwBin, Dir: filepath.Join(state, "gateway"), AccessKey: accessKey, SecretKey: secretKey,
	})
	if err != nil {
		return fmt.Errorf("starting the S3 gateway: %w", err)
	}
	defer func() {
		if err := g.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the gateway:", err)
		}
		fmt.Println("gateway stopped.")
	}()
	fmt.Printf("S3 gateway (versitygw %s) serving at %s, data in %s\n", gateway.PinnedVersion, g.Endpoint, g.Dir)

	if err := g.CreateBucket(ctx, bucket); err != nil && !isAlreadyOwned(err) {
		return fmt.Errorf("creating bucket %q: %w", bucket, err)
	}
	envFile := filepath.Join(state, "env")
	env := strings.Join(g.Env(), "\n") + "\n"
	if err := os.WriteFile(envFile, []byte(env), 0o600); err != nil {
		return err
	}

	logPath := filepath.Join(state, "mount.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "mount", bucket, mnt, "--foreground", "--endpoint", g.Endpoint,
		"--token", "auto", "--holder", "demo-a", "--cache-dir", filepath.Join(state, "cache"))
	cmd.Env = append(os.Environ(), g.Env()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: a terminal Ctrl-C reaches only us, and we stop the
	// mount first, then the gateway, in that order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopMount := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				fmt.Fprintf(os.Stderr, "fencefs exited: %v (log: %s)\n", err, logPath)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = exec.Command("fusermount3", "-u", mnt).Run()
		fmt.Println("unmounted", mnt)
	}

	if err := waitMounted(mnt, done, 30*time.Second); err != nil {
		log, _ := os.ReadFile(logPath)
		_ = exec.Command("fusermount3", "-uz", mnt).Run()
		return fmt.Errorf("%w\n--- %s ---\n%s", err, logPath, log)
	}
	defer stopMount()

	if err := selfCheck(g, mnt); err != nil {
		fmt.Fprintln(os.Stderr, "self-check FAILED:", err)
	}
	printTour(bin, mnt, envFile, logPath)

	select {
	case <-sig:
		fmt.Println("\nstopping: flushing and unmounting …")
	case err := <-done:
		done <- err // for stopMount
		fmt.Fprintf(os.Stderr, "fencefs exited unexpectedly: %v (log: %s)\n", err, logPath)
	}
	return nil
}

func isAlreadyOwned(err error) bool {
	code := minio.ToErrorResponse(err).Code
	return code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists"
}

func waitMounted(mnt string, done chan error, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(mnt))
		if err != nil {
			return err
		}
		if len(mounts) > 0 {
			return nil
		}
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("fencefs exited before the mount was ready: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return errors.New("mount not ready in time")
}

// selfCheck writes a file through the mount and reads it back as an object
// with a plain S3 client, showing the stamp fencefs put on it.
func selfCheck(g *gateway.Gateway, mnt string) error {
	body := fmt.Sprintf("hello from fencefs at %s\n", time.Now().Format(time.RFC3339))
	if err := os.WriteFile(filepath.Join(mnt, "hello.txt"), []byte(body), 0o644); err != nil {
		return fmt.Errorf("write through the mount: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := g.Client().GetObject(ctx, bucket, "hello.txt", minio.GetObjectOptions{})
	if err != nil {
		return err
	}
	defer o.Close()
	got, err := io.ReadAll(o)
	if err != nil {
		return fmt.Errorf("read the object back: %w", err)
	}
	if string(got) != body {
		return fmt.Errorf("object hello.txt holds %q, want %q", got, body)
	}
	st, _ := o.Stat()
	fmt.Printf("\n✔ wrote %s/hello.txt through the mount; the bucket now has object %q (%d bytes, stamped epoch %s by holder %s)\n",
		mnt, "hello.txt", len(got), st.UserMetadata["Fencefs-Epoch"], st.UserMetadata["Fencefs-Holder"])
	return nil
}

func printTour(bin, mnt, envFile, logPath string) {
	rel := func(p string) string {
		if wd, err := os.Getwd(); err == nil {
			if r, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(r, "..") {
				return "./" + r
			}
		}
		return p
	}
	b, m, e := rel(bin), rel(mnt), rel(envFile)
	fmt.Printf(`
fencefs is mounted at %[2]s (bucket "demo", log in %[4]s). In another terminal, try:

  echo hi > %[2]s/a.txt && cat %[2]s/a.txt          # a file is an object
  %[1]s status %[2]s                            # token, bucket epoch, state, holder (root xattrs)
  set -a; . %[3]s; set +a                            # credentials + endpoint for the CLI
  %[1]s epoch show demo                        # the bucket's epoch register

  # a new leader takes over: mount the bucket again with a higher token …
  mkdir -p /tmp/mnt-b && %[1]s mount demo /tmp/mnt-b --token auto --holder demo-b
  #   … or just raise the epoch from a script:  %[1]s epoch raise demo auto
  echo stale > %[2]s/a.txt                           # the old leader is refused: Read-only file system
  %[1]s status %[2]s                            # state fenced, and why
  fusermount3 -u /tmp/mnt-b                          # when done with the second mount

Press Ctrl-C here to flush, unmount and stop the server.
`, b, m, e, rel(logPath))
}
