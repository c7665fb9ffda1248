// Package harness runs the real fencefs binary as FUSE mounts in tests.
//
// Every end-to-end test uses it the same way:
//
//	func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
//
//	func TestSomething(t *testing.T) {
//		gw := gateway.ForTest(t)            // real S3 server on 127.0.0.1
//		bucket := gateway.NewBucket(t, gw)
//		a := harness.Mount(t, gw, bucket, "--token", "17")
//		os.WriteFile(a.Path("f"), ...)      // plain syscalls on the kernel mount
//	}
//
// The binary is $FENCEFS_BIN when set (the Makefile sets it to bin/fencefs),
// else it is built once per test process. Mounts run `fencefs mount
// --foreground` as a subprocess (never in the test process: touching an
// in-process FUSE mount can deadlock), are awaited through /proc/self/mountinfo
// rather than a sleep, and are unmounted in t.Cleanup with retries. Main fails
// the run if any mount or mount process started by the harness is left behind.
//
// Without /dev/fuse, fusermount3 or the gateway, tests skip locally and fail
// when CI is set.
package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/internal/mounts"
)

var (
	builds   sync.Map // build tags → *build
	buildDir string   // set once by the first build; removed by Main
	dirOnce  sync.Once
	dirErr   error

	liveMu sync.Mutex
	live   = map[*FS]struct{}{} // GUARDED_BY(liveMu): mounts not yet cleaned up

	mountedMu sync.Mutex
	mounted   []string // GUARDED_BY(mountedMu): every mountpoint this process used
)

// Main runs the tests, then removes the harness's build directory and fails
// (exit status 1) if a mount or mount process started through the harness is
// still there.
func Main(m *testing.M) int {
	code := m.Run()
	liveMu.Lock()
	leftovers := make([]*FS, 0, len(live))
	for fs := range live {
		leftovers = append(leftovers, fs)
	}
	liveMu.Unlock()
	for _, fs := range leftovers {
		fmt.Fprintf(os.Stderr, "harness: mount %s (pid %d) left behind; cleaning up\n", fs.Dir, fs.Pid())
		fs.forceCleanup()
		code = 1
	}
	// Other test processes (packages run in parallel) have mounts of their
	// own: look only at the mountpoints this process used.
	mountedMu.Lock()
	dirs := append([]string(nil), mounted...)
	mountedMu.Unlock()
	for _, dir := range dirs {
		if ok, _ := mounts.IsMounted(dir); ok {
			fmt.Fprintf(os.Stderr, "harness: mount left behind at %s\n", dir)
			_ = mounts.Lazy(context.Background(), dir)
			code = 1
		}
	}
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	return code
}

type build struct {
	once sync.Once
	path string
	err  error
}

// Binary returns the path of the fencefs binary under test; see the package
// doc. It fails the test if the build fails.
func Binary(t testing.TB) string {
	t.Helper()
	return binary(t, "FENCEFS_BIN", "")
}

// FailpointBinary returns a fencefs binary built with the "failpoints" tag,
// which honours $FENCEFS_FAILPOINTS (see fencing.FailpointsFromEnv): it is
// $FENCEFS_FAILPOINT_BIN when set (the Makefile builds
// bin/fencefs-failpoints), else built once per test process.
func FailpointBinary(t testing.TB) string {
	t.Helper()
	return binary(t, "FENCEFS_FAILPOINT_BIN", "failpoints")
}

func binary(t testing.TB, env, tags string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v", env, p, err)
		}
		return p
	}
	v, _ := builds.LoadOrStore(tags, &build{})
	b := v.(*build)
	b.once.Do(func() {
		dirOnce.Do(func() { buildDir, dirErr = os.MkdirTemp("", "fencefs-bin-") })
		if dirErr != nil {
			b.err = dirErr
			return
		}
		root, err := gateway.RepoRoot()
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(buildDir, "fencefs"+strings.ReplaceAll(tags, ",", "-"))
		cmd := exec.Command("go", "build", "-tags", tags, "-o", b.path, "./cmd/fencefs")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build -tags %q ./cmd/fencefs: %v\n%s", tags, err, out)
		}
	})
	if b.err != nil {
		t.Fatalf("%v", b.err)
	}
	return b.path
}

// RequireFUSE skips (fails in CI) unless FUSE mounts can be made here.
func RequireFUSE(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		gateway.SkipOrFail(t, "no /dev/fuse: %v", err)
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		gateway.SkipOrFail(t, "fusermount3 not found (apt-get install fuse3): %v", err)
	}
}

