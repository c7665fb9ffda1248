package main

// A mount, and `fencefs run`, whose standard output and error are a pipe
// whose reader went away (`fencefs mount -f … | tee log`, then Ctrl-C ends
// tee) keep working and stop only when asked: SIGTERM, SIGINT or an
// unmount. Go kills a program whose write to fd 1 or 2 fails with EPIPE
// unless it handles SIGPIPE; a mount killed that way leaves its mountpoint
// answering "Transport endpoint is not connected".

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
)

// outputPipe is a pipe for a child's stdout and stderr whose reader (this
// test) reads until readerExits, then closes its end, as tee does when it
// exits: the child's next write fails with EPIPE (and raises SIGPIPE).
type outputPipe struct {
	w    *os.File // the child's end; closed here once the child has it
	r    *os.File
	done chan struct{} // closed when the reader has stopped

	mu  sync.Mutex
	got bytes.Buffer // GUARDED_BY(mu): what the reader read
}

func newOutputPipe(t *testing.T) *outputPipe {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &outputPipe{w: w, r: r, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			p.mu.Lock()
			p.got.Write(buf[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { w.Close(); p.readerExits() })
	return p
}

// started closes the child's end in this process, so that only the child
// holds it.
func (p *outputPipe) started() { p.w.Close() }

// readerExits closes the read end: from now on the pipe has no reader.
func (p *outputPipe) readerExits() {
	p.r.Close()
	<-p.done
}

// read is what the reader got before it exited.
func (p *outputPipe) read() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.got.String()
}

// startWithOutput starts the binary with args, the test's clean
// environment plus env, and its stdout and stderr on p. If the process
// is still running at the end of the test it is killed and its mountpoint
// mnt (if any) detached.
func startWithOutput(t *testing.T, p *outputPipe, env []string, mnt string, args ...string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(harness.Binary(t), args...)
	cmd.Env = append(cleanEnv(t), env...)
	cmd.Stdout, cmd.Stderr = p.w, p.w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.started()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
		if mnt != "" && mounted(t, mnt) {
			_ = exec.Command("fusermount3", "-uz", mnt).Run()
		}
	})
	return cmd, done
}

// exitedHow says how an exited process ended, for messages.
func exitedHow(cmd *exec.Cmd) string {
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return "killed by " + ws.Signal().String()
	}
	return cmd.ProcessState.String()
}

func TestAMountOutlivesTheReaderOfItsOutput(t *testing.T) {
	harness.RequireFUSE(t)
	gw := gateway.ForTest(t)
	tests := []struct {
		name    string
		logFile bool // --log-file: the log goes there, not to stderr
		unmount bool // stop with fusermount3 -u, else SIGTERM
	}{
		{"log on stderr, then SIGTERM", false, false},
		{"log on stderr, then fusermount3 -u", false, true},
		{"log file, then SIGTERM", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bucket := gateway.NewBucket(t, gw)
			tmp := t.TempDir()
			mnt, logFile := filepath.Join(tmp, "mnt"), filepath.Join(tmp, "mount.log")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			args := []string{"mount", bucket, mnt, "--foreground", "--endpoint", gw.Endpoint,
				"--cache-dir", filepath.Join(tmp, "cache"), "--token", "5", "--log-level", "debug"}
			if tt.logFile {
				args = append(args, "--log-file", logFile)
			}
			p := newOutputPipe(t)
			cmd, done := startWithOutput(t, p, gw.Env(), mnt, args...)
			waitFor(t, "the mount", func() bool {
				select {
				case <-done:
					t.Fatalf("fencefs exited before mounting (%s); output:\n%s", exitedHow(cmd), p.read())
				default:
				}
				return mounted(t, mnt)
			})

			p.readerExits()
			// A write through the mount logs at debug (its commit), and
			// the stop below logs at info: both after the reader left.
			body := []byte("written after the reader of the mount's output exited\n")
			if err := os.WriteFile(filepath.Join(mnt, "after.txt"), body, 0o644); err != nil {
				t.Errorf("write through the mount: %v", err)
			}
			select {
			case <-done:
				t.Fatalf("fencefs exited (%s) while serving, with nobody reading its output; it read:\n%s", exitedHow(cmd), p.read())
			default:
			}
			wantObject(t, gw, bucket, "after.txt", body)

			if tt.unmount {
				if out, err := exec.Command("fusermount3", "-u", mnt).CombinedOutput(); err != nil {
					t.Fatalf("fusermount3 -u: %v %s", err, out)
				}
			} else if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Fatalf("fencefs did not exit within 60s of being stopped")
			}
			if !cmd.ProcessState.Success() {
				t.Errorf("fencefs exited %s; want status 0", exitedHow(cmd))
			}
			if mounted(t, mnt) {
				t.Errorf("%s still mounted after fencefs exited", mnt)
			}
			if _, err := os.Stat(mnt); err != nil {
				t.Errorf("the mountpoint after the stop: %v", err)
			}
			if tt.logFile {
				log, _ := os.ReadFile(logFile)
				for _, want := range []string{"after.txt", "signal received", "msg=unmounted"} {
					if !bytes.Contains(log, []byte(want)) {
						t.Errorf("the log file lacks %q, logged after the output's reader exited:\n%s", want, log)
					}
				}
			}
		})
	}
}

func TestRunOutlivesTheReaderOfItsOutput(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	fs := harness.Mount(t, gw, bucket)
	p := newOutputPipe(t)
	// Nobody reads from the start: run logs "waiting for the lease" first,
	// and the command's confirmation at its end.
	p.readerExits()
	cmd, done := startWithOutput(t, p, gw.Env(), "", "run", "--lease", "piped", "--mount", fs.Dir,
		"--endpoint", gw.Endpoint, "--log-level", "debug", "--",
		"/bin/sh", "-c", `echo ran >"$FENCEFS_MOUNT/run.txt"`)
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatalf("fencefs run did not end within 90s")
	}
	if !cmd.ProcessState.Success() {
		t.Fatalf("fencefs run exited %s; want the command's status 0", exitedHow(cmd))
	}
	wantObject(t, gw, bucket, "run.txt", []byte("ran\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o, err := gw.Client().GetObject(ctx, bucket, ".fencefs/leases/piped", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	var lease struct {
		Released bool `json:"released"`
	}
	if err == nil {
		err = json.Unmarshal(b, &lease)
	}
	if err != nil || !lease.Released {
		t.Errorf("the lease object = %q (%v); want it released once the command ended", strings.TrimSpace(string(b)), err)
	}
}

// brokenPipe fails every write with EPIPE, as stderr does once its reader
// is gone (SIGPIPE being handled), and counts the writes.
type brokenPipe struct{ writes int }

func (b *brokenPipe) Write([]byte) (int, error) {
	b.writes++
	return 0, &os.PathError{Op: "write", Path: "/dev/stderr", Err: syscall.EPIPE}
}

func TestLogRecordsToAPipeWithoutReaderAreDropped(t *testing.T) {
	bp := &brokenPipe{}
	w := &redactWriter{w: bp}
	for i := 0; i < 3; i++ {
		if n, err := w.Write([]byte("a record\n")); n != len("a record\n") || err != nil {
			t.Fatalf("write %d = %d, %v; want the record dropped without an error", i, n, err)
		}
	}
	if bp.writes != 1 {
		t.Errorf("%d writes reached the broken pipe; want 1 (none after the first EPIPE)", bp.writes)
	}
}
