package csidriver_test

// End-to-end tests of `fencefs csi`: the real binary as a subprocess,
// called over its unix socket, mounting real FUSE filesystems from a real
// S3 server (the Versity gateway of integration/gateway) on 127.0.0.1.
// Without /dev/fuse, fusermount3 or the gateway they skip, and fail when
// CI is set.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/fencefs/fencefs/csidriver"
	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
	"github.com/moby/sys/mountinfo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestMain(m *testing.M) {
	if os.Getenv(containerInitEnv) == "1" {
		os.Exit(containerInit())
	}
	os.Exit(harness.Main(m))
}

// node is what a test's driver runs on: the S3 server and a bucket, the
// directory that plays kubelet's, and the driver's state directory.
type node struct {
	gw      *gateway.Gateway
	bucket  string
	bin     string
	kubelet string // the targets are made below it
	state   string
	sock    string
}

// newNode prepares a node for t; its cleanup unmounts every fencefs
// mount left under the kubelet directory (and fails the test if there
// was one: every test unpublishes what it published).
func newNode(t *testing.T) *node {
	t.Helper()
	harness.RequireFUSE(t)
	return newNodeWith(t, gateway.ForTest(t))
}

// newNodeWith is newNode on the S3 server gw.
func newNodeWith(t *testing.T, gw *gateway.Gateway) *node {
	t.Helper()
	n := &node{gw: gw, bin: harness.Binary(t), kubelet: t.TempDir(), state: t.TempDir()}
	n.bucket = gateway.NewBucket(t, n.gw)
	// A unix socket path has at most 107 bytes: not under t.TempDir().
	dir, err := os.MkdirTemp("", "fencefs-csi-")
	if err != nil {
		t.Fatal(err)
	}
	n.sock = filepath.Join(dir, "csi.sock")
	t.Cleanup(func() {
		os.RemoveAll(dir)
		for _, m := range fencefsMounts(t, n.kubelet) {
			t.Errorf("a fencefs mount was left at %s: unmounting it", m)
			_ = exec.Command("fusermount3", "-uz", m).Run()
		}
	})
	return n
}

// fencefsMounts lists the fencefs mounts at or below dir.
func fencefsMounts(t *testing.T, dir string) []string {
	t.Helper()
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		if m.FSType == csidriver.FSType {
			out = append(out, m.Mountpoint)
		}
	}
	return out
}

// isFencefsMount reports whether dir is a fencefs mountpoint.
func isFencefsMount(t *testing.T, dir string) bool {
	t.Helper()
	for _, m := range fencefsMounts(t, dir) {
		if m == dir {
			return true
		}
	}
	return false
}

// driver is one running `fencefs csi` and a client of it.
type driver struct {
	cmd  *exec.Cmd  // without a container
	c    *container // in one
	log  *syncBuffer
	done chan struct{}
	conn *grpc.ClientConn
	csi.NodeClient
	csi.IdentityClient
}

// driverConfig is how a test runs `fencefs csi`.
type driverConfig struct {
	// mounter is the socket of the mounter the driver asks to mount and
	// unmount; "" mounts by itself.
	mounter string
	// container runs the driver as the main process of a container of
	// its own (container_e2e_helpers_test.go), else as the test's child.
	container bool
}

// syncBuffer is the driver's output, written by its process while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer // GUARDED_BY(mu)
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startDriver starts `fencefs csi` on n, mounting by itself, and waits
// until it answers; it is stopped in t.Cleanup (if the test has not
// killed it).
func (n *node) startDriver(t *testing.T) *driver {
	t.Helper()
	return n.startDriverWith(t, driverConfig{})
}