// FS is one running fencefs mount process.
type FS struct {
	Dir      string // the mountpoint
	CacheDir string
	LogPath  string // the mount process's stderr/stdout
	Bucket   string
	Args     []string // the full argument list passed to the binary

	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	mu      sync.Mutex
	cleaned bool // GUARDED_BY(mu)
}

// Options are extra knobs for MountWith.
type Options struct {
	// Env is added to the mount process's environment (after the gateway's).
	Env []string
	// Dir is the mountpoint; empty means a new directory under t.TempDir().
	Dir string
	// ReadyTimeout bounds the wait for the mount (default 30 s).
	ReadyTimeout time.Duration
	// Failpoints runs FailpointBinary instead of Binary (for Env settings
	// of FENCEFS_FAILPOINTS).
	Failpoints bool
}

// Mount starts `fencefs mount BUCKET MNT --foreground --endpoint … args…` and
// waits until the kernel mount is there. It fails the test (with the mount's
// log) if the process exits first or the mount does not appear in time.
func Mount(t testing.TB, gw *gateway.Gateway, bucket string, args ...string) *FS {
	t.Helper()
	return MountWith(t, gw, bucket, Options{}, args...)
}

// MountWith is Mount with Options.
func MountWith(t testing.TB, gw *gateway.Gateway, bucket string, o Options, args ...string) *FS {
	t.Helper()
	fs, err := Start(t, gw, bucket, o, args...)
	if err != nil {
		t.Fatalf("mount %s: %v", bucket, err)
	}
	return fs
}

