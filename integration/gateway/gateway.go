// Package gateway starts and stops a local Versity S3 gateway (the real S3
// server fencefs is tested against) on a free loopback port, with its data in
// a private directory. It is used by tests (ForTest, NewBucket), by the
// `make run` demo and by the benchmarks.
//
// The binary is found, in order, at $FENCEFS_VERSITYGW, <repo>/bin/versitygw
// (searching upwards from the working directory), and on $PATH. The Makefile
// installs the pinned version into <repo>/bin.
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

// Gateway is a running gateway process. Stop it with Stop.
type Gateway struct {
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
	g := &Gateway{
		AccessKey: opts.AccessKey,
		SecretKey: opts.SecretKey,
		Region:    "us-east-1",
		Dir:       opts.Dir,
		done:      make(chan struct{}),
	}
	if g.AccessKey == "" {
		g.AccessKey = "AK" + strings.ToUpper(randomHex(8))
	}
	if g.SecretKey == "" {
		g.SecretKey = randomHex(20)
	}
	if g.Dir == "" {
		d, err := os.MkdirTemp("", "fencefs-gw-")
		if err != nil {
			return nil, err
		}
		g.Dir, g.tempDir = d, true
	}
	root := filepath.Join(g.Dir, "root")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	var lastErr error
	// A free port can be taken between FreePort and the gateway's bind:
	// retry with another port a few times.
	for attempt := 0; attempt < 5; attempt++ {
		port := opts.Port
		if port == 0 {
			p, err := FreePort()
			if err != nil {
				return nil, err
			}
			port = p
		}
		err := g.launch(ctx, bin, root, port, opts.Log, opts.KeepAlive)
		if err == nil {
			return g, nil
		}
		lastErr = err
		if opts.Port != 0 || ctx.Err() != nil {
			break
		}
	}
	if g.tempDir {
		os.RemoveAll(g.Dir)
	}
	return nil, lastErr
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
	// Its own process group, so that a Ctrl-C in a terminal running `make run`
	// reaches us, and we stop the gateway in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if logf != nil {
		cmd.Stdout, cmd.Stderr = logf, logf
	} else {
		g.LogPath = filepath.Join(g.Dir, "gateway.log")
		f, err := os.OpenFile(g.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	g.cmd = cmd
	g.done = make(chan struct{})
	go func() { g.waitErr = cmd.Wait(); close(g.done) }()

	client := &http.Client{Timeout: 2 * time.Second}
	err := procwait.Ready(ctx, 30*time.Second, g.done, func() bool {
		// Any HTTP answer (even 403 for an anonymous request) means the
		// S3 API is serving.
		resp, err := client.Get(g.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	switch {
	case errors.Is(err, procwait.ErrExited):
		return fmt.Errorf("versitygw exited before becoming ready (%v): %s", g.waitErr, g.logTail())
	case err != nil:
		g.kill()
		return fmt.Errorf("versitygw at %s not ready: %w: %s", g.Addr, err, g.logTail())
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
