package integration

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/etcdserver"
	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/fencefs/fencefs/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// End-to-end tests of `fencefs run --etcd`: the real binary, real
// FUSE mounts, the real gateway and a real etcd (bin/etcd, built from
// tools/etcd). The supervised COMMAND is the lease child of lease_test.go.

// etcdKeys lists the keys under the election's prefix, with their create
// revisions.
func etcdKeys(ctx context.Context, t *testing.T, srv *etcdserver.Server, election string) map[string]int64 {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.Get(ctx, lease.DefaultEtcdPrefix+election+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv.CreateRevision
	}
	return out
}

// etcdCoordinator drives the election "leader" in srv with a 2 s TTL.
func etcdCoordinator(ctx context.Context, t *testing.T, srv *etcdserver.Server) coordinator {
	return coordinator{
		args: func(extra ...string) []string {
			return append([]string{"--etcd", srv.Endpoint, "--ttl", "2s"}, extra...)
		},
		candidates: func() map[string]int64 { return etcdKeys(ctx, t, srv, "leader") },
		// Its session ended, or the watch saw etcd delete its expired key.
		lost: []string{"the etcd session ended", "the leader key"},
	}
}

func TestRunEtcdContendersRunOneCommandAtATime(t *testing.T) {
	gw := gateway.ForTest(t)
	srv := etcdserver.ForTest(t, etcdserver.Options{})
	contendersTakeTurns(t, gw, etcdCoordinator(context.Background(), t, srv))
}

func TestRunEtcdFrozenLeaderIsFencedAndStopped(t *testing.T) {
	gateway.ForEachServer(t, gateway.ErasureCodedServers, testRunEtcdFrozenLeaderIsFencedAndStopped)
}

func testRunEtcdFrozenLeaderIsFencedAndStopped(t *testing.T, gw *gateway.Gateway) {
	srv := etcdserver.ForTest(t, etcdserver.Options{})
	frozenLeaderIsFencedAndStopped(t, gw, etcdCoordinator(context.Background(), t, srv))
}

func TestRunEtcdStoppedUnderTheLeaderStopsTheCommandWithinTheTTL(t *testing.T) {
	gw := gateway.ForTest(t)
	srv := etcdserver.ForTest(t, etcdserver.Options{})
	const ttl = 2 * time.Second
	// The client gives up TTL after the last answered keepalive, checking
	// once a second: TTL + 1 s, plus margin for a loaded machine.
	coordinatorStoppedStopsTheCommand(t, gw, []string{"--etcd", srv.Endpoint, "--ttl", ttl.String()}, srv.Kill, ttl+4*time.Second)
}

func TestRunEtcdBadConnectionOrTokenSourceIsOneLineAndStartsNothing(t *testing.T) {
	gw := gateway.ForTest(t)
	plain := etcdserver.ForTest(t, etcdserver.Options{})
	dir := t.TempDir()
	certs, err := etcdserver.NewCerts(dir)
	if err != nil {
		t.Fatal(err)
	}
	secure := etcdserver.ForTest(t, etcdserver.Options{TLS: &certs.Server})
	authed := etcdserver.ForTest(t, etcdserver.Options{})
	enableAuth(t, authed, "root", "right-password")
	bucket := gateway.NewBucket(t, gw)
	m := harness.Mount(t, gw, bucket)
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := gateway.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang guard for 11 runs
	defer cancel()

	// A mismatch: a token far above any revision of the plain etcd.
	fenced := gateway.NewBucket(t, gw)
	if out, err := harness.Run(ctx, t, gw, nil, "epoch", "raise", fenced, "1000"); err != nil {
		t.Fatalf("epoch raise: %v\n%s", err, out)
	}
	mf := harness.Mount(t, gw, fenced)

	wantBadRunsRefused(ctx, t, gw, []badRun{
		{"nothing listens", m.Dir, nil, []string{"--etcd", "http://127.0.0.1:" + strconv.Itoa(port), "--etcd-dial-timeout", "2s"}, "cannot reach etcd (etcd.dial_timeout 2s): etcd at http://127.0.0.1:" + strconv.Itoa(port) + ": connect: connection refused"},
		{"plain URL, TLS server", m.Dir, nil, []string{"--etcd", strings.Replace(secure.Endpoint, "https", "http", 1), "--etcd-dial-timeout", "2s"}, "did not answer within 2s (etcd.dial_timeout)"},
		{"unknown CA", m.Dir, nil, []string{"--etcd", secure.Endpoint}, "TLS handshake: tls: failed to verify certificate: x509: certificate signed by unknown authority"},
		{"CA file not PEM", m.Dir, nil, []string{"--etcd", secure.Endpoint, "--etcd-ca-file", notPEM}, "etcd.ca_file (--etcd-ca-file): " + notPEM + " holds no PEM certificate"},
		{"wrong password", m.Dir, []string{"FENCEFS_ETCD_PASSWORD=wrong-password"}, []string{"--etcd", authed.Endpoint, "--etcd-username", "root"}, "authentication failed, invalid user ID or password"},
		{"password without user", m.Dir, []string{"FENCEFS_ETCD_PASSWORD=wrong-password"}, []string{"--etcd", authed.Endpoint}, "etcd.username: missing while an etcd password is set"},
		{"fractional TTL", m.Dir, nil, []string{"--etcd", plain.Endpoint, "--ttl", "1500ms"}, "etcd leases last whole seconds"},
		{"token source mismatch", mf.Dir, nil, []string{"--etcd", plain.Endpoint}, "is not above the bucket's epoch 1000"},
	})
	if keys := etcdKeys(ctx, t, plain, "leader"); len(keys) != 0 {
		t.Errorf("election keys left behind: %v", keys)
	}

	// The same servers with the right CA and the right password.
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"trusted CA", nil, []string{"--etcd", secure.Endpoint, "--etcd-ca-file", certs.CAFile}},
		{"right password", []string{"FENCEFS_ETCD_PASSWORD=right-password"}, []string{"--etcd", authed.Endpoint, "--etcd-username", "root"}},
	} {
		// A bucket of its own: each etcd cluster is a token source.
		mount := harness.Mount(t, gw, gateway.NewBucket(t, gw))
		args := append([]string{"run", "--lease", "leader", "--mount", mount.Dir}, tc.args...)
		args = append(args, "--", "/bin/sh", "-c", "echo token=$FENCEFS_TOKEN")
		out, err := harness.Run(ctx, t, gw, tc.env, args...)
		if err != nil || !strings.Contains(out, "token=") {
			t.Errorf("%s: fencefs run: %v; output:\n%s", tc.name, err, out)
		}
	}
}

// enableAuth turns authentication on in srv with one root user.
func enableAuth(t *testing.T, srv *etcdserver.Server, user, password string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.UserAdd(ctx, user, password); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UserGrantRole(ctx, user, "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
}
