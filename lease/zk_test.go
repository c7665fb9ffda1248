package lease_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/zkserver"
	"github.com/fencefs/fencefs/lease"
	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"
)

// Elections against a real ZooKeeper (Debian's zookeeper package); the
// tests that do not stop it share one, each under paths of its own.

// zkTimeout is the tests' session timeout: a leader must not lose its
// session to a stall of a loaded machine (the servers tick every 500 ms and
// grant 1 s to 10 s). zkShortTimeout is for the test that waits one out.
const (
	zkTimeout      = 6 * time.Second
	zkShortTimeout = 2 * time.Second
)

// zkClient connects a plain client to ens, for looking at what the
// elections leave.
func zkClient(t *testing.T, ens *zkserver.Ensemble) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(ens.Addrs(), 5*time.Second, zk.WithLogInfo(false), zk.WithLogger(zkQuiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// zkOpts are the options of a candidate in the election under prefix.
func zkOpts(ens *zkserver.Ensemble, prefix string, b binds) lease.ZooKeeperOptions {
	return lease.ZooKeeperOptions{Servers: ens.Addrs(), SessionTimeout: zkTimeout, Prefix: prefix, Bind: b.bind}
}

func TestZooKeeperLeadersTakeTurnsWithGrowingTokensAndLeaveNothing(t *testing.T) {
	ens := zkserver.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reg := prometheus.NewRegistry()
	b := binds{make(chan uint64, 8)}
	opts := zkOpts(ens, "/apps/fencefs", b)
	opts.Registerer = reg
	c := zkClient(t, ens)

	// A persistent parent made by an operator stays; the containers go.
	if _, err := c.Create("/apps", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete("/apps", -1) })
	var last uint64
	for round := 0; round < 3; round++ {
		first, err := lease.CampaignZooKeeper(ctx, "leader", opts)
		if err != nil {
			t.Fatal(err)
		}
		_, st, err := c.Get(first.Node())
		if err != nil || uint64(st.Czxid) != first.Token() {
			t.Fatalf("leader znode %s: %v, Czxid %d; want the token %d", first.Node(), err, st.Czxid, first.Token())
		}
		if tok := <-b.ch; tok != first.Token() || tok <= last || !first.Held() {
			t.Fatalf("round %d: bound %d, token %d, held %v after %d; want a growing token, bound, held", round, tok, first.Token(), first.Held(), last)
		}
		second := campaignInBackground(ctx, opts)
		waitFor(t, "the second candidate's znode", func() bool {
			kids, _, _ := c.Children("/apps/fencefs/leader")
			return len(kids) == 2
		})
		select {
		case <-second:
			t.Fatal("a second candidate won while the first leads")
		case <-time.After(zkTimeout / 2):
		}
		if err := first.Release(ctx); err != nil || !errors.Is(first.Err(), lease.ErrReleased) || first.Held() {
			t.Fatalf("release: %v; then err %v held %v", err, first.Err(), first.Held())
		}
		var e2 *lease.ZooKeeperElection
		select {
		case r := <-second:
			if r.err != nil {
				t.Fatalf("the second candidate: %v", r.err)
			}
			e2 = r.e
		case <-time.After(zkTimeout): // a resignation hands over at once
			t.Fatal("the second candidate did not win after the first resigned")
		}
		if tok := <-b.ch; tok != e2.Token() || tok <= first.Token() {
			t.Fatalf("second leader bound %d (token %d); want above %d", tok, e2.Token(), first.Token())
		}
		last = e2.Token()
		if err := e2.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if ok, _, err := c.Exists("/apps/fencefs"); ok || err != nil {
			t.Fatalf("round %d: /apps/fencefs left after every candidate resigned (err %v)", round, err)
		}
		if ok, _, _ := c.Exists("/apps"); !ok {
			t.Fatalf("/apps, made by an operator, was deleted")
		}
	}
	if got := gaugeValue(t, reg, "fencefs_lease_token"); got != float64(last) {
		t.Errorf("fencefs_lease_token %v; want the last leader's %d", got, last)
	}
	if got := gaugeValue(t, reg, "fencefs_lease_held"); got != 0 {
		t.Errorf("fencefs_lease_held %v after every release; want 0", got)
	}
}

func TestZooKeeperCandidateWaitsForTheLeaderNotForACandidateBeforeIt(t *testing.T) {
	ens := zkserver.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := binds{make(chan uint64, 8)}
	opts := zkOpts(ens, "", b)
	c := zkClient(t, ens)
	dir := lease.DefaultZooKeeperPrefix + "/leader"

	a, err := lease.CampaignZooKeeper(ctx, "leader", opts)
	if err != nil {
		t.Fatal(err)
	}
	bCtx, cancelB := context.WithCancel(ctx)
	bDone := make(chan error, 1)
	go func() { _, err := lease.CampaignZooKeeper(bCtx, "leader", opts); bDone <- err }()
	waitFor(t, "B's znode", func() bool { kids, _, _ := c.Children(dir); return len(kids) == 2 })
	cDone := campaignInBackground(ctx, opts)
	waitFor(t, "C's znode", func() bool { kids, _, _ := c.Children(dir); return len(kids) == 3 })

	// B, between the leader and C, gives up: C watches B, sees it go, and
	// waits on for A.
	cancelB()
	if err := <-bDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("B: %v; want context.Canceled", err)
	}
	waitFor(t, "B's znode deleted", func() bool { kids, _, _ := c.Children(dir); return len(kids) == 2 })
	select {
	case <-cDone:
		t.Fatal("C won while A leads")
	case <-time.After(zkTimeout / 2):
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-cDone
	if r.err != nil {
		t.Fatalf("C: %v", r.err)
	}
	e := r.e
	if e.Token() <= a.Token() {
		t.Fatalf("C did not lead with a token above A's %d: %v", a.Token(), e)
	}
	_ = e.Release(ctx)
}

func TestZooKeeperStoppedEndsTheLeadershipWithinTheSessionTimeout(t *testing.T) {
	ens := zkserver.ForTest(t, zkserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := zkOpts(ens, "", binds{make(chan uint64, 1)})
	opts.SessionTimeout = zkShortTimeout
	e, err := lease.CampaignZooKeeper(ctx, "leader", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Release(ctx)
	if e.SessionTimeout() != zkShortTimeout {
		t.Errorf("granted session timeout %v; want %v", e.SessionTimeout(), zkShortTimeout)
	}
	ens.Servers[0].Kill()
	killed := time.Now()
	select {
	case <-e.Lost():
	case <-time.After(zkShortTimeout + 3*time.Second):
		t.Fatalf("still held %v after ZooKeeper died", time.Since(killed))
	}
	took := time.Since(killed)
	if e.Held() || !errors.Is(e.Err(), lease.ErrLost) || !strings.Contains(e.Err().Error(), "no ZooKeeper server answered for the session timeout 2s") {
		t.Errorf("after the loss: held %v, err %v", e.Held(), e.Err())
	}
	if took < zkShortTimeout-100*time.Millisecond {
		t.Errorf("lost %v after ZooKeeper died: before the session timeout %v, while the session may live on", took, zkShortTimeout)
	}
	t.Logf("lost %v after ZooKeeper died", took.Round(time.Millisecond))
}

func TestZooKeeperBadServerOrPathIsOneLine(t *testing.T) {
	ens := zkserver.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := zkClient(t, ens)
	// A path only "owner:right" may use, and an ephemeral znode.
	if err := c.AddAuth("digest", []byte("owner:right")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create("/locked", nil, 0, zk.AuthACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete("/locked", -1) })
	if _, err := c.Create("/eph", nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	port, err := gateway.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		servers []string
		prefix  string
		digest  string
		want    string
	}{
		{"nothing listens", []string{"127.0.0.1:" + strconv.Itoa(port)}, "", "", "cannot reach ZooKeeper at 127.0.0.1:" + strconv.Itoa(port) + " within 1s (zookeeper.dial_timeout): 127.0.0.1:" + strconv.Itoa(port) + ": connection refused"},
		{"anonymous on a locked path", ens.Addrs(), "/locked/fencefs", "", "ZooKeeper refused creating /locked/fencefs (NoAuth): its ACL does not admit anonymous clients (set zookeeper.username and its password)"},
		{"wrong password", ens.Addrs(), "/locked/fencefs", "owner:wrong", `ZooKeeper refused creating /locked/fencefs (NoAuth): its ACL does not admit user "owner" with this password`},
		{"under an ephemeral znode", ens.Addrs(), "/eph/fencefs", "", "a parent is an ephemeral znode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bound := binds{make(chan uint64, 1)}
			_, err := lease.CampaignZooKeeper(ctx, "leader", lease.ZooKeeperOptions{
				Servers: tc.servers, SessionTimeout: zkTimeout, DialTimeout: time.Second, Prefix: tc.prefix, Digest: tc.digest, Bind: bound.bind})
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "wrong") {
				t.Fatalf("err %v; want one line with %q, no password", err, tc.want)
			}
			t.Logf("%v", err)
			if len(bound.ch) != 0 {
				t.Errorf("a token was bound")
			}
		})
	}
	// The right owner may.
	b := binds{make(chan uint64, 1)}
	e, err := lease.CampaignZooKeeper(ctx, "leader", lease.ZooKeeperOptions{Servers: ens.Addrs(), SessionTimeout: zkTimeout, Prefix: "/locked/fencefs", Digest: "owner:right", Bind: b.bind})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if kids, _, err := c.Children("/locked"); err != nil || len(kids) != 0 {
		t.Errorf("under /locked after the release: %v %v; want nothing", kids, err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestZooKeeperLeadershipSurvivesAServerRestartWithinTheSessionTimeout(t *testing.T) {
	// A restart of the JVM takes about 3 s on an idle machine and twice
	// that on a busy one; the session must outlast it with room to spare,
	// or the test would measure the machine's load. Ticks of 2 s let the
	// server grant sessions of up to 40 s.
	const sessionTimeout = 30 * time.Second
	ens := zkserver.ForTest(t, zkserver.Options{Tick: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	reg := prometheus.NewRegistry()
	opts := zkOpts(ens, "", binds{make(chan uint64, 1)})
	opts.SessionTimeout, opts.Registerer = sessionTimeout, reg
	e, err := lease.CampaignZooKeeper(ctx, "leader", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Release(ctx)
	srv := ens.Servers[0]
	srv.Kill()
	down := time.Now()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if err := srv.WaitServing(ctx, sessionTimeout); err != nil {
		t.Fatal(err)
	}
	serving := time.Since(down)
	for counterValue(t, reg, "ok") != 1 {
		if time.Since(down) > sessionTimeout+5*time.Second {
			t.Fatalf("no renewal %v after the kill (the server served again after %v): held %v, err %v",
				time.Since(down).Round(time.Millisecond), serving.Round(time.Millisecond), e.Held(), e.Err())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !e.Held() || e.Err() != nil {
		t.Fatalf("after a restart %v long: held %v, err %v; want held", time.Since(down).Round(time.Millisecond), e.Held(), e.Err())
	}
	if got := counterValue(t, reg, "error"); got != 1 {
		t.Errorf("renewals_total{outcome=error} %v; want 1 (the one lost connection)", got)
	}
	if err := e.Release(ctx); err != nil {
		t.Errorf("release after the restart: %v", err)
	}
	t.Logf("ZooKeeper back after %v; the leadership held", time.Since(down).Round(time.Millisecond))
}

// counterValue reads fencefs_lease_renewals_total{outcome} from reg (0
// when absent).
func counterValue(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fencefs_lease_renewals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestZooKeeperUsesTheSessionTimeoutTheServersGranted(t *testing.T) {
	ens := zkserver.Shared(t) // tickTime 500 ms: sessions of 1 s to 10 s
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := zkOpts(ens, "/granted", binds{make(chan uint64, 1)})
	opts.SessionTimeout = time.Minute
	e, err := lease.CampaignZooKeeper(ctx, "leader", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Release(ctx)
	if got := e.SessionTimeout(); got != 10*time.Second {
		t.Errorf("session timeout %v after asking for 1m; want the 10s the servers granted (their maxSessionTimeout)", got)
	}
}

// campaigned is the outcome of a campaign run in the background.
type campaigned struct {
	e   *lease.ZooKeeperElection
	err error
}

// campaignInBackground campaigns in a goroutine that reports through the
// channel, never through t: it can outlive the test when the test fails
// first.
func campaignInBackground(ctx context.Context, opts lease.ZooKeeperOptions) <-chan campaigned {
	ch := make(chan campaigned, 1)
	go func() {
		e, err := lease.CampaignZooKeeper(ctx, "leader", opts)
		ch <- campaigned{e, err}
	}()
	return ch
}
