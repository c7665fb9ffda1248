package integration

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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

func TestRunEtcdContendersRunOneCommandAtATime(t *testing.T) {
	gw := gateway.ForTest(t)
	srv := etcdserver.ForTest(t, etcdserver.Options{})
	bucket := gateway.NewBucket(t, gw)
	a := harness.Mount(t, gw, bucket)
	b := harness.Mount(t, gw, bucket)
	logPath := filepath.Join(t.TempDir(), "children.log")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	child := []string{"LEASE_CHILD_LOG=" + logPath, "LEASE_CHILD_MODE=hold", "LEASE_CHILD_HOLD=700ms"}
	etcd := []string{"--etcd", srv.Endpoint, "--ttl", "2s"}
	runs := []*runProc{
		startRun(t, gw, "A1", "leader", a.Dir, child, etcd...),
		startRun(t, gw, "B", "leader", b.Dir, child, etcd...),
		startRun(t, gw, "A2", "leader", a.Dir, child, etcd...),
	}
	for _, r := range runs {
		if code := r.wait(ctx, t); code != 0 {
			t.Errorf("fencefs run %s exited %d; output:\n%s", r.name, code, r.output())
		}
	}
	var inside string
	var last uint64
	starts := 0
	for _, e := range readChildLog(t, logPath) {
		switch e.kind {
		case "start":
			if inside != "" {
				t.Errorf("%s started while %s was still running", e.name, inside)
			}
			inside, starts = e.name, starts+1
			if e.token <= last || e.bound != strconv.FormatUint(e.token, 10) {
				t.Errorf("%s: token %d (mount shows %s) after %d; want growing tokens, bound on the mount", e.name, e.token, e.bound, last)
			}
			last = e.token
		case "write":
			if e.res != "ok" {
				t.Errorf("%s (token %d) could not write while leading: %s", e.name, e.token, e.res)
			}
		case "end", "term":
			inside = ""
		}
	}
	if starts != 3 {
		t.Errorf("%d commands started; want 3", starts)
	}
	if keys := etcdKeys(ctx, t, srv, "leader"); len(keys) != 0 {
		t.Errorf("election keys left after every run resigned: %v", keys)
	}
}

