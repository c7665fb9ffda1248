package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"
)

// End-to-end tests of `fencefs run` : real binaries, real FUSE
// mounts, the real gateway. The COMMAND that `fencefs run` supervises is
// this test binary re-executed in "lease child" mode (see init below): it
// writes files through its mount and logs what happened, one line per
// event, to a local file the test reads.

const leaseChildEnv = "FENCEFS_LEASE_TEST_CHILD"

func init() {
	if os.Getenv(leaseChildEnv) == "1" {
		os.Exit(leaseChild())
	}
}

// leaseChild is the supervised command. Environment: FENCEFS_TOKEN,
// FENCEFS_MOUNT (from fencefs run), LEASE_CHILD_NAME, LEASE_CHILD_LOG, and
// LEASE_CHILD_MODE: "hold" writes one file, waits for LEASE_CHILD_HOLD (a
// duration) or until the file LEASE_CHILD_UNTIL exists, and exits 0; "loop"
// writes a new file every 100 ms until SIGTERM, then exits 0; "append"
// appends a line to the file "log" every 100 ms until SIGTERM (exit 0) or
// the first failed append (exit 1). Log lines:
//
//	start NAME TOKEN PID BOUND   (BOUND: the mount's user.fencefs.token)
//	write NAME TOKEN KEY ok|EROFS|err:…
//	end NAME TOKEN | term NAME TOKEN
func leaseChild() int {
	name, tok, mnt := os.Getenv("LEASE_CHILD_NAME"), os.Getenv("FENCEFS_TOKEN"), os.Getenv("FENCEFS_MOUNT")
	logf, err := os.OpenFile(os.Getenv("LEASE_CHILD_LOG"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lease child:", err)
		return 3
	}
	say := func(format string, a ...any) { _, _ = logf.Write([]byte(fmt.Sprintf(format, a...) + "\n")) }
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	buf := make([]byte, 64)
	bound := "?"
	if n, err := unix.Getxattr(mnt, "user.fencefs.token", buf); err == nil {
		bound = string(buf[:n])
	}
	say("start %s %s %d %s", name, tok, os.Getpid(), bound)
	write := func(i int) {
		key := fmt.Sprintf("%s-%s-%03d", name, tok, i)
		res := "ok"
		if err := os.WriteFile(filepath.Join(mnt, key), []byte(key), 0o644); errors.Is(err, syscall.EROFS) {
			res = "EROFS"
		} else if err != nil {
			res = "err:" + strings.ReplaceAll(err.Error(), " ", "_")
		}
		say("write %s %s %s %s", name, tok, key, res)
	}
	switch os.Getenv("LEASE_CHILD_MODE") {
	case "hold":
		write(0)
		var timeout <-chan time.Time
		if d, err := time.ParseDuration(os.Getenv("LEASE_CHILD_HOLD")); err == nil {
			timeout = time.After(d)
		}
		until := os.Getenv("LEASE_CHILD_UNTIL")
		for {
			if until != "" {
				if _, err := os.Stat(until); err == nil {
					break
				}
			}
			select {
			case <-term:
				say("term %s %s", name, tok)
				return 0
			case <-timeout:
				say("end %s %s", name, tok)
				return 0
			case <-time.After(20 * time.Millisecond):
				continue
			}
		}
		say("end %s %s", name, tok)
		return 0
	case "append":
		// Like `set -e; while :; do echo … >> log; sleep 0.1; done`: the
		// first failed append ends the command with status 1.
		for i := 0; ; i++ {
			key := fmt.Sprintf("log-%s-%s-%03d", name, tok, i)
			res := "ok"
			if err := appendLine(filepath.Join(mnt, "log"), key+"\n"); errors.Is(err, syscall.EROFS) {
				res = "EROFS"
			} else if err != nil {
				res = "err:" + strings.ReplaceAll(err.Error(), " ", "_")
			}
			say("write %s %s %s %s", name, tok, key, res)
			if res != "ok" {
				say("end %s %s", name, tok)
				return 1
			}
			select {
			case <-term:
				say("term %s %s", name, tok)
				return 0
			case <-time.After(100 * time.Millisecond):
			}
		}
	case "loop":
		for i := 0; ; i++ {
			write(i)
			select {
			case <-term:
				say("term %s %s", name, tok)
				return 0
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	say("bad mode %q", os.Getenv("LEASE_CHILD_MODE"))
	return 3
}

// appendLine is `echo line >> path`: open with O_APPEND, write, close (the
// close's error counts, as the shell's would with set -e).
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// childEvent is one parsed line of a child log.
type childEvent struct {
	kind, name string
	token      uint64
	pid        int
	bound      string // start: the mount's token xattr
	key, res   string // write
}

func readChildLog(t *testing.T, path string) []childEvent {
	t.Helper()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []childEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 {
			continue // a line being written
		}
		ev := childEvent{kind: fs[0], name: fs[1]}
		ev.token, _ = strconv.ParseUint(fs[2], 10, 64)
		switch {
		case ev.kind == "start" && len(fs) == 5:
			ev.pid, _ = strconv.Atoi(fs[3])
			ev.bound = fs[4]
		case ev.kind == "write" && len(fs) == 5:
			ev.key, ev.res = fs[3], fs[4]
		case ev.kind == "end" || ev.kind == "term":
		default:
			continue
		}
		out = append(out, ev)
	}
	return out
}

// runProc is one `fencefs run` process.
// startWritingLeader starts fencefs run A on the lease "leader" with a
// command that writes through mountDir in a loop (logging to logA), waits
// until a write landed, and returns the run and its command's start event
// (its process group is killed at cleanup).
func startWritingLeader(ctx context.Context, t *testing.T, gw *gateway.Gateway, mountDir, logA string, args ...string) (*runProc, childEvent) {
	t.Helper()
	runA := startRun(t, gw, "A", "leader", mountDir, []string{"LEASE_CHILD_LOG=" + logA, "LEASE_CHILD_MODE=loop"}, args...)
	return runA, waitLeading(ctx, t, logA, "A's command writes through its mount")
}

// stopLeaderCleanly sends SIGTERM to the leading fencefs run B, which
// forwards it: the command exits 0, and so does run; every write its
// command logged (at logB) landed.
func stopLeaderCleanly(ctx context.Context, t *testing.T, runB *runProc, logB string) {
	t.Helper()
	if err := runB.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := runB.wait(ctx, t); code != 0 {
		t.Errorf("fencefs run B exited %d after SIGTERM; want the command's 0; output:\n%s", code, runB.output())
	}
	for _, e := range readChildLog(t, logB) {
		if e.kind == "write" && e.res != "ok" {
			t.Errorf("B's write %s failed: %s", e.key, e.res)
		}
	}
}

type runProc struct {
	name    string
	cmd     *exec.Cmd
	outPath string
	done    chan struct{}
	err     error // valid after done
}

// startRun starts `fencefs run --lease lease --mount mnt ARGS… -- <this
// binary in child mode>` with the child's env, and cleans it (and its
// command's process group) up at the end of the test.
func startRun(t *testing.T, gw *gateway.Gateway, name, leaseName, mnt string, childEnv []string, args ...string) *runProc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &runProc{name: name, outPath: filepath.Join(t.TempDir(), "run-"+name+".log"), done: make(chan struct{})}
	out, err := os.Create(p.outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	full := append([]string{"run", "--lease", leaseName, "--mount", mnt, "--endpoint", gw.Endpoint, "--log-level", "info"}, args...)
	full = append(full, "--", self)
	p.cmd = exec.Command(harness.Binary(t), full...)
	p.cmd.Env = append(append(append(os.Environ(), gw.Env()...), childEnv...), leaseChildEnv+"=1", "LEASE_CHILD_NAME="+name)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
			return
		default:
		}
		t.Logf("cleanup: killing fencefs run %s; its output:\n%s", name, p.output())
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *runProc) output() string {
	b, _ := os.ReadFile(p.outPath)
	return string(b)
}

// wait waits for the process to exit and returns its exit status.
func (p *runProc) wait(ctx context.Context, t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-ctx.Done():
		t.Fatalf("fencefs run %s did not exit; output:\n%s", p.name, p.output())
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("fencefs run %s: %v", p.name, p.err)
	return -1
}

// killGroupOnCleanup makes sure a command's process group is gone at the
// end of the test, frozen or not.
func killGroupOnCleanup(t *testing.T, pid int) {
	t.Cleanup(func() {
		_ = syscall.Kill(-pid, syscall.SIGCONT)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	})
}

// waitUntil polls cond every 20 ms until it holds or ctx ends (then it
// fails the test with what).
func waitUntil(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func findEvent(evs []childEvent, match func(childEvent) bool) (childEvent, bool) {
	for _, e := range evs {
		if match(e) {
			return e, true
		}
	}
	return childEvent{}, false
}

// thawAndWantEROFS resumes a frozen leader's mount and command group (not
// its fencefs run: nothing has told the command of the loss yet) and waits
// until the command's writes are refused by the storage.
func thawAndWantEROFS(ctx context.Context, t *testing.T, logPath string, mount *harness.FS, cmdPid int) {
	t.Helper()
	resumedAt := len(readChildLog(t, logPath))
	_ = syscall.Kill(mount.Pid(), syscall.SIGCONT)
	_ = syscall.Kill(-cmdPid, syscall.SIGCONT)
	waitUntil(ctx, t, "the old leader's command gets EROFS through its fenced mount", func() bool {
		evs := readChildLog(t, logPath)
		_, ok := findEvent(evs[min(resumedAt, len(evs)):], func(e childEvent) bool { return e.kind == "write" && e.res == "EROFS" })
		return ok
	})
}

// checkFencedWrites checks the writes of a fenced leader with token tok:
// every one reported ok is in the bucket under its epoch (or newer); once
// refused, its mount refuses every later write; refused ones left nothing
// (or a sweep tombstone) behind.
func checkFencedWrites(ctx context.Context, t *testing.T, gw *gateway.Gateway, bucket string, evs []childEvent, tok uint64) {
	t.Helper()
	fenced := false
	for _, e := range evs {
		if e.kind != "write" {
			continue
		}
		o := readLeaseObj(ctx, t, gw, bucket, e.key)
		switch {
		case e.res == "ok" && fenced:
			t.Errorf("write %s succeeded after an earlier one was refused", e.key)
		case e.res == "ok" && !o.landed(e.key, tok):
			t.Errorf("acknowledged write %s: %+v; want its bytes stamped %d or newer", e.key, o, tok)
		case e.res != "ok":
			fenced = true
			if o.exists && !o.tombstone {
				t.Errorf("refused write %s (%s) is in the bucket: %+v", e.key, e.res, o)
			}
		}
	}
}

// leaseObj is an object as a plain S3 client sees it.
type leaseObj struct {
	exists, tombstone bool
	body              string
	epoch             uint64 // its fencefs-epoch stamp
}

func readLeaseObj(ctx context.Context, t *testing.T, gw *gateway.Gateway, bucket, key string) leaseObj {
	t.Helper()
	o, err := gw.Client().GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer o.Close()
	st, err := o.Stat()
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return leaseObj{}
		}
		t.Fatalf("stat %s: %v", key, err)
	}
	b, err := io.ReadAll(o)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	epoch, _ := strconv.ParseUint(st.UserMetadata["Fencefs-Epoch"], 10, 64)
	return leaseObj{exists: true, tombstone: st.UserMetadata["Fencefs-Tombstone"] == "1", body: string(b), epoch: epoch}
}

// landed reports whether the write of key by token is in the bucket: its
// bytes, stamped with that epoch or a newer one (a later holder's takeover
// sweep rewrites keys whose intents were still listed, and stamps them).
func (o leaseObj) landed(key string, token uint64) bool {
	return o.exists && !o.tombstone && o.body == key && o.epoch >= token
}

// leaseObject reads the lease object as a plain S3 client sees it.
func leaseObject(ctx context.Context, t *testing.T, gw *gateway.Gateway, bucket, name string) map[string]any {
	t.Helper()
	o, err := gw.Client().GetObject(ctx, bucket, ".fencefs/leases/"+name, minio.GetObjectOptions{})
	if err != nil {
		t.Fatalf("get lease object: %v", err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil {
		t.Fatalf("read lease object: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("lease object %q: %v", b, err)
	}
	return m
}

func TestRunContendersRunOneCommandAtATime(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	a := harness.Mount(t, gw, bucket)
	b := harness.Mount(t, gw, bucket)
	logPath := filepath.Join(t.TempDir(), "children.log")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	child := []string{"LEASE_CHILD_LOG=" + logPath, "LEASE_CHILD_MODE=hold", "LEASE_CHILD_HOLD=700ms"}
	runs := []*runProc{
		startRun(t, gw, "A1", "leader", a.Dir, child, "--ttl", "3s"),
		startRun(t, gw, "B", "leader", b.Dir, child, "--ttl", "3s"),
		startRun(t, gw, "A2", "leader", a.Dir, child, "--ttl", "3s"),
	}
	for _, r := range runs {
		if code := r.wait(ctx, t); code != 0 {
			t.Errorf("fencefs run %s exited %d; output:\n%s", r.name, code, r.output())
		}
	}

	evs := readChildLog(t, logPath)
	var (
		inside  string // the command running, by the log
		last    uint64
		started = map[string]bool{}
	)
	for _, e := range evs {
		switch e.kind {
		case "start":
			if inside != "" {
				t.Errorf("%s started while %s was still running", e.name, inside)
			}
			inside = e.name
			started[e.name] = true
			if e.token <= last {
				t.Errorf("%s got token %d after token %d: tokens must grow", e.name, e.token, last)
			}
			last = e.token
			if e.bound != strconv.FormatUint(e.token, 10) {
				t.Errorf("%s: FENCEFS_TOKEN %d but its mount shows token %s", e.name, e.token, e.bound)
			}
		case "write":
			if e.res != "ok" {
				t.Errorf("%s (token %d) could not write while holding the lease: %s", e.name, e.token, e.res)
			}
			if o := readLeaseObj(ctx, t, gw, bucket, e.key); !o.landed(e.key, e.token) {
				t.Errorf("%s in the bucket: %+v; want its bytes, stamped %d or newer", e.key, o, e.token)
			}
		case "end", "term":
			if inside != e.name {
				t.Errorf("%s ended but %q was the one running", e.name, inside)
			}
			inside = ""
		}
	}
	if len(started) != 3 {
		t.Fatalf("commands started: %v; want A1, A2 and B; log:\n%v", started, evs)
	}
	if m := leaseObject(ctx, t, gw, bucket, "leader"); m["released"] != true || uint64(m["token"].(float64)) != last {
		t.Errorf("lease object after all runs = %v; want released, last token %d", m, last)
	}
}

func TestRunFrozenLeaderIsFencedAndStopped(t *testing.T) {
	gateway.ForEachServer(t, gateway.ErasureCodedServers, testRunFrozenLeaderIsFencedAndStopped)
}

func testRunFrozenLeaderIsFencedAndStopped(t *testing.T, gw *gateway.Gateway) {
	bucket := gateway.NewBucket(t, gw)
	ma := harness.Mount(t, gw, bucket)
	mb := harness.Mount(t, gw, bucket)
	dir := t.TempDir()
	logA, logB := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	runA, startA := startWritingLeader(ctx, t, gw, ma.Dir, logA, "--ttl", "2s", "--grace", "5s")
	tokA := startA.token

	runB := startRun(t, gw, "B", "leader", mb.Dir, []string{"LEASE_CHILD_LOG=" + logB, "LEASE_CHILD_MODE=loop"}, "--ttl", "2s", "--grace", "5s")

	// Freeze the whole leader: fencefs run, its command, its mount.
	for _, sig := range []struct {
		pid  int
		what string
	}{{runA.cmd.Process.Pid, "fencefs run A"}, {-startA.pid, "A's command group"}, {ma.Pid(), "A's mount"}} {
		if err := syscall.Kill(sig.pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP %s: %v", sig.what, err)
		}
	}
	t.Cleanup(func() { // whatever happens, never leave them frozen
		_ = syscall.Kill(ma.Pid(), syscall.SIGCONT)
		_ = syscall.Kill(-startA.pid, syscall.SIGCONT)
		_ = syscall.Kill(runA.cmd.Process.Pid, syscall.SIGCONT)
	})

	var startB childEvent
	waitUntil(ctx, t, "B takes the lease over and writes", func() bool {
		evs := readChildLog(t, logB)
		startB, _ = findEvent(evs, func(e childEvent) bool { return e.kind == "start" })
		_, ok := findEvent(evs, func(e childEvent) bool { return e.kind == "write" && e.res == "ok" })
		return ok
	})
	killGroupOnCleanup(t, startB.pid)
	if startB.token <= tokA {
		t.Fatalf("B's token %d is not above A's %d", startB.token, tokA)
	}
	if !strings.Contains(runB.output(), "how=expired") {
		t.Errorf("B's acquisition was not a takeover of an expired lease; output:\n%s", runB.output())
	}

	// The mount and the command wake up first; fencefs run A stays frozen,
	// so nothing has told the command yet: the storage refuses it.
	thawAndWantEROFS(ctx, t, logA, ma, startA.pid)

	// Now fencefs run A wakes: it finds its lease lost, stops the command
	// and exits 75.
	_ = syscall.Kill(runA.cmd.Process.Pid, syscall.SIGCONT)
	if code := runA.wait(ctx, t); code != 75 {
		t.Errorf("fencefs run A exited %d; want 75 (lease lost); output:\n%s", code, runA.output())
	}
	if out := runA.output(); !strings.Contains(out, "fencefs: run: lease leader lost") {
		t.Errorf("fencefs run A did not say the lease was lost; output:\n%s", out)
	}
	t.Logf("fencefs run A:\n%s", runA.output())
	evsA := readChildLog(t, logA)
	if last := evsA[len(evsA)-1]; last.kind != "term" {
		t.Errorf("A's command was not stopped by SIGTERM; its last event: %+v", last)
	}

	checkFencedWrites(ctx, t, gw, bucket, evsA, tokA)

	// B keeps the lease and its writes land; SIGTERM to fencefs run B is
	// forwarded, the command exits 0, the lease is released.
	before := len(readChildLog(t, logB))
	waitUntil(ctx, t, "B keeps writing after A is gone", func() bool {
		evs := readChildLog(t, logB)
		_, ok := findEvent(evs[min(before, len(evs)):], func(e childEvent) bool { return e.kind == "write" && e.res == "ok" })
		return ok
	})
	stopLeaderCleanly(ctx, t, runB, logB)
	m := leaseObject(ctx, t, gw, bucket, "leader")
	if m["released"] != true || uint64(m["token"].(float64)) != startB.token {
		t.Errorf("lease object = %v; want released by B with token %d", m, startB.token)
	}
}

func TestRunReleaseHandsOverAtOnce(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	ma := harness.Mount(t, gw, bucket)
	mb := harness.Mount(t, gw, bucket)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "children.log")
	doneA, doneB := filepath.Join(dir, "done-a"), filepath.Join(dir, "done-b")
	// The TTL is far longer than the test may take: B can only get the
	// lease from A's release, never from its expiry.
	const ttl = "10m"
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	addrA, addrB := metricsAddr(t), metricsAddr(t)
	runA := startRun(t, gw, "A", "leader", ma.Dir, []string{"LEASE_CHILD_LOG=" + logPath, "LEASE_CHILD_MODE=hold", "LEASE_CHILD_UNTIL=" + doneA}, "--ttl", ttl, "--metrics-addr", addrA)
	var startA childEvent
	waitUntil(ctx, t, "A's command starts", func() bool {
		var ok bool
		startA, ok = findEvent(readChildLog(t, logPath), func(e childEvent) bool { return e.kind == "start" })
		return ok
	})
	killGroupOnCleanup(t, startA.pid)
	runB := startRun(t, gw, "B", "leader", mb.Dir, []string{"LEASE_CHILD_LOG=" + logPath, "LEASE_CHILD_MODE=hold", "LEASE_CHILD_UNTIL=" + doneB}, "--ttl", ttl, "--metrics-addr", addrB)
	waitUntil(ctx, t, "B waits for the lease held by A", func() bool {
		return strings.Contains(runB.output(), "waiting for the lease") && strings.Contains(runB.output(), "holder=")
	})
	// What an operator sees: A holds (healthy, held 1, its token), B waits.
	wantHealth(t, addrA, 200, fmt.Sprintf("ok lease=leader token=%d", startA.token))
	wantMetrics(t, addrA, `fencefs_lease_held{lease="leader"} 1`, fmt.Sprintf(`fencefs_lease_token{lease="leader"} %d`, startA.token),
		`fencefs_lease_acquisitions_total{how="created",lease="leader"} 1`, `fencefs_lease_last_renewal_timestamp_seconds{lease="leader"}`,
		`fencefs_s3_requests_total`)
	wantHealth(t, addrB, 503, "waiting for lease leader")
	wantMetrics(t, addrB, `fencefs_lease_held{lease="leader"} 0`)
	if _, ok := findEvent(readChildLog(t, logPath), func(e childEvent) bool { return e.name == "B" }); ok {
		t.Fatalf("B's command ran while A holds the lease")
	}

	if err := os.WriteFile(doneA, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := runA.wait(ctx, t); code != 0 {
		t.Fatalf("fencefs run A exited %d; output:\n%s", code, runA.output())
	}
	var startB childEvent
	waitUntil(ctx, t, "B's command starts after A's release", func() bool {
		var ok bool
		startB, ok = findEvent(readChildLog(t, logPath), func(e childEvent) bool { return e.kind == "start" && e.name == "B" })
		return ok
	})
	killGroupOnCleanup(t, startB.pid)
	if !strings.Contains(runB.output(), "how=released") {
		t.Errorf("B did not acquire through A's release; output:\n%s", runB.output())
	}
	wantHealth(t, addrB, 200, fmt.Sprintf("ok lease=leader token=%d", startB.token))
	wantMetrics(t, addrB, `fencefs_lease_held{lease="leader"} 1`, `fencefs_lease_acquisitions_total{how="released",lease="leader"} 1`)
	if startB.token <= startA.token {
		t.Errorf("B's token %d is not above A's %d", startB.token, startA.token)
	}
	// A's mount is fenced by B's token; B's writes.
	if err := os.WriteFile(ma.Path("after-release"), []byte("A"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write through A's mount after B bound: %v; want EROFS", err)
	}
	if err := os.WriteFile(doneB, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := runB.wait(ctx, t); code != 0 {
		t.Errorf("fencefs run B exited %d; output:\n%s", code, runB.output())
	}
}

func TestRunExitsWithTheCommandsStatusAndReportsStartFailures(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	m := harness.Mount(t, gw, bucket)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tests := []struct {
		name     string
		command  []string
		wantCode int
		wantOut  string
	}{
		{"status passed through", []string{"/bin/sh", "-c", `test "$FENCEFS_TOKEN" -gt 0 && test "$FENCEFS_LEASE" = job && exit 7`}, 7, ""},
		{"killed by a signal", []string{"/bin/sh", "-c", "kill -KILL $$"}, 128 + 9, ""},
		{"command not found", []string{"/nonexistent/cmd"}, 127, "fencefs: run: cannot run /nonexistent/cmd"},
	}
	for _, tt := range tests { // in order: the cases share the lease
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"run", "--lease", "job", "--mount", m.Dir, "--endpoint", gw.Endpoint, "--ttl", "3s", "--"}, tt.command...)
			out, err := harness.Run(ctx, t, gw, nil, args...)
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode || !strings.Contains(out, tt.wantOut) {
				t.Errorf("exit %d, output %q; want exit %d and %q", code, out, tt.wantCode, tt.wantOut)
			}
			if lo := leaseObject(ctx, t, gw, bucket, "job"); lo["released"] != true {
				t.Errorf("lease not released after the command: %v", lo)
			}
		})
	}
}

func TestRunInterruptedWhileWaitingExitsWithoutRunningTheCommand(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	m := harness.Mount(t, gw, bucket)
	dir := t.TempDir()
	logPath, doneA := filepath.Join(dir, "children.log"), filepath.Join(dir, "done-a")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	runA := startRun(t, gw, "A", "leader", m.Dir, []string{"LEASE_CHILD_LOG=" + logPath, "LEASE_CHILD_MODE=hold", "LEASE_CHILD_UNTIL=" + doneA}, "--ttl", "10m")
	var startA childEvent
	waitUntil(ctx, t, "A's command starts", func() bool {
		var ok bool
		startA, ok = findEvent(readChildLog(t, logPath), func(e childEvent) bool { return e.kind == "start" })
		return ok
	})
	killGroupOnCleanup(t, startA.pid)
	runB := startRun(t, gw, "B", "leader", m.Dir, []string{"LEASE_CHILD_LOG=" + logPath, "LEASE_CHILD_MODE=hold", "LEASE_CHILD_HOLD=1ms"}, "--ttl", "10m")
	waitUntil(ctx, t, "B waits for the lease", func() bool { return strings.Contains(runB.output(), "holder=") })
	if err := runB.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := runB.wait(ctx, t); code != 130 || !strings.Contains(runB.output(), "fencefs: run: interrupted by interrupt while waiting for lease leader") {
		t.Errorf("fencefs run B exited %d; want 130 with one line saying so; output:\n%s", code, runB.output())
	}
	if _, ok := findEvent(readChildLog(t, logPath), func(e childEvent) bool { return e.name == "B" }); ok {
		t.Errorf("B's command ran although B was interrupted while waiting")
	}
	if lo := leaseObject(ctx, t, gw, bucket, "leader"); lo["released"] == true || uint64(lo["token"].(float64)) != startA.token {
		t.Errorf("lease object after B gave up = %v; want still A's (token %d)", lo, startA.token)
	}
	if err := os.WriteFile(doneA, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code := runA.wait(ctx, t); code != 0 {
		t.Errorf("fencefs run A exited %d; output:\n%s", code, runA.output())
	}
}

// metricsAddr is a free loopback address for a --metrics-addr.
func metricsAddr(t *testing.T) string {
	t.Helper()
	port, err := gateway.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// wantHealth checks addr's /healthz status and that its body holds want.
func wantHealth(t *testing.T, addr string, code int, want string) {
	t.Helper()
	got, body := harness.Scrape(t, "http://"+addr+"/healthz")
	if got != code || !strings.Contains(body, want) {
		t.Errorf("%s/healthz = %d %q; want %d with %q", addr, got, body, code, want)
	}
}

// wantMetrics checks that addr's /metrics holds every line prefix of want.
func wantMetrics(t *testing.T, addr string, want ...string) {
	t.Helper()
	_, m := harness.Scrape(t, "http://"+addr+"/metrics")
	for _, w := range want {
		if !strings.Contains(m, w) {
			t.Errorf("%s/metrics lacks %q", addr, w)
		}
	}
}
