package integration

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/fencefs/fencefs/integration/zkserver"
	"github.com/go-zookeeper/zk"
)

// End-to-end tests of `fencefs run --zookeeper`: the real binary, real
// FUSE mounts, the real gateway and a real ZooKeeper (Debian's package).
// The tests that do not stop ZooKeeper share one server, each under a
// path of its own. The supervised COMMAND is the lease child of
// lease_test.go.

const zkSession = 2 * time.Second

// zkConn connects a plain client to ens for the test.
func zkConn(t *testing.T, ens *zkserver.Ensemble) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(ens.Addrs(), 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(zkQuietLog{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

type zkQuietLog struct{}

func (zkQuietLog) Printf(string, ...any) {}

// zkCandidates lists the candidate znodes of the election at dir with
// their Czxids.
func zkCandidates(t *testing.T, c *zk.Conn, dir string) map[string]int64 {
	t.Helper()
	kids, _, err := c.Children(dir)
	out := map[string]int64{}
	if err == zk.ErrNoNode {
		return out
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kids {
		if _, st, err := c.Get(dir + "/" + k); err == nil {
			out[k] = st.Czxid
		}
	}
	return out
}

// zkArgs are fencefs run's flags for an election under root in ens.
func zkArgs(ens *zkserver.Ensemble, root string, extra ...string) []string {
	return append([]string{"--zookeeper", ens.Connect(), "--zookeeper-prefix", root + "/fencefs", "--ttl", zkSession.String()}, extra...)
}

// wantNothingLeft fails if anything is left under root in ZooKeeper.
func wantNothingLeft(t *testing.T, c *zk.Conn, root string) {
	t.Helper()
	if ok, _, err := c.Exists(root); ok || err != nil {
		kids, _, _ := c.Children(root)
		t.Errorf("%s left in ZooKeeper after every run stopped cleanly (children %v, err %v)", root, kids, err)
	}
}

// zkCoordinator drives the election "leader" under root in ens, with a
// 2 s session timeout.
func zkCoordinator(t *testing.T, ens *zkserver.Ensemble, root string) coordinator {
	c := zkConn(t, ens)
	return coordinator{
		args:       func(extra ...string) []string { return zkArgs(ens, root, extra...) },
		candidates: func() map[string]int64 { return zkCandidates(t, c, root+"/fencefs/leader") },
		// Expired (seen on reconnecting), or its znode seen gone.
		lost: []string{"the ZooKeeper session", "the leader znode", "no ZooKeeper server answered"},
	}
}

func TestRunZooKeeperContendersRunOneCommandAtATime(t *testing.T) {
	gw := gateway.ForTest(t)
	ens := zkserver.Shared(t)
	root := "/" + t.Name()
	contendersTakeTurns(t, gw, zkCoordinator(t, ens, root))
	wantNothingLeft(t, zkConn(t, ens), root)
}

func TestRunZooKeeperFrozenLeaderIsFencedAndStopped(t *testing.T) {
	gw := gateway.ForTest(t)
	ens := zkserver.Shared(t)
	root := "/" + t.Name()
	frozenLeaderIsFencedAndStopped(t, gw, zkCoordinator(t, ens, root))
	wantNothingLeft(t, zkConn(t, ens), root)
}

func TestRunZooKeeperEnsembleLeaderKilledKeepsOneLeaderAndGrowingTokens(t *testing.T) {
	gw := gateway.ForTest(t)
	ens := zkserver.ForTest(t, zkserver.Options{Servers: 3})
	c := zkConn(t, ens)
	bucket := gateway.NewBucket(t, gw)
	ma := harness.Mount(t, gw, bucket)
	mb := harness.Mount(t, gw, bucket)
	dir := t.TempDir()
	logA, logB := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A session outlives a ZooKeeper leader election (a few ticks, under a
	// second here) with room for a machine many times slower; the servers
	// grant up to 10 s.
	const session = 8 * time.Second
	args := []string{"--zookeeper", ens.Connect(), "--ttl", session.String(), "--grace", "5s"}

	runA, startA := startWritingLeader(ctx, t, gw, ma.Dir, logA, args...)
	runB := startRun(t, gw, "B", "leader", mb.Dir, []string{"LEASE_CHILD_LOG=" + logB, "LEASE_CHILD_MODE=loop"}, args...)
	election := "/fencefs/elections/leader"
	waitUntil(ctx, t, "B is a candidate", func() bool { return len(zkCandidates(t, c, election)) == 2 })

	old := ens.Leader()
	if old == nil {
		t.Fatal("the ensemble has no leader")
	}
	old.Kill()
	killed := time.Now()
	var next *zkserver.Server
	waitUntil(ctx, t, "another ZooKeeper server leads", func() bool { next = ens.Leader(); return next != nil })
	t.Logf("ZooKeeper server %d led; server %d leads %v after it was killed", old.ID, next.ID, time.Since(killed).Round(time.Millisecond))
	// Past a whole session timeout after the new leader: had A's session
	// ended, B would lead by now.
	time.Sleep(session + time.Second)
	if evs := readChildLog(t, logB); len(evs) != 0 {
		t.Fatalf("B's command started while A led through the ZooKeeper leader change: %v; A's run:\n%s", evs, runA.output())
	}
	resumed := len(readChildLog(t, logA))
	waitUntil(ctx, t, "A writes on after the ZooKeeper leader change", func() bool {
		evs := readChildLog(t, logA)
		_, ok := findEvent(evs[resumed:], func(e childEvent) bool { return e.kind == "write" && e.res == "ok" })
		return ok
	})
	if _, ok := findEvent(readChildLog(t, logA), func(e childEvent) bool { return e.kind == "term" || e.res == "EROFS" }); ok {
		t.Fatalf("A was stopped or fenced through the ZooKeeper leader change; its run:\n%s", runA.output())
	}

	// A hands over: B's znode was created in the old ZooKeeper epoch, so
	// its token is above A's, in the same epoch.
	stopLeaderCleanly(ctx, t, runA, logA)
	startB := waitLeading(ctx, t, logB, "B leads and writes")
	if startB.token <= startA.token {
		t.Errorf("B's token %#x is not above A's %#x", startB.token, startA.token)
	}
	// A third leader, whose znode is created under the new ZooKeeper
	// leader: its token carries the new, higher epoch.
	logC := filepath.Join(dir, "c.log")
	runC := startRun(t, gw, "C", "leader", ma.Dir, []string{"LEASE_CHILD_LOG=" + logC, "LEASE_CHILD_MODE=loop"}, args...)
	waitUntil(ctx, t, "C is a candidate", func() bool { return len(zkCandidates(t, c, election)) == 2 })
	stopLeaderCleanly(ctx, t, runB, logB)
	startC := waitLeading(ctx, t, logC, "C leads and writes")
	if startC.token>>32 <= startA.token>>32 {
		t.Errorf("C's token %#x is not of a later ZooKeeper epoch than A's %#x", startC.token, startA.token)
	}
	stopLeaderCleanly(ctx, t, runC, logC)
	t.Logf("tokens: A %#x, B %#x, C %#x (the high 32 bits: the ZooKeeper epoch)", startA.token, startB.token, startC.token)
	wantNothingLeft(t, c, "/fencefs")
}

func TestRunZooKeeperStoppedStopsTheCommandWithinTheSessionTimeout(t *testing.T) {
	gw := gateway.ForTest(t)
	ens := zkserver.ForTest(t, zkserver.Options{})
	// The connection breaks at once; the session counts as ended the
	// session timeout later. Plus margin for a loaded machine.
	out := coordinatorStoppedStopsTheCommand(t, gw, zkArgs(ens, "/stopped"), ens.Servers[0].Kill, zkSession+4*time.Second)
	if !strings.Contains(out, "fencefs: run: lease leader lost: no ZooKeeper server answered for the session timeout 2s") {
		t.Errorf("fencefs run did not say why it lost the leadership; output:\n%s", out)
	}
}

func TestRunZooKeeperBadInputIsOneLineAndStartsNothing(t *testing.T) {
	gw := gateway.ForTest(t)
	ens := zkserver.Shared(t)
	c := zkConn(t, ens)
	root := "/" + t.Name()
	// A path only the user "owner" (password right-password) may use.
	if err := c.AddAuth("digest", []byte("owner:right-password")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(root, nil, 0, zk.AuthACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(root, -1) })
	bucket := gateway.NewBucket(t, gw)
	m := harness.Mount(t, gw, bucket)
	port, err := gateway.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A mismatch: an epoch far above any zxid of this server.
	fenced := gateway.NewBucket(t, gw)
	if out, err := harness.Run(ctx, t, gw, nil, "epoch", "raise", fenced, "1000000000000"); err != nil {
		t.Fatalf("epoch raise: %v\n%s", err, out)
	}
	mf := harness.Mount(t, gw, fenced)
	gwHostPort := strings.TrimPrefix(gw.Endpoint, "http://")
	owner := []string{"--zookeeper", ens.Connect(), "--zookeeper-prefix", root + "/fencefs", "--zookeeper-username", "owner"}

	wantBadRunsRefused(ctx, t, gw, []badRun{
		{"nothing listens", m.Dir, nil, []string{"--zookeeper", "127.0.0.1:" + strconv.Itoa(port), "--zookeeper-dial-timeout", "2s"},
			"cannot reach ZooKeeper at 127.0.0.1:" + strconv.Itoa(port) + " within 2s (zookeeper.dial_timeout): 127.0.0.1:" + strconv.Itoa(port) + ": connection refused"},
		{"not a ZooKeeper port", m.Dir, nil, []string{"--zookeeper", gwHostPort, "--zookeeper-dial-timeout", "2s"},
			"within 2s (zookeeper.dial_timeout): no session was established: is it a ZooKeeper client port?"},
		{"bad path", m.Dir, nil, []string{"--zookeeper", ens.Connect(), "--zookeeper-prefix", "fencefs"}, `zookeeper.prefix (--zookeeper-prefix): "fencefs" is not a usable znode path: it must start with /`},
		{"chroot in the servers", m.Dir, nil, []string{"--zookeeper", ens.Connect() + "/kafka"}, "names a chroot (/kafka): give the path as zookeeper.prefix instead"},
		{"anonymous on a locked path", m.Dir, nil, []string{"--zookeeper", ens.Connect(), "--zookeeper-prefix", root + "/fencefs"}, "ZooKeeper refused creating " + root + "/fencefs (NoAuth)"},
		{"wrong password", m.Dir, []string{"FENCEFS_ZOOKEEPER_PASSWORD=wrong-password"}, owner, `(NoAuth): its ACL does not admit user "owner" with this password`},
		{"user without password", m.Dir, nil, owner, "zookeeper.password: missing for ZooKeeper user \"owner\""},
		{"etcd and ZooKeeper", m.Dir, nil, []string{"--zookeeper", ens.Connect(), "--etcd", "http://127.0.0.1:1"}, "are both set: a fence domain takes its tokens from one source"},
		{"token source mismatch", mf.Dir, nil, []string{"--zookeeper", ens.Connect(), "--zookeeper-prefix", "/" + t.Name() + "-mismatch"}, "token source mismatch: the ZooKeeper zxid"},
	})
	if kids, _, err := c.Children(root); err != nil || len(kids) != 0 {
		t.Errorf("under %s after the refusals: %v %v; want nothing", root, kids, err)
	}
	wantNothingLeft(t, c, "/"+t.Name()+"-mismatch")

	// The right password, from a file.
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("right-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"run", "--lease", "leader", "--mount", m.Dir, "--zookeeper-password-file", pwFile}, owner...)
	out, err := harness.Run(ctx, t, gw, nil, append(args, "--", "/bin/sh", "-c", "echo token=$FENCEFS_TOKEN")...)
	if err != nil || !strings.Contains(out, "token=") {
		t.Errorf("right password: fencefs run: %v; output:\n%s", err, out)
	}
	if kids, _, err := c.Children(root); err != nil || len(kids) != 0 {
		t.Errorf("under %s after a clean run: %v %v; want nothing", root, kids, err)
	}
}