func TestRunEtcdFrozenLeaderIsFencedAndStopped(t *testing.T) {
	gw := gateway.ForTest(t)
	srv := etcdserver.ForTest(t, etcdserver.Options{})
	bucket := gateway.NewBucket(t, gw)
	ma := harness.Mount(t, gw, bucket)
	mb := harness.Mount(t, gw, bucket)
	dir := t.TempDir()
	logA, logB := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addrB := metricsAddr(t)

	runA, startA := startWritingLeader(ctx, t, gw, ma.Dir, logA, "--etcd", srv.Endpoint, "--ttl", "2s", "--grace", "5s")
	keys := etcdKeys(ctx, t, srv, "leader")
	if len(keys) != 1 {
		t.Fatalf("election keys %v; want A's alone", keys)
	}
	for _, rev := range keys {
		if uint64(rev) != startA.token {
			t.Errorf("A's token %d is not its leader key's create revision %d", startA.token, rev)
		}
	}

	runB := startRun(t, gw, "B", "leader", mb.Dir, []string{"LEASE_CHILD_LOG=" + logB, "LEASE_CHILD_MODE=loop"}, "--etcd", srv.Endpoint, "--ttl", "2s", "--grace", "5s", "--metrics-addr", addrB)
	waitUntil(ctx, t, "B campaigns", func() bool { return len(etcdKeys(ctx, t, srv, "leader")) == 2 })
	wantHealth(t, addrB, 503, "waiting for lease leader")
	if evs := readChildLog(t, logB); len(evs) != 0 {
		t.Fatalf("B's command started while A leads: %v", evs)
	}

	// Freeze the whole leader: fencefs run, its command, its mount.
	for _, pid := range []int{runA.cmd.Process.Pid, -startA.pid, ma.Pid()} {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP %d: %v", pid, err)
		}
	}
	t.Cleanup(func() {
		for _, pid := range []int{ma.Pid(), -startA.pid, runA.cmd.Process.Pid} {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	var startB childEvent
	waitUntil(ctx, t, "B wins when A's session expires, and writes", func() bool {
		evs := readChildLog(t, logB)
		startB, _ = findEvent(evs, func(e childEvent) bool { return e.kind == "start" })
		_, ok := findEvent(evs, func(e childEvent) bool { return e.kind == "write" && e.res == "ok" })
		return ok
	})
	killGroupOnCleanup(t, startB.pid)
	if startB.token <= startA.token {
		t.Fatalf("B's token %d is not above A's %d", startB.token, startA.token)
	}
	wantHealth(t, addrB, 200, "ok lease=leader token="+strconv.FormatUint(startB.token, 10))
	wantMetrics(t, addrB, "fencefs_lease_held{lease=\"leader\"} 1", "fencefs_lease_token{lease=\"leader\"} "+strconv.FormatUint(startB.token, 10),
		"fencefs_lease_acquisitions_total{how=\"elected\",lease=\"leader\"} 1")

	// The mount and the command wake first: the storage refuses them.
	thawAndWantEROFS(ctx, t, logA, ma, startA.pid)
	// Then fencefs run A: its session has ended, it stops the command.
	_ = syscall.Kill(runA.cmd.Process.Pid, syscall.SIGCONT)
	if code := runA.wait(ctx, t); code != 75 {
		t.Errorf("fencefs run A exited %d; want 75; output:\n%s", code, runA.output())
	}
	// Its session ended, or the watch saw etcd delete its expired key.
	if out := runA.output(); !strings.Contains(out, "fencefs: run: lease leader lost: the etcd session ended") &&
		!strings.Contains(out, "fencefs: run: lease leader lost: the leader key") {
		t.Errorf("fencefs run A did not say it lost the leadership; output:\n%s", out)
	}
	evsA := readChildLog(t, logA)
	if last := evsA[len(evsA)-1]; last.kind != "term" {
		t.Errorf("A's command was not stopped by SIGTERM; its last event: %+v", last)
	}
	checkFencedWrites(ctx, t, gw, bucket, evsA, startA.token)

	// B keeps writing; SIGTERM is forwarded, the command exits 0, B resigns.
	stopLeaderCleanly(ctx, t, runB, logB)
	if keys := etcdKeys(ctx, t, srv, "leader"); len(keys) != 0 {
		t.Errorf("election keys after B resigned: %v", keys)
	}
}

func TestRunEtcdStoppedUnderTheLeaderStopsTheCommandWithinTheTTL(t *testing.T) {
	gw := gateway.ForTest(t)
	srv := etcdserver.ForTest(t, etcdserver.Options{})
	bucket := gateway.NewBucket(t, gw)
	m := harness.Mount(t, gw, bucket)
	logPath := filepath.Join(t.TempDir(), "a.log")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ttl = 2 * time.Second

	run := startRun(t, gw, "A", "leader", m.Dir, []string{"LEASE_CHILD_LOG=" + logPath, "LEASE_CHILD_MODE=loop"}, "--etcd", srv.Endpoint, "--ttl", ttl.String(), "--grace", "5s")
	waitUntil(ctx, t, "the command runs", func() bool {
		_, ok := findEvent(readChildLog(t, logPath), func(e childEvent) bool { return e.kind == "write" })
		return ok
	})
	srv.Kill()
	killed := time.Now()
	waitUntil(ctx, t, "the command is stopped", func() bool {
		_, ok := findEvent(readChildLog(t, logPath), func(e childEvent) bool { return e.kind == "term" })
		return ok
	})
	// The client gives up TTL after the last answered keepalive, checking
	// once a second: TTL + 1 s, plus margin for a loaded machine.
	if took := time.Since(killed); took > ttl+4*time.Second {
		t.Errorf("the command was stopped %v after etcd died; want within the TTL %v (+ margin)", took, ttl)
	}
	if code := run.wait(ctx, t); code != 75 {
		t.Errorf("fencefs run exited %d; want 75; output:\n%s", code, run.output())
	}
	t.Logf("stopped %v after etcd died; fencefs run:\n%s", time.Since(killed).Round(10*time.Millisecond), run.output())
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// A mismatch: a token far above any revision of the plain etcd.
	fenced := gateway.NewBucket(t, gw)
	if out, err := harness.Run(ctx, t, gw, nil, "epoch", "raise", fenced, "1000"); err != nil {
		t.Fatalf("epoch raise: %v\n%s", err, out)
	}
	mf := harness.Mount(t, gw, fenced)

	for _, tc := range []struct {
		name  string
		mount string
		env   []string
		args  []string
		want  string
	}{
		{"nothing listens", m.Dir, nil, []string{"--etcd", "http://127.0.0.1:" + strconv.Itoa(port), "--etcd-dial-timeout", "2s"}, "cannot reach etcd (etcd.dial_timeout 2s): etcd at http://127.0.0.1:" + strconv.Itoa(port) + ": connect: connection refused"},
		{"plain URL, TLS server", m.Dir, nil, []string{"--etcd", strings.Replace(secure.Endpoint, "https", "http", 1), "--etcd-dial-timeout", "2s"}, "did not answer within 2s (etcd.dial_timeout)"},
		{"unknown CA", m.Dir, nil, []string{"--etcd", secure.Endpoint}, "TLS handshake: tls: failed to verify certificate: x509: certificate signed by unknown authority"},
		{"CA file not PEM", m.Dir, nil, []string{"--etcd", secure.Endpoint, "--etcd-ca-file", notPEM}, "etcd.ca_file (--etcd-ca-file): " + notPEM + " holds no PEM certificate"},
		{"wrong password", m.Dir, []string{"FENCEFS_ETCD_PASSWORD=wrong-password"}, []string{"--etcd", authed.Endpoint, "--etcd-username", "root"}, "authentication failed, invalid user ID or password"},
		{"password without user", m.Dir, []string{"FENCEFS_ETCD_PASSWORD=wrong-password"}, []string{"--etcd", authed.Endpoint}, "etcd.username: missing while an etcd password is set"},
		{"fractional TTL", m.Dir, nil, []string{"--etcd", plain.Endpoint, "--ttl", "1500ms"}, "etcd leases last whole seconds"},
		{"token source mismatch", mf.Dir, nil, []string{"--etcd", plain.Endpoint}, "is not above the bucket's epoch 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "child.log")
			args := append([]string{"run", "--lease", "leader", "--mount", tc.mount}, tc.args...)
			args = append(args, "--", "/bin/sh", "-c", "echo started > "+logPath)
			out, err := harness.Run(ctx, t, gw, tc.env, args...)
			if err == nil {
				t.Fatalf("fencefs run succeeded; output:\n%s", out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if last := lines[len(lines)-1]; !strings.Contains(last, tc.want) || !strings.HasPrefix(last, "fencefs: run: ") {
				t.Errorf("last line %q; want \"fencefs: run: …%s…\"; output:\n%s", last, tc.want, out)
			}
			if strings.Contains(out, "wrong-password") {
				t.Errorf("the password shows in the output:\n%s", out)
			}
			t.Logf("%s", out)
			if _, err := os.Stat(logPath); err == nil {
				t.Errorf("the command was started")
			}
		})
	}
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