// startDriverWith starts `fencefs csi` on n as cfg says and waits until it
// answers (the mounter's Probe included); it is stopped in t.Cleanup.
func (n *node) startDriverWith(t *testing.T, cfg driverConfig) *driver {
	t.Helper()
	d := &driver{log: &syncBuffer{}, done: make(chan struct{})}
	args := []string{n.bin, "csi", "--endpoint", "unix://" + n.sock, "--node-id", "node-1",
		"--state-dir", n.state, "--kubelet-dir", n.kubelet, "--log-level", "debug"}
	if cfg.mounter != "" {
		args = append(args, "--mounter-socket", cfg.mounter)
	}
	// The driver's own environment holds no credential: each volume's
	// secret gives them.
	env := []string{"PATH=" + os.Getenv("PATH")}
	if cfg.container {
		d.c = startContainer(t, d.log, env, args...)
		d.done = d.c.done
	} else {
		d.cmd = exec.Command(args[0], args[1:]...)
		d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
		d.cmd.Env = env
		if err := d.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = d.cmd.Wait(); close(d.done) }()
		t.Cleanup(func() { d.stop(t) })
	}
	conn, err := grpc.NewClient("unix://"+n.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	d.conn, d.NodeClient, d.IdentityClient = conn, csi.NewNodeClient(conn), csi.NewIdentityClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, err := d.Probe(ctx, &csi.ProbeRequest{})
		if err == nil {
			return d
		}
		select {
		case <-d.done:
			t.Fatalf("fencefs csi exited: %s", d.log)
		case <-ctx.Done():
			t.Fatalf("fencefs csi does not answer: %v; log: %s", err, d.log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop ends the driver with SIGTERM (the mounts stay, but those of its
// container, if it has one).
func (d *driver) stop(t *testing.T) {
	t.Helper()
	if d.c != nil {
		d.c.stop(t)
		return
	}
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
		t.Errorf("fencefs csi did not stop on SIGTERM; log: %s", d.log)
	}
}

// kill ends the driver with SIGKILL, as a crash would (and so its
// container, if it has one, with every process in it).
func (d *driver) kill(t *testing.T) {
	t.Helper()
	if d.c != nil {
		d.c.crash(t)
		return
	}
	_ = d.cmd.Process.Kill()
	<-d.done
}

// mounter is one running `fencefs csi mounter`, the main process of a
// container of its own.
type mounter struct {
	c    *container
	log  *syncBuffer
	sock string
}

// startMounter starts the mounter of n and waits until it answers; it is
// stopped in t.Cleanup (and its container with it: the mounts it
// started die).
func (n *node) startMounter(t *testing.T) *mounter {
	t.Helper()
	m := &mounter{log: &syncBuffer{}, sock: filepath.Join(filepath.Dir(n.sock), "mounter.sock")}
	m.c = startContainer(t, m.log, []string{"PATH=" + os.Getenv("PATH")},
		n.bin, "csi", "mounter", "--socket", m.sock, "--state-dir", n.state, "--kubelet-dir", n.kubelet, "--log-level", "debug")
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", m.sock)
	}}}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get("http://mounter/v1/probe")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("the mounter's probe: %s; log: %s", resp.Status, m.log)
			}
			return m
		}
		if m.c.exited() || time.Now().After(deadline) {
			t.Fatalf("fencefs csi mounter does not answer: %v; log: %s", err, m.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// attrs are the volume attributes of a volume of n's bucket.
func (n *node) attrs(extra ...string) map[string]string {
	a := map[string]string{csidriver.AttrBucket: n.bucket, "endpoint": n.gw.Endpoint, "region": n.gw.Region}
	for i := 0; i+1 < len(extra); i += 2 {
		a[extra[i]] = extra[i+1]
	}
	return a
}

// secrets are the credentials of n's server, as a volume's secret.
func (n *node) secrets() map[string]string {
	return map[string]string{csidriver.SecretAccessKeyID: n.gw.AccessKey, csidriver.SecretSecretAccessKey: n.gw.SecretKey}
}

// publishReq publishes volume id of n's bucket at target.
func (n *node) publishReq(id, target string, mode csi.VolumeCapability_AccessMode_Mode, attrs map[string]string) *csi.NodePublishVolumeRequest {
	return &csi.NodePublishVolumeRequest{
		VolumeId:   id,
		TargetPath: target,
		VolumeCapability: &csi.VolumeCapability{
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
		},
		VolumeContext: attrs,
		Secrets:       n.secrets(),
	}
}

// callCtx bounds one call of a test.
func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// mountProcesses returns the pids of the live `fencefs mount` processes
// serving target (argv: fencefs mount BUCKET TARGET …).
func mountProcesses(t *testing.T, target string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(argv) < 4 || argv[1] != "mount" || argv[3] != target {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i > 0 && bytes.HasPrefix(st[i+1:], []byte(" Z")) {
				continue // exited; its parent has not reaped it
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

// waitGone waits until no mount process serves target.
func waitGone(t *testing.T, target string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(mountProcesses(t, target)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the mount process of %s is still running: %v", target, mountProcesses(t, target))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// bindToken binds token ("auto" or a number) on the mount at dir, as
// `fencefs run` does.
func bindToken(t *testing.T, dir, token string) {
	t.Helper()
	if err := syscall.Setxattr(dir, "user.fencefs.token", []byte(token), 0); err != nil {
		t.Fatalf("binding token %s on %s: %v", token, dir, err)
	}
}

// writeFile writes data to path and closes it (the close commits).
func writeFile(path, data string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(data)
	return errors.Join(werr, f.Close())
}

// object reads key of n's bucket with a plain S3 client.
func (n *node) object(t *testing.T, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := n.gw.Client().GetObject(ctx, n.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return string(b)
}

// putObject stores key in n's bucket with a plain S3 client.
func (n *node) putObject(t *testing.T, key, data string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := n.gw.Client().PutObject(ctx, n.bucket, key, strings.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}
