// Package kubeserver starts and stops a real kube-apiserver (the API
// server `fencefs run --kubernetes-lease` is tested against) on a free
// loopback port, over its own etcd (integration/etcdserver), with RBAC
// authorization, static token authentication for two users, a generated
// service-account key pair and a self-signed serving certificate; it writes
// a kubeconfig per user.
//
// The binary is found, in order, at $FENCEFS_KUBE_APISERVER,
// <repo>/bin/kube-apiserver (searching upwards from the working
// directory), and on $PATH. `make deps` builds the pinned version from
// tools/kube-apiserver into <repo>/bin.
package kubeserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/etcdserver"
	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/internal/procwait"
)

// ErrNoBinary reports that no kube-apiserver binary was found.
var ErrNoBinary = errors.New("kube-apiserver binary not found (run `make bin/kube-apiserver`, or set FENCEFS_KUBE_APISERVER)")

// FindBinary locates the kube-apiserver binary; see the package doc.
func FindBinary() (string, error) {
	return gateway.FindTool("FENCEFS_KUBE_APISERVER", "kube-apiserver", ErrNoBinary)
}

// The users of the token file. Admin is in system:masters; Restricted has
// no grant but what a test gives it (Server.Kubeconfig(Restricted)).
const (
	Admin      = "admin"
	Restricted = "restricted"
)

// Server is a running kube-apiserver and its etcd. Stop it with Stop.
type Server struct {
	// URL is the secure endpoint, https://127.0.0.1:PORT.
	URL     string
	Dir     string
	CAFile  string
	LogPath string
	Etcd    *etcdserver.Server

	bin     string
	args    []string
	tokens  map[string]string // user → bearer token
	mu      sync.Mutex
	cmd     *exec.Cmd     // GUARDED_BY(mu)
	done    chan struct{} // GUARDED_BY(mu)
	waitErr error
}

// Start launches etcd and kube-apiserver in dir and returns once /readyz
// answers ok, or an error (with the tail of the log).
func Start(ctx context.Context, bin, dir string) (*Server, error) {
	if err := os.MkdirAll(filepath.Join(dir, "etcd"), 0o700); err != nil {
		return nil, err
	}
	etcd, err := etcdserver.Start(ctx, etcdserver.Options{Dir: filepath.Join(dir, "etcd")})
	if err != nil {
		return nil, fmt.Errorf("start etcd for kube-apiserver: %w", err)
	}
	s := &Server{Dir: dir, Etcd: etcd, bin: bin, LogPath: filepath.Join(dir, "kube-apiserver.log"), tokens: map[string]string{}}
	if err := s.prepare(); err != nil {
		etcd.Stop()
		return nil, err
	}
	var lastErr error
	// A free port can be taken before the server binds it: retry a few times.
	for attempt := 0; attempt < 3 && ctx.Err() == nil; attempt++ {
		port, err := gateway.FreePort()
		if err != nil {
			lastErr = err
			break
		}
		s.URL = "https://127.0.0.1:" + strconv.Itoa(port)
		s.args = s.flags(port)
		if lastErr = s.launch(ctx); lastErr == nil {
			return s, nil
		}
	}
	etcd.Stop()
	return nil, lastErr
}

