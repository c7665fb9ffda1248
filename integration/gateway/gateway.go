// Package gateway starts and stops the real S3 servers fencefs is tested
// against — the Versity S3 gateway (Start) and MinIO, with one drive or
// with four erasure-coded drives (StartMinIO) — on free loopback ports,
// with their data in a private directory. Both return a *Gateway with the
// same API (Client, CreateBucket, Env, Pid, Stop). Tests use ForTest,
// ForKind or ForEachServer (one subtest per server kind) and NewBucket;
// the `make run` demo and the benchmarks use Start.
//
// The binaries are found, in order, at $FENCEFS_VERSITYGW / $FENCEFS_MINIO,
// <repo>/bin/versitygw / <repo>/bin/minio (searching upwards from the
// working directory), and on $PATH. The Makefile installs the pinned
// versions into <repo>/bin.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/internal/procwait"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// PinnedVersion is the gateway version the Makefile installs and the test
// suite is written against.
const PinnedVersion = "v1.8.0"

// Options configures Start. The zero value is usable.
type Options struct {
	// Bin is the gateway binary; empty means FindBinary().
	Bin string
	// Dir holds the gateway's data (a "root" subdirectory) and its log; empty
	// means a new temporary directory removed by Stop.
	Dir string
	// Port to listen on at 127.0.0.1; 0 means a free port.
	Port int
	// AccessKey and SecretKey of the root user; empty means random ones.
	AccessKey, SecretKey string
	// Log receives the gateway's stdout/stderr; nil means a file gateway.log
	// in Dir.
	Log *os.File
	// KeepAlive runs the gateway with HTTP keep-alive, as AWS S3, MinIO
	// and Ceph RGW serve (the gateway's default closes every connection
	// after one request, which costs a TCP connection per request). Off by
	// default: v1.8.0 does not drain an empty aws-chunked (streaming
	// signature) request body, so the next request on that connection
	// fails to parse — minio-go sends such bodies for empty objects over
	// plain HTTP. fencefs never sends streaming bodies; the benchmark and
	// the connection-reuse test turn it on.
	KeepAlive bool
}

// Gateway is a running S3 server process — the Versity gateway (Start) or
// MinIO (StartMinIO); Kind says which. Stop it with Stop.
type Gateway struct {
	Kind      Kind
	Endpoint  string // http://127.0.0.1:PORT
	Addr      string // 127.0.0.1:PORT
	AccessKey string
	SecretKey string
	Region    string
	Dir       string // data and log directory
	LogPath   string // where the gateway's output goes ("" if Options.Log was set)

	cmd     *exec.Cmd
	tempDir bool
	done    chan struct{}
	stopMu  sync.Mutex
	stopped bool // GUARDED_BY(stopMu)
	waitErr error
}

// ErrNoBinary reports that no gateway binary was found.
var ErrNoBinary = errors.New("versitygw binary not found (run `make bin/versitygw`, or set FENCEFS_VERSITYGW)")

// FindBinary locates the gateway binary; see the package doc.
func FindBinary() (string, error) { return FindTool("FENCEFS_VERSITYGW", "versitygw", ErrNoBinary) }

// FindTool locates a binary the tests need: the path in the environment
// variable env (an error if it names nothing), else <repo>/bin/name (what
// make deps installs), else name on $PATH, else notFound.
func FindTool(env, name string, notFound error) (string, error) {
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", env, p, err)
		}
		return p, nil
	}
	if root, err := RepoRoot(); err == nil {
		p := filepath.Join(root, "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", notFound
}

// RepoRoot returns the directory holding fencefs's go.mod, searching upwards
// from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			strings.Contains(string(b), "module github.com/fencefs/fencefs") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("fencefs repository root not found above the working directory")
		}
		dir = parent
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// Start launches a gateway and returns once it answers S3 requests, or an
// error (with the tail of its log) if it exits or does not become ready
// within ctx's deadline (or 30 s).
func Start(ctx context.Context, opts Options) (*Gateway, error) {
	bin := opts.Bin
	if bin == "" {
		var err error
		if bin, err = FindBinary(); err != nil {
			return nil, err
		}
	}
	g, err := newServer(Versity, opts.Dir, opts.AccessKey, opts.SecretKey)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(g.Dir, "root")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, g.discard(err)
	}
	return g, g.startOnFreePort(ctx, opts.Port, func(port int) error {
		return g.launch(ctx, bin, root, port, opts.Log, opts.KeepAlive)
	})
}

// newServer returns a Server of kind with the given credentials (random
// ones when empty) and data directory (a new temporary one, removed by
// Stop, when empty).
func newServer(kind Kind, dir, accessKey, secretKey string) (*Gateway, error) {
	g := &Gateway{
		Kind:      kind,
		AccessKey: accessKey,
		SecretKey: secretKey,
		Region:    "us-east-1",
		Dir:       dir,
		done:      make(chan struct{}),
	}
	if g.AccessKey == "" {
		g.AccessKey = "AK" + strings.ToUpper(randomHex(8))
	}
	if g.SecretKey == "" {
		g.SecretKey = randomHex(20)
	}
	if g.Dir == "" {
		d, err := os.MkdirTemp("", "fencefs-"+string(kind)+"-")
		if err != nil {
			return nil, err
		}
		g.Dir, g.tempDir = d, true
	}
	return g, nil
}

