package integration

// A leader frozen past its lease (or session) while its command appends to
// a file, replaced by a new leader that appends to the same file, then
// thawed: its next append is refused as a stale leader's (EROFS, never
// ESTALE, though the append's staging read meets the new leader's version
// first), and fencefs run exits 75 even though its command ended (status
// 1) before it had noticed the loss itself.

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/etcdserver"
	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/fencefs/fencefs/integration/zkserver"
)

func TestRunThawedLeadersAppendIsEROFSAndRunExits75(t *testing.T) {
	gw := gateway.ForTest(t)
	t.Run("s3-lease", func(t *testing.T) {
		thawedAppenderIsRefusedAndRunExits75(t, gw, []string{"--ttl", "2s"}, []string{"not renewed within", "taken over", "it could not be confirmed"})
	})
	t.Run("etcd", func(t *testing.T) {
		srv := etcdserver.ForTest(t, etcdserver.Options{})
		co := etcdCoordinator(context.Background(), t, srv)
		thawedAppenderIsRefusedAndRunExits75(t, gw, co.args(), co.lost)
	})
	t.Run("zookeeper", func(t *testing.T) {
		ens := zkserver.Shared(t)
		co := zkCoordinator(t, ens, "/"+strings.ReplaceAll(t.Name(), "/", "-"))
		thawedAppenderIsRefusedAndRunExits75(t, gw, co.args(), co.lost)
	})
}

func thawedAppenderIsRefusedAndRunExits75(t *testing.T, gw *gateway.Gateway, args, lost []string) {
	bucket := gateway.NewBucket(t, gw)
	ma := harness.Mount(t, gw, bucket)
	mb := harness.Mount(t, gw, bucket)
	dir := t.TempDir()
	logA, logB := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args = append(args, "--grace", "5s")

	runA := startRun(t, gw, "A", "leader", ma.Dir, []string{"LEASE_CHILD_LOG=" + logA, "LEASE_CHILD_MODE=append"}, args...)
	startA := waitLeading(ctx, t, logA, "A's command appends through its mount")

	freezeLeader(t, runA, startA.pid, ma)
	frozenAt := len(readChildLog(t, logA))

	runB := startRun(t, gw, "B", "leader", mb.Dir, []string{"LEASE_CHILD_LOG=" + logB, "LEASE_CHILD_MODE=append"}, args...)
	startB := waitLeading(ctx, t, logB, "B leads once A's leadership ends, and appends to the same file")
	if startB.token <= startA.token {
		t.Fatalf("B's token %d is not above A's %d", startB.token, startA.token)
	}

	// The mount and the command wake first; fencefs run A stays frozen, so
	// nothing has told the command: its append meets B's version of the
	// file, and the answer must be the stale leader's EROFS.
	_ = syscall.Kill(ma.Pid(), syscall.SIGCONT)
	_ = syscall.Kill(-startA.pid, syscall.SIGCONT)
	var refused childEvent
	waitUntil(ctx, t, "A's command ends on a refused append", func() bool {
		evs := readChildLog(t, logA)
		_, ended := findEvent(evs[min(frozenAt, len(evs)):], func(e childEvent) bool { return e.kind == "end" })
		refused, _ = findEvent(evs[min(frozenAt, len(evs)):], func(e childEvent) bool { return e.kind == "write" && e.res != "ok" })
		return ended
	})
	if refused.res != "EROFS" {
		t.Errorf("the thawed leader's append %s failed with %s; want EROFS", refused.key, refused.res)
	}

	// Now fencefs run A: its command has ended with status 1 before it saw
	// the loss; it must find the loss out and exit 75, not 1.
	_ = syscall.Kill(runA.cmd.Process.Pid, syscall.SIGCONT)
	if code := runA.wait(ctx, t); code != 75 {
		t.Errorf("fencefs run A exited %d; want 75 (leadership lost); output:\n%s", code, runA.output())
	}
	out := runA.output()
	said := false
	for _, m := range append(lost, "the mount at "+ma.Dir+" is fenced") {
		said = said || strings.Contains(out, "fencefs: run: lease leader lost: "+m)
	}
	if !said {
		t.Errorf("fencefs run A did not say why it lost the leadership (%q); output:\n%s", lost, out)
	}

	// The shared file holds every append acknowledged to either command and
	// not A's refused one.
	before := len(readChildLog(t, logB))
	waitUntil(ctx, t, "B keeps appending", func() bool {
		evs := readChildLog(t, logB)
		_, ok := findEvent(evs[min(before, len(evs)):], func(e childEvent) bool { return e.kind == "write" && e.res == "ok" })
		return ok
	})
	stopLeaderCleanly(ctx, t, runB, logB)
	o := readLeaseObj(ctx, t, gw, bucket, "log")
	for _, e := range append(readChildLog(t, logA), readChildLog(t, logB)...) {
		if e.kind != "write" {
			continue
		}
		if in := strings.Contains(o.body, e.key+"\n"); in != (e.res == "ok") {
			t.Errorf("append %s (%s): in the file = %v", e.key, e.res, in)
		}
	}
}