// prepare writes the certificates, the service-account key pair, the token
// file and the kubeconfigs' common parts.
func (s *Server) prepare() error {
	certs, err := etcdserver.NewCerts(s.Dir)
	if err != nil {
		return err
	}
	s.CAFile = certs.CAFile
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(s.Dir, "sa.key"), "EC PRIVATE KEY", der); err != nil {
		return err
	}
	if err := writePEM(filepath.Join(s.Dir, "sa.pub"), "PUBLIC KEY", pub); err != nil {
		return err
	}
	csv := ""
	for i, u := range []struct{ name, groups string }{{Admin, "system:masters"}, {Restricted, ""}} {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return err
		}
		s.tokens[u.name] = hex.EncodeToString(b)
		csv += fmt.Sprintf("%s,%s,uid-%d,%q\n", s.tokens[u.name], u.name, i, u.groups)
	}
	return os.WriteFile(filepath.Join(s.Dir, "tokens.csv"), []byte(csv), 0o600)
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// flags are kube-apiserver's: the files of prepare, no credentials
// (those are in the token file).
func (s *Server) flags(port int) []string {
	f := func(name string) string { return filepath.Join(s.Dir, name) }
	return []string{
		"--etcd-servers=" + s.Etcd.Endpoint,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + f("server.pem"), "--tls-private-key-file=" + f("server-key.pem"),
		"--cert-dir=" + f("certs"),
		"--service-account-key-file=" + f("sa.pub"), "--service-account-signing-key-file=" + f("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--token-auth-file=" + f("tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.0.0.0/24", // a setting only: nothing is sent there
		"--endpoint-reconciler-type=none",
		"--enable-priority-and-fairness=false",
		// As every cluster that runs CSI node plugins (kubeadm's default):
		// the deploy tests apply a privileged DaemonSet.
		"--allow-privileged=true",
		"--v=0",
	}
}

func (s *Server) launch(ctx context.Context) error {
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	go func() { s.waitErr = cmd.Wait(); close(done) }()
	return s.waitReady(ctx, done)
}

// waitReady polls /readyz (as the admin) until it answers 200.
func (s *Server) waitReady(ctx context.Context, done chan struct{}) error {
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(s.CAFile)
	if err != nil {
		return err
	}
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	err = procwait.Ready(ctx, 90*time.Second, done, func() bool {
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+s.tokens[Admin])
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	switch {
	case errors.Is(err, procwait.ErrExited):
		return fmt.Errorf("kube-apiserver exited before becoming ready (%v): %s", s.waitErr, s.LogTail())
	case err != nil:
		s.kill()
		return fmt.Errorf("kube-apiserver at %s not ready: %w: %s", s.URL, err, s.LogTail())
	}
	return nil
}

// LogTail returns the end of the server's log, for failure messages.
func (s *Server) LogTail() string { return procwait.LogTail(s.LogPath) }

func (s *Server) kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-done
	}
}

// Restart kills kube-apiserver (as a crash would; etcd keeps its data)
// and starts it again on the same port, returning once it is ready.
func (s *Server) Restart(ctx context.Context) error {
	s.kill()
	return s.launch(ctx)
}

// Kubeconfig writes (once) and returns the path of a kubeconfig for user
// (Admin or Restricted), in the namespace "default".
func (s *Server) Kubeconfig(user string) (string, error) {
	tok, ok := s.tokens[user]
	if !ok {
		return "", fmt.Errorf("kubeserver: no user %q", user)
	}
	path := filepath.Join(s.Dir, user+".kubeconfig")
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, certificate-authority: %q}
users:
- name: %s
  user: {token: %q}
contexts:
- name: %s
  context: {cluster: test, user: %s, namespace: default}
current-context: %s
`, s.URL, s.CAFile, user, tok, user, user, user)
	return path, os.WriteFile(path, []byte(body), 0o600)
}

// Stop terminates kube-apiserver (SIGTERM, then SIGKILL after 5 s) and its
// etcd. Safe to call more than once.
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	return s.Etcd.Stop()
}

// ForTest starts etcd and kube-apiserver for the test, in a test
// directory, and stops them in t.Cleanup. Without a kube-apiserver (or
// etcd) binary it skips (fails when CI is set).
func ForTest(t testing.TB) *Server {
	t.Helper()
	bin, err := FindBinary()
	if err != nil {
		gateway.SkipOrFail(t, "%v", err)
	}
	if _, err := etcdserver.FindBinary(); err != nil {
		gateway.SkipOrFail(t, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx, bin, t.TempDir())
	if err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop kube-apiserver: %v", err)
		}
	})
	return s
}