// discard removes the server's directory if Start created it, and returns
// err: the end of a start that failed.
func (g *Gateway) discard(err error) error {
	if g.tempDir {
		os.RemoveAll(g.Dir)
	}
	return err
}

// startOnFreePort calls launch with port, or, when port is 0, with a free
// port: a free port can be taken between FreePort and the server's bind,
// so it retries with other ports a few times.
func (g *Gateway) startOnFreePort(ctx context.Context, port int, launch func(port int) error) error {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		p := port
		if p == 0 {
			var err error
			if p, err = FreePort(); err != nil {
				return g.discard(err)
			}
		}
		err := launch(p)
		if err == nil {
			return nil
		}
		lastErr = err
		if port != 0 || ctx.Err() != nil {
			break
		}
	}
	return g.discard(lastErr)
}

func (g *Gateway) launch(ctx context.Context, bin, root string, port int, logf *os.File, keepAlive bool) error {
	g.Addr = fmt.Sprintf("127.0.0.1:%d", port)
	g.Endpoint = "http://" + g.Addr
	args := []string{"--port", g.Addr, "--region", g.Region, "--quiet"}
	if keepAlive {
		args = append(args, "--keep-alive")
	}
	cmd := exec.Command(bin, append(args, "posix", root)...)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+g.AccessKey, "ROOT_SECRET_ACCESS_KEY="+g.SecretKey)
	// Any HTTP answer (even 403 for an anonymous request) means the S3 API
	// is serving.
	return g.run(ctx, cmd, logf, "gateway.log", "/", func(*http.Response) bool { return true })
}

// run starts cmd (the server, listening at g.Addr) with its output in logf
// or in the file logName in g.Dir, and waits until a GET of readyPath gets
// an answer ready accepts. A server that exits or is not ready within ctx's
// deadline (at most 30 s) is an error carrying the tail of its log.
func (g *Gateway) run(ctx context.Context, cmd *exec.Cmd, logf *os.File, logName, readyPath string, ready func(*http.Response) bool) error {
	// Its own process group, so that a Ctrl-C in a terminal running `make run`
	// reaches us, and we stop the server in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if logf != nil {
		cmd.Stdout, cmd.Stderr = logf, logf
	} else {
		g.LogPath = filepath.Join(g.Dir, logName)
		f, err := os.OpenFile(g.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	g.cmd = cmd
	g.done = make(chan struct{})
	go func() { g.waitErr = cmd.Wait(); close(g.done) }()

	client := &http.Client{Timeout: 2 * time.Second}
	err := procwait.Ready(ctx, 30*time.Second, g.done, func() bool {
		resp, err := client.Get(g.Endpoint + readyPath)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return ready(resp)
	})
	switch {
	case errors.Is(err, procwait.ErrExited):
		return fmt.Errorf("%s exited before becoming ready (%v): %s", g.Kind, g.waitErr, g.logTail())
	case err != nil:
		g.kill()
		return fmt.Errorf("%s at %s not ready: %w: %s", g.Kind, g.Addr, err, g.logTail())
	}
	return nil
}

func (g *Gateway) logTail() string {
	return procwait.LogTail(g.LogPath)
}

func (g *Gateway) kill() {
	if g.cmd != nil && g.cmd.Process != nil {
		_ = g.cmd.Process.Kill()
		<-g.done
	}
}

// Stop terminates the gateway (SIGTERM, then SIGKILL after 5 s) and removes
// its directory if Start created it. Safe to call more than once.
func (g *Gateway) Stop() error {
	g.stopMu.Lock()
	defer g.stopMu.Unlock()
	if g.stopped {
		return nil
	}
	g.stopped = true
	if g.cmd != nil && g.cmd.Process != nil {
		_ = g.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-g.done:
		case <-time.After(5 * time.Second):
			_ = g.cmd.Process.Kill()
			<-g.done
		}
	}
	if g.tempDir {
		return os.RemoveAll(g.Dir)
	}
	return nil
}

// Pid returns the gateway's process id.
func (g *Gateway) Pid() int { return g.cmd.Process.Pid }

// Client returns a plain minio-go client for the gateway: tests use it as
// "any S3 tool" to check what fencefs wrote, independently of fencefs's code.
func (g *Gateway) Client() *minio.Client {
	c, err := minio.New(g.Addr, &minio.Options{
		Creds:        credentials.NewStaticV4(g.AccessKey, g.SecretKey, ""),
		Secure:       false,
		Region:       g.Region,
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		panic(err) // only fails on a malformed endpoint, which we built
	}
	return c
}

// CreateBucket creates a bucket through S3 CreateBucket (the gateway's buckets
// must not be made as directories).
func (g *Gateway) CreateBucket(ctx context.Context, name string) error {
	return g.Client().MakeBucket(ctx, name, minio.MakeBucketOptions{Region: g.Region})
}

// Env returns the environment variables a fencefs process needs to reach the
// gateway (credentials, endpoint and region), as "K=V" strings.
func (g *Gateway) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + g.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + g.SecretKey,
		"AWS_REGION=" + g.Region,
		"AWS_ENDPOINT_URL_S3=" + g.Endpoint,
	}
}