// Start is Mount returning the error instead of failing the test, for tests
// that expect a mount to be refused. The process is cleaned up in t.Cleanup
// either way.
func Start(t testing.TB, gw *gateway.Gateway, bucket string, o Options, args ...string) (*FS, error) {
	t.Helper()
	RequireFUSE(t)
	bin := Binary(t)
	if o.Failpoints {
		bin = FailpointBinary(t)
	}
	tmp := t.TempDir()
	fs := &FS{
		Dir:      o.Dir,
		CacheDir: filepath.Join(tmp, "cache"),
		LogPath:  filepath.Join(tmp, "mount.log"),
		Bucket:   bucket,
		done:     make(chan struct{}),
	}
	if fs.Dir == "" {
		fs.Dir = filepath.Join(tmp, "mnt")
	}
	if err := os.MkdirAll(fs.Dir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(fs.LogPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	fs.Args = append([]string{"mount", bucket, fs.Dir, "--foreground",
		"--endpoint", gw.Endpoint, "--cache-dir", fs.CacheDir, "--log-level", "debug"}, args...)
	cmd := exec.Command(bin, fs.Args...)
	cmd.Env = append(append(os.Environ(), gw.Env()...), o.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig: if the test process dies (a go test timeout), its mounts die
	// with it, even frozen ones, instead of hanging whoever touches them;
	// the kernel then answers ENOTCONN on the dead mountpoint.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	fs.cmd = cmd
	go func() { fs.waitErr = cmd.Wait(); close(fs.done) }()
	liveMu.Lock()
	live[fs] = struct{}{}
	liveMu.Unlock()
	mountedMu.Lock()
	mounted = append(mounted, fs.Dir)
	mountedMu.Unlock()
	t.Cleanup(func() {
		if err := fs.Unmount(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})

	timeout := o.ReadyTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	deadline := time.Now().Add(timeout)
	for {
		if ok, _ := mounts.IsMounted(fs.Dir); ok {
			return fs, nil
		}
		select {
		case <-fs.done:
			return fs, fmt.Errorf("fencefs exited before the mount was ready (%v); log:\n%s", fs.waitErr, fs.Log())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fs, fmt.Errorf("mount at %s not ready after %v; log:\n%s", fs.Dir, timeout, fs.Log())
		}
	}
}

// Path joins elements onto the mountpoint.
func (fs *FS) Path(elem ...string) string {
	return filepath.Join(append([]string{fs.Dir}, elem...)...)
}

// Pid returns the mount process's pid (for SIGSTOP/SIGCONT and kill -9).
func (fs *FS) Pid() int { return fs.cmd.Process.Pid }

// Done is closed when the mount process has exited.
func (fs *FS) Done() <-chan struct{} { return fs.done }

// ExitErr is the mount process's exit error, valid after Done is closed.
func (fs *FS) ExitErr() error { return fs.waitErr }

// Log returns what the mount process has printed so far.
func (fs *FS) Log() string {
	b, _ := os.ReadFile(fs.LogPath)
	return string(b)
}

// Signal sends sig to the mount process.
func (fs *FS) Signal(sig syscall.Signal) error { return fs.cmd.Process.Signal(sig) }

// Stop asks the mount process to exit (SIGTERM: flush, unmount, exit 0) and
// waits for it, returning its exit error, or an error if it does not exit in
// 30 s (it is then killed and force-unmounted).
func (fs *FS) Stop() error {
	_ = fs.cmd.Process.Signal(syscall.SIGCONT) // a frozen process cannot handle SIGTERM
	_ = fs.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-fs.done:
		if ok, _ := mounts.IsMounted(fs.Dir); ok {
			return fmt.Errorf("fencefs exited (%v) but %s is still mounted", fs.waitErr, fs.Dir)
		}
		return fs.waitErr
	case <-time.After(30 * time.Second):
		fs.forceCleanup()
		return fmt.Errorf("fencefs did not exit within 30s of SIGTERM; log:\n%s", fs.Log())
	}
}

// Kill sends SIGKILL to the mount process and waits for it (the kernel mount
// stays, dead, until Unmount). A process killed while one of its threads
// waits for its own mount (go-fuse's poll hack at mount time opens and
// closes a file on it) cannot exit until the kernel's FUSE connection is
// aborted: Kill aborts it after 5 s, as an unmount would.
func (fs *FS) Kill() {
	_ = fs.cmd.Process.Kill()
	select {
	case <-fs.done:
	case <-time.After(5 * time.Second):
		_ = abortConnection(fs.Dir)
		<-fs.done
	}
}

// abortConnection aborts the kernel's FUSE connection of the mount at dir
// (/sys/fs/fuse/connections/<minor>/abort, mounting fusectl if needed).
func abortConnection(dir string) error {
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(filepath.Clean(dir)))
	if err != nil || len(mounts) == 0 {
		return err
	}
	const ctl = "/sys/fs/fuse/connections"
	conn := fmt.Sprintf("%s/%d", ctl, mounts[0].Minor)
	if _, err := os.Stat(conn); err != nil {
		_ = exec.Command("mount", "-t", "fusectl", "none", ctl).Run()
	}
	return os.WriteFile(conn+"/abort", []byte("1"), 0)
}

// Unmount stops the mount if it is still running and makes sure nothing is
// left mounted or running. It is idempotent and is called in t.Cleanup. A
// mount process that had to be killed or force-unmounted is reported as an
// error only if it was still running normally (a test that killed it on
// purpose gets no error).
func (fs *FS) Unmount() error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.cleaned {
		return nil
	}
	fs.cleaned = true
	defer func() {
		liveMu.Lock()
		delete(live, fs)
		liveMu.Unlock()
	}()
	var errs []error
	select {
	case <-fs.done:
	default:
		if err := fs.Stop(); err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				errs = append(errs, err)
			}
		}
	}
	if err := mounts.Unmount(context.Background(), fs.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (fs *FS) forceCleanup() {
	_ = fs.cmd.Process.Signal(syscall.SIGCONT)
	_ = fs.cmd.Process.Kill()
	select {
	case <-fs.done:
	case <-time.After(10 * time.Second):
	}
	_ = mounts.Unmount(context.Background(), fs.Dir)
}

// Run runs the fencefs binary with args (and the gateway's environment plus
// env), bounded by ctx, and returns its combined output and exit error.
func Run(ctx context.Context, t testing.TB, gw *gateway.Gateway, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, Binary(t), args...)
	cmd.Env = os.Environ()
	if gw != nil {
		cmd.Env = append(cmd.Env, gw.Env()...)
	}
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Command returns an unstarted command running the fencefs binary with args
// and the gateway's environment; it is killed in t.Cleanup if still running.
func Command(t testing.TB, gw *gateway.Gateway, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(Binary(t), args...)
	cmd.Env = os.Environ()
	if gw != nil {
		cmd.Env = append(cmd.Env, gw.Env()...)
	}
	t.Cleanup(func() {
		if cmd.Process != nil && cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

// Scrape GETs url (a metrics or health endpoint of a process under test)
// and returns the status code and body; it fails the test if the request
// fails.
func Scrape(t testing.TB, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
