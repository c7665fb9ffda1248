// Package etcdserver starts and stops a single-member etcd (the real
// coordinator `fencefs run --etcd` is tested against) on free loopback
// ports, with its data in a private directory, optionally serving clients
// over TLS and with authentication enabled.
//
// The binary is found, in order, at $FENCEFS_ETCD, <repo>/bin/etcd
// (searching upwards from the working directory), and on $PATH. `make deps`
// builds the pinned version from tools/etcd into <repo>/bin.
package etcdserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/internal/procwait"
)

// ErrNoBinary reports that no etcd binary was found.
var ErrNoBinary = errors.New("etcd binary not found (run `make bin/etcd`, or set FENCEFS_ETCD)")

// FindBinary locates the etcd binary; see the package doc.
func FindBinary() (string, error) { return gateway.FindTool("FENCEFS_ETCD", "etcd", ErrNoBinary) }

// TLS is the certificate material of a server that serves clients over
// TLS (PEM files).
type TLS struct {
	CertFile, KeyFile string
}

// Options configures Start. The zero value is a plain-HTTP server in a
// temporary directory.
type Options struct {
	// Bin is the etcd binary; empty means FindBinary().
	Bin string
	// Dir holds the data and the log; empty means a temporary directory
	// removed by Stop.
	Dir string
	// TLS, if set, makes the client URL https:// with these files.
	TLS *TLS
}

// Server is a running etcd. Stop it with Stop.
type Server struct {
	// Endpoint is the client URL (http:// or https://127.0.0.1:PORT).
	Endpoint string
	Dir      string
	LogPath  string

	cmd     *exec.Cmd
	tempDir bool
	done    chan struct{}
	waitErr error
	stopMu  sync.Mutex
	stopped bool // GUARDED_BY(stopMu)
}

// Start launches etcd and returns once it reports healthy, or an error
// (with the tail of its log).
func Start(ctx context.Context, opts Options) (*Server, error) {
	bin := opts.Bin
	if bin == "" {
		var err error
		if bin, err = FindBinary(); err != nil {
			return nil, err
		}
	}
	s := &Server{Dir: opts.Dir}
	if s.Dir == "" {
		d, err := os.MkdirTemp("", "fencefs-etcd-")
		if err != nil {
			return nil, err
		}
		s.Dir, s.tempDir = d, true
	}
	var lastErr error
	// A free port can be taken before etcd binds it: retry a few times.
	for attempt := 0; attempt < 5 && ctx.Err() == nil; attempt++ {
		if lastErr = s.launch(ctx, bin, opts.TLS); lastErr == nil {
			return s, nil
		}
	}
	if s.tempDir {
		os.RemoveAll(s.Dir)
	}
	return nil, lastErr
}

func (s *Server) launch(ctx context.Context, bin string, tlsFiles *TLS) error {
	cport, err := gateway.FreePort()
	if err != nil {
		return err
	}
	pport, err := gateway.FreePort()
	if err != nil {
		return err
	}
	scheme := "http"
	if tlsFiles != nil {
		scheme = "https"
	}
	s.Endpoint = fmt.Sprintf("%s://127.0.0.1:%d", scheme, cport)
	peer := fmt.Sprintf("http://127.0.0.1:%d", pport)
	data := filepath.Join(s.Dir, "data")
	_ = os.RemoveAll(data) // a failed earlier attempt's
	args := []string{
		"--name", "test", "--data-dir", data,
		"--listen-client-urls", s.Endpoint, "--advertise-client-urls", s.Endpoint,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "test=" + peer, "--initial-cluster-state", "new",
		"--log-level", "warn",
	}
	if tlsFiles != nil {
		args = append(args, "--cert-file", tlsFiles.CertFile, "--key-file", tlsFiles.KeyFile)
	}
	s.LogPath = filepath.Join(s.Dir, "etcd.log")
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { s.waitErr = cmd.Wait(); close(s.done) }()
	return s.waitHealthy(ctx, tlsFiles != nil)
}

// waitHealthy polls /health (over TLS without verifying: it only tells
// that the server is up) until it answers {"health":"true"}.
func (s *Server) waitHealthy(ctx context.Context, insecureTLS bool) error {
	client := insecureClient(insecureTLS)
	err := procwait.Ready(ctx, 30*time.Second, s.done, func() bool {
		resp, err := client.Get(s.Endpoint + "/health")
		if err != nil {
			return false
		}
		b := make([]byte, 256)
		n, _ := resp.Body.Read(b)
		resp.Body.Close()
		return strings.Contains(string(b[:n]), `"health":"true"`)
	})
	switch {
	case errors.Is(err, procwait.ErrExited):
		return fmt.Errorf("etcd exited before becoming ready (%v): %s", s.waitErr, s.LogTail())
	case err != nil:
		s.kill()
		return fmt.Errorf("etcd at %s not ready: %w: %s", s.Endpoint, err, s.LogTail())
	}
	return nil
}

// LogTail returns the end of the server's log, for failure messages.
func (s *Server) LogTail() string { return procwait.LogTail(s.LogPath) }

func (s *Server) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// Kill stops etcd at once (SIGKILL), as a crash or a lost machine would;
// Stop still removes its directory.
func (s *Server) Kill() {
	_ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

// Pid returns the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Stop terminates etcd (SIGTERM, then SIGKILL after 5 s) and removes its
// directory if Start created it. Safe to call more than once.
func (s *Server) Stop() error {
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	if s.cmd != nil && s.cmd.Process != nil {
		_ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGCONT)
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			s.kill()
		}
	}
	if s.tempDir {
		return os.RemoveAll(s.Dir)
	}
	return nil
}

// ForTest starts etcd for the test (opts.Dir defaults to a test
// directory) and stops it in t.Cleanup. Without an etcd binary it skips
// (fails when CI is set).
func ForTest(t testing.TB, opts Options) *Server {
	t.Helper()
	bin, err := FindBinary()
	if err != nil {
		gateway.SkipOrFail(t, "%v", err)
	}
	opts.Bin = bin
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop etcd: %v", err)
		}
	})
	return s
}
