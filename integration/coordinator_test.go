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

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
)

// The scenarios every external coordinator of `fencefs run` (etcd,
// ZooKeeper) passes the same way; etcd_test.go and zk_test.go give each
// its coordinator.

// coordinator is how a scenario drives and inspects one coordinator.
type coordinator struct {
	// args are fencefs run's flags electing in it (extra appended).
	args func(extra ...string) []string
	// candidates lists the election "leader"'s candidates, each with the
	// number its token would be (create revision, Czxid).
	candidates func() map[string]int64
	// lost are the messages fencefs run may give for a frozen leader's
	// loss ("fencefs: run: lease leader lost: " + one of them).
	lost []string
}

// contendersTakeTurns runs three contenders on two mounts of one bucket,
// one after another, and checks that their commands ran one at a time
// with growing tokens, and that no candidate is left.
func contendersTakeTurns(t *testing.T, gw *gateway.Gateway, co coordinator) {
	bucket := gateway.NewBucket(t, gw)
	a := harness.Mount(t, gw, bucket)
	b := harness.Mount(t, gw, bucket)
	logPath := filepath.Join(t.TempDir(), "children.log")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	child := []string{"LEASE_CHILD_LOG=" + logPath, "LEASE_CHILD_MODE=hold", "LEASE_CHILD_HOLD=700ms"}
	runs := []*runProc{
		startRun(t, gw, "A1", "leader", a.Dir, child, co.args()...),
		startRun(t, gw, "B", "leader", b.Dir, child, co.args()...),
		startRun(t, gw, "A2", "leader", a.Dir, child, co.args()...),
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
	if left := co.candidates(); len(left) != 0 {
		t.Errorf("candidates left after every run resigned: %v", left)
	}
}

// frozenLeaderIsFencedAndStopped freezes a leading fencefs run with its
// command and mount; a waiting candidate is elected with a higher token
// and writes; when the old leader wakes, its writes are refused (EROFS)
// and its fencefs run stops the command and exits 75.
func frozenLeaderIsFencedAndStopped(t *testing.T, gw *gateway.Gateway, co coordinator) {
	bucket := gateway.NewBucket(t, gw)
	ma := harness.Mount(t, gw, bucket)
	mb := harness.Mount(t, gw, bucket)
	dir := t.TempDir()
	logA, logB := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addrB := metricsAddr(t)

	runA, startA := startWritingLeader(ctx, t, gw, ma.Dir, logA, co.args("--grace", "5s")...)
	cands := co.candidates()
	if len(cands) != 1 {
		t.Fatalf("candidates %v; want A's alone", cands)
	}
	for _, n := range cands {
		if uint64(n) != startA.token {
			t.Errorf("A's token %d is not its candidate's number %d", startA.token, n)
		}
	}

	runB := startRun(t, gw, "B", "leader", mb.Dir, []string{"LEASE_CHILD_LOG=" + logB, "LEASE_CHILD_MODE=loop"}, co.args("--grace", "5s", "--metrics-addr", addrB)...)
	waitUntil(ctx, t, "B is a candidate", func() bool { return len(co.candidates()) == 2 })
	wantHealth(t, addrB, 503, "waiting for lease leader")
	if evs := readChildLog(t, logB); len(evs) != 0 {
		t.Fatalf("B's command started while A leads: %v", evs)
	}

	frozenLeaderIsReplaced(ctx, t, gw, bucket, ma, runA, startA, logA, logB, addrB, co.lost)

	// B keeps writing; SIGTERM is forwarded, the command exits 0, B resigns.
	stopLeaderCleanly(ctx, t, runB, logB)
	if left := co.candidates(); len(left) != 0 {
		t.Errorf("candidates after B resigned: %v", left)
	}
}

// frozenLeaderIsReplaced freezes leader A (its run, its command and its
// mount ma), and checks the takeover that follows: B, waiting with its
// command logging to logB and its metrics on addrB, leads with a larger
// token; A's mount and command, thawed, are refused EROFS; A's run, thawed,
// exits 75 saying one of lost; A's command was stopped by SIGTERM, and
// none of its writes after the takeover landed.
func frozenLeaderIsReplaced(ctx context.Context, t *testing.T, gw *gateway.Gateway, bucket string, ma *harness.FS,
	runA *runProc, startA childEvent, logA, logB, addrB string, lost []string) {
	t.Helper()
	freezeLeader(t, runA, startA.pid, ma)
	startB := waitLeading(ctx, t, logB, "B leads once A is frozen past its session or lease, and writes")
	if startB.token <= startA.token {
		t.Fatalf("B's token %d is not above A's %d", startB.token, startA.token)
	}
	wantHealth(t, addrB, 200, "ok lease=leader token="+strconv.FormatUint(startB.token, 10))
	wantMetrics(t, addrB, "fencefs_lease_held{lease=\"leader\"} 1", "fencefs_lease_token{lease=\"leader\"} "+strconv.FormatUint(startB.token, 10),
		"fencefs_lease_acquisitions_total{how=\"elected\",lease=\"leader\"} 1")

	// The mount and the command wake first: the storage refuses them.
	thawAndWantEROFS(ctx, t, logA, ma, startA.pid)
	// Then fencefs run A: its leadership is gone, it stops the command.
	_ = syscall.Kill(runA.cmd.Process.Pid, syscall.SIGCONT)
	if code := runA.wait(ctx, t); code != 75 {
		t.Errorf("fencefs run A exited %d; want 75; output:\n%s", code, runA.output())
	}
	said := false
	for _, m := range lost {
		said = said || strings.Contains(runA.output(), "fencefs: run: lease leader lost: "+m)
	}
	if !said {
		t.Errorf("fencefs run A did not say it lost the leadership (%q); output:\n%s", lost, runA.output())
	}
	evsA := readChildLog(t, logA)
	if last := evsA[len(evsA)-1]; last.kind != "term" {
		t.Errorf("A's command was not stopped by SIGTERM; its last event: %+v", last)
	}
	checkFencedWrites(ctx, t, gw, bucket, evsA, startA.token)
}

// freezeLeader stops the whole leader — fencefs run, its command's process
// group (cmdPid), its mount — and makes sure the test never leaves them
// frozen.
func freezeLeader(t *testing.T, run *runProc, cmdPid int, mount *harness.FS) {
	t.Helper()
	for _, pid := range []int{run.cmd.Process.Pid, -cmdPid, mount.Pid()} {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP %d: %v", pid, err)
		}
	}
	t.Cleanup(func() {
		for _, pid := range []int{mount.Pid(), -cmdPid, run.cmd.Process.Pid} {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
}

// waitLeading waits until the command logging to logPath has started and
// written through its mount, and returns its start event (its process
// group is killed at cleanup).
func waitLeading(ctx context.Context, t *testing.T, logPath, what string) childEvent {
	t.Helper()
	var start childEvent
	waitUntil(ctx, t, what, func() bool {
		evs := readChildLog(t, logPath)
		start, _ = findEvent(evs, func(e childEvent) bool { return e.kind == "start" })
		_, ok := findEvent(evs, func(e childEvent) bool { return e.kind == "write" && e.res == "ok" })
		return ok
	})
	killGroupOnCleanup(t, start.pid)
	return start
}

// coordinatorStoppedStopsTheCommand starts a leader electing with args,
// kills its coordinator once the command runs, and checks that the
// command is stopped within bound and fencefs run exits 75. It returns
// fencefs run's output.
func coordinatorStoppedStopsTheCommand(t *testing.T, gw *gateway.Gateway, args []string, kill func(), bound time.Duration) string {
	bucket := gateway.NewBucket(t, gw)
	m := harness.Mount(t, gw, bucket)
	logPath := filepath.Join(t.TempDir(), "a.log")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	run := startRun(t, gw, "A", "leader", m.Dir, []string{"LEASE_CHILD_LOG=" + logPath, "LEASE_CHILD_MODE=loop"}, append(args, "--grace", "5s")...)
	waitUntil(ctx, t, "the command runs", func() bool {
		_, ok := findEvent(readChildLog(t, logPath), func(e childEvent) bool { return e.kind == "write" })
		return ok
	})
	kill()
	killed := time.Now()
	waitUntil(ctx, t, "the command is stopped", func() bool {
		_, ok := findEvent(readChildLog(t, logPath), func(e childEvent) bool { return e.kind == "term" })
		return ok
	})
	if took := time.Since(killed); took > bound {
		t.Errorf("the command was stopped %v after the coordinator died; want within %v", took, bound)
	}
	if code := run.wait(ctx, t); code != 75 {
		t.Errorf("fencefs run exited %d; want 75; output:\n%s", code, run.output())
	}
	t.Logf("stopped %v after the coordinator died; fencefs run:\n%s", time.Since(killed).Round(10*time.Millisecond), run.output())
	return run.output()
}

// badRun is an invocation of fencefs run that must fail before it starts
// anything.
type badRun struct {
	name  string
	mount string
	env   []string
	args  []string
	want  string // in the last line, after "fencefs: run: "
}

// wantBadRunsRefused runs each of runs and checks that it fails with its
// one line last, shows no "wrong-password", and never starts COMMAND.
func wantBadRunsRefused(ctx context.Context, t *testing.T, gw *gateway.Gateway, runs []badRun) {
	for _, tc := range runs {
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
}
