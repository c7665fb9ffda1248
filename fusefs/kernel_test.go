package fusefs

// Kernel tests: the filesystem is mounted by a subprocess (this test binary
// re-executed with $FENCEFS_FUSEFS_SERVE set, see serveMain) against the real
// S3 gateway with the real s3 store and fencing Guard, and driven from the
// test process with plain syscalls. The test process never serves a mount
// it touches (that can deadlock). Every test arms a watchdog that
// force-unmounts its mounts when it runs too long, so a hung kernel request
// turns into a test failure (ENOTCONN), not a hang; every mount is unmounted
// in t.Cleanup.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/internal/mounts"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/s3"
	"github.com/minio/minio-go/v7"
)

const serveEnv = "FENCEFS_FUSEFS_SERVE"

func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) != "" {
		os.Exit(serveMain())
	}
	os.Exit(m.Run())
}

// serveConfig is what the test passes to its mount subprocess.
type serveConfig struct {
	Endpoint, AccessKey, SecretKey, Region, Bucket string

	Prefix, Domain   string
	Mountpoint       string
	CacheDir         string
	Token            uint64 // 0: bind nothing (read-only unless Mode is off)
	Mode             string // strict (default), fast, off
	Holder           string
	ReadOnly         bool
	MaxDirRename     int
	MetaTTL          time.Duration
	AttrTTL          time.Duration
	EntryTTL         time.Duration
	LeaderCacheTTL   time.Duration
	TombstoneDeletes bool
	StreamStaging    int64
	AttrWriteback    time.Duration
	Debug            bool
}

// serveMain runs in the mount subprocess: mount, print "ready", serve until
// SIGTERM (then unmount, committing dirty files) or an external unmount.
func serveMain() int {
	var c serveConfig
	if err := json.Unmarshal([]byte(os.Getenv(serveEnv)), &c); err != nil {
		fmt.Fprintln(os.Stderr, "serve: bad config:", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store, err := s3.New(ctx, s3.Config{Endpoint: c.Endpoint, Bucket: c.Bucket, Region: c.Region,
		AccessKey: c.AccessKey, SecretKey: c.SecretKey, PathStyle: true, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve: store:", err)
		return 1
	}
	mode := fencing.Mode(c.Mode)
	if mode == "" {
		mode = fencing.ModeStrict
	}
	guard, err := fencing.New(store, fencing.Config{Mode: mode, Domain: c.Domain, Holder: c.Holder,
		TombstoneDeletes: c.TombstoneDeletes, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve: guard:", err)
		return 1
	}
	if c.Token != 0 {
		if _, err := guard.Bind(ctx, c.Token); err != nil {
			fmt.Fprintln(os.Stderr, "serve: bind:", err)
			return 1
		}
	}
	m, err := Mount(ctx, c.Mountpoint, Options{
		Store: store, Guard: guard, Prefix: c.Prefix, FenceDomain: c.Domain, CacheDir: c.CacheDir,
		UID: uint32(os.Getuid()), GID: uint32(os.Getgid()),
		AttrTTL: c.AttrTTL, EntryTTL: c.EntryTTL, MetaCacheTTL: c.MetaTTL, LeaderCacheTTL: c.LeaderCacheTTL,
		Access: Access{ReadOnly: c.ReadOnly}, MaxDirRename: c.MaxDirRename, StreamStaging: c.StreamStaging, Logger: log, Debug: c.Debug,
		AttrWriteback: c.AttrWriteback,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve: mount:", err)
		return 1
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	done := make(chan struct{})
	go func() { m.Wait(); close(done) }()
	select {
	case <-sig:
		uctx, ucancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := m.Unmount(uctx)
		ucancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "serve: unmount:", err)
			_ = mounts.Lazy(context.Background(), c.Mountpoint)
		}
		<-done
	case <-done:
	}
	gctx, gcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer gcancel()
	_ = guard.Close(gctx)
	return 0
}

// kt is one kernel test: a gateway, a bucket, its mounts and a watchdog.
type kt struct {
	*testing.T
	gw     *gateway.Gateway
	bucket string
	s3     *minio.Client

	mu     sync.Mutex
	mounts []*testMount // GUARDED_BY(mu)
}

// newKT marks the test parallel, starts a gateway and a bucket, and arms a
// watchdog of timeout. Without /dev/fuse, fusermount3 or the gateway it
// skips (fails in CI).
func newKT(t *testing.T, timeout time.Duration) *kt {
	t.Helper()
	// Kernel tests are independent (each has its own gateway, bucket and
	// mount processes) and mostly wait on I/O.
	t.Parallel()
	return newKTAlone(t, timeout)
}

// newKTAlone is newKT for a test that must not run beside the others:
// their fork+exec closes this process's descriptors in the child, and
// each such close is a FUSE flush that commits a file being written
// (which a test of what a failed write leaves in the bucket cannot have).
func newKTAlone(t *testing.T, timeout time.Duration) *kt {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		gateway.SkipOrFail(t, "no /dev/fuse: %v", err)
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		gateway.SkipOrFail(t, "fusermount3 not found: %v", err)
	}
	gw := gateway.ForTest(t)
	k := &kt{T: t, gw: gw, bucket: gateway.NewBucket(t, gw), s3: gw.Client()}
	timer := time.AfterFunc(timeout, func() {
		t.Errorf("test ran longer than %v: force-unmounting its mounts", timeout)
		k.mu.Lock()
		ms := append([]*testMount(nil), k.mounts...)
		k.mu.Unlock()
		for _, m := range ms {
			m.kill()
		}
	})
	t.Cleanup(func() { timer.Stop() })
	return k
}

// testMount is one mount subprocess.
type testMount struct {
	t    *kt
	Dir  string
	cfg  serveConfig
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
}

// mount starts a mount of the test's bucket. cfg's connection fields and
// mountpoint are filled in; Token, Prefix, Mode… come from the caller.
func (k *kt) mount(cfg serveConfig) *testMount {
	k.Helper()
	cfg.Endpoint, cfg.AccessKey, cfg.SecretKey, cfg.Region = k.gw.Endpoint, k.gw.AccessKey, k.gw.SecretKey, k.gw.Region
	if cfg.Bucket == "" {
		cfg.Bucket = k.bucket
	}
	cfg.Mountpoint = k.TempDir()
	cfg.CacheDir = k.TempDir()
	if cfg.MaxDirRename == 0 {
		cfg.MaxDirRename = 1000
	}
	if cfg.MetaTTL == 0 {
		cfg.MetaTTL = time.Second
	}
	if cfg.AttrTTL == 0 {
		cfg.AttrTTL = time.Second
	}
	if cfg.EntryTTL == 0 {
		cfg.EntryTTL = time.Second
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		k.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(k.TempDir(), "mount.log"))
	if err != nil {
		k.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"="+string(js))
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		k.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		k.Fatal(err)
	}
	m := &testMount{t: k, Dir: cfg.Mountpoint, cfg: cfg, cmd: cmd, log: logf, done: make(chan struct{})}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ok := false
		for sc.Scan() {
			if sc.Text() == "ready" {
				ok = true
				break
			}
		}
		ready <- ok
		io.Copy(io.Discard, stdout)
	}()
	go func() { cmd.Wait(); close(m.done) }()
	k.mu.Lock()
	k.mounts = append(k.mounts, m)
	k.mu.Unlock()
	k.Cleanup(m.stop)
	select {
	case ok := <-ready:
		if !ok {
			<-m.done
			k.Fatalf("mount process exited before it was ready:\n%s", m.logTail())
		}
	case <-time.After(60 * time.Second):
		k.Fatalf("mount not ready after 60s:\n%s", m.logTail())
	}
	return m
}

// Path returns the path of rel inside the mount.
func (m *testMount) Path(rel string) string { return filepath.Join(m.Dir, rel) }

func (m *testMount) logTail() string {
	b, _ := os.ReadFile(m.log.Name())
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// stop unmounts: SIGTERM (the process commits and unmounts), then
// fusermount3 -u, -uz, and SIGKILL, whatever it takes; the mount log is
// printed when the test failed (or FENCEFS_TEST_LOGS is set).
func (m *testMount) stop() {
	defer m.log.Close()
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		m.t.Errorf("mount %s did not exit 30s after SIGTERM", m.Dir)
		m.kill()
	}
	if isMounted(m.Dir) {
		m.t.Errorf("%s still mounted after the mount process exited", m.Dir)
		_ = mounts.Lazy(context.Background(), m.Dir)
	}
	if m.t.Failed() || os.Getenv("FENCEFS_TEST_LOGS") != "" {
		m.t.Logf("mount log of %s:\n%s", m.Dir, m.logTail())
	}
}

// kill force-unmounts and kills the mount process (watchdog, stuck stop).
func (m *testMount) kill() {
	_ = mounts.Lazy(context.Background(), m.Dir)
	_ = m.cmd.Process.Kill()
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
	}
}

// isMounted reports whether dir is a mountpoint (mounts.IsMounted).
func isMounted(dir string) bool {
	ok, _ := mounts.IsMounted(dir)
	return ok
}

// Helpers on the S3 side ("any S3 client").

func (k *kt) putObject(t testing.TB, key string, body []byte, meta map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := k.s3.PutObject(ctx, k.bucket, key, bytes.NewReader(body), int64(len(body)),
		minio.PutObjectOptions{UserMetadata: meta, DisableMultipart: true})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func (k *kt) getObject(key string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	o, err := k.s3.GetObject(ctx, k.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer o.Close()
	return io.ReadAll(o)
}

func (k *kt) statObject(key string) (minio.ObjectInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return k.s3.StatObject(ctx, k.bucket, key, minio.StatObjectOptions{})
}

// userMeta returns an object's user metadata with lower-case keys and no
// x-amz-meta- prefix.
func (k *kt) userMeta(t testing.TB, key string) map[string]string {
	t.Helper()
	info, err := k.statObject(key)
	if err != nil {
		t.Fatalf("stat %s: %v", key, err)
	}
	out := map[string]string{}
	for h, v := range info.Metadata {
		lh := strings.ToLower(h)
		if strings.HasPrefix(lh, "x-amz-meta-") && len(v) > 0 {
			out[strings.TrimPrefix(lh, "x-amz-meta-")] = v[0]
		}
	}
	return out
}

// objectExists reports whether key holds a live object: absent keys and
// fencing tombstones (written in place of keys an older epoch may still
// commit to) do not count.
func (k *kt) objectExists(t testing.TB, key string) bool {
	t.Helper()
	info, err := k.statObject(key)
	if err == nil {
		meta := map[string]string{}
		for h, v := range info.Metadata {
			if lh := strings.ToLower(h); strings.HasPrefix(lh, "x-amz-meta-") && len(v) > 0 {
				meta[strings.TrimPrefix(lh, "x-amz-meta-")] = v[0]
			}
		}
		return !fencing.IsTombstone(objstore.ObjectInfo{Key: key, Size: info.Size, Meta: meta})
	}
	var er minio.ErrorResponse
	if errors.As(err, &er) && (er.Code == "NoSuchKey" || er.StatusCode == 404) {
		return false
	}
	t.Fatalf("stat %s: %v", key, err)
	return false
}

// errnoOf extracts the errno of a failed syscall (0 for nil).
func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.Errno(0xffff)
}
