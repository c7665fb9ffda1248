package history

// The driver and the nemesis of a run: mounts of one bucket, each reached
// through a fault proxy of its own, worker processes on each (worker.go),
// and faults injected one at a time from the test's goroutine.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
)

// HogEnv, set in a process's environment, makes TestMain spin for that many
// seconds (a CPU hog of the nemesis).
const HogEnv = "FENCEFS_HISTORY_HOG"

// Config shapes a run.
type Config struct {
	Kind            gateway.Kind
	Duration        time.Duration
	Mounts          int // 3
	WorkersPerMount int // 3
	Files           int // 8 files that get every operation
	Logs            int // 2 files that only get appends (and reads)
	Seed            int64
	// MountArgs are added to every mount's arguments.
	MountArgs []string
	// Churn is the number of churn processes: each does issue 39 §1's
	// round (write and close A; open O_TRUNC, write B1, read the object
	// with a plain S3 client, write B2; close) in batches with nothing in
	// between, always on the mount that leads, on a random file.
	Churn int
	// Faults lists the kinds of faults the nemesis injects (move,
	// failback, freeze, cut, kill, raise, hog); empty: all of them.
	Faults []string
	// ChurnRounds is the number of rounds in one churn batch (10).
	ChurnRounds int
	// Skip lists operations the clients leave out, by kind or flavor
	// (write flavors: plain, peek, fsync, dup, fork, rename; kinds:
	// append, delete, chmod, read, s3read).
	Skip []string
	// Hogs is the number of busy-loop processes that run for the whole
	// run, besides the nemesis's hogs.
	Hogs int
	// LogDir, if set, receives a copy of every mount process's log when
	// the run ends (logs.go).
	LogDir string
}

func (c *Config) defaults() {
	if c.Mounts == 0 {
		c.Mounts = 3
	}
	if c.WorkersPerMount == 0 {
		c.WorkersPerMount = 3
	}
	if c.Files == 0 {
		c.Files = 8
	}
	if c.Logs == 0 {
		c.Logs = 2
	}
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano()
	}
	if c.ChurnRounds == 0 {
		c.ChurnRounds = 10
	}
}

// allows reports whether the nemesis may inject a fault of kind.
func (c *Config) allows(kind string) bool {
	if len(c.Faults) == 0 {
		return true
	}
	for _, k := range c.Faults {
		if k == kind {
			return true
		}
	}
	return false
}

// slot is one mount of the run; a kill -9 replaces its instance.
type slot struct {
	i     int
	dir   string
	proxy *harness.Proxy

	// gate is held shared by every operation on the mount and exclusively
	// by a restart: no operation reaches the directory while no fencefs
	// is mounted on it (it would write the local directory).
	gate sync.RWMutex

	mu     sync.Mutex
	fs     *harness.FS // GUARDED_BY(mu)
	holder string      // GUARDED_BY(mu)
	gen    int         // GUARDED_BY(mu): restarts so far
}

func (s *slot) current() (*harness.FS, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fs, s.holder
}

type run struct {
	t      *testing.T
	cfg    Config
	gw     *gateway.Gateway
	bucket string
	slots  []*slot
	files  []string
	logs   []string
	locks  map[string]chan struct{} // "mount/file": one operation at a time per file and mount
	stop   chan struct{}

	mu     sync.Mutex
	ops    []Op    // GUARDED_BY(mu)
	faults []Fault // GUARDED_BY(mu)
	nextID int     // GUARDED_BY(mu)
	// mountLogs are the logs of every mount process so far (logs.go).
	mountLogs []mountLog // GUARDED_BY(mu)

	// The nemesis's own state (its goroutine only).
	token  uint64
	leader int // slot of the last bind, -1 none
	rng    *rand.Rand
	// leading mirrors leader for the churn clients.
	leading atomic.Int32
}

func (r *run) setLeader(i int) {
	r.leader = i
	r.leading.Store(int32(i))
}

func (r *run) id() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID++
	return r.nextID
}

func (r *run) record(op Op) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

func (r *run) fault(f Fault) {
	r.mu.Lock()
	r.faults = append(r.faults, f)
	r.mu.Unlock()
}

func holderName(slot, gen int) string {
	if gen == 0 {
		return fmt.Sprintf("m%d", slot)
	}
	return fmt.Sprintf("m%d-r%d", slot, gen)
}

func (r *run) mountArgs(holder string, proxy *harness.Proxy) []string {
	return append([]string{"--endpoint", proxy.Endpoint(), "--holder", holder,
		"--meta-ttl", "0s", "--attr-ttl", "0s", "--entry-ttl", "0s", "--s3-timeout", "2s"}, r.cfg.MountArgs...)
}

// subdir is the directory that holds half of the files.
const subdir = "d"

// Run drives one run against a new server of cfg.Kind and returns its
// history. The mounts run harness.Binary ($FENCEFS_BIN).
func Run(t *testing.T, cfg Config) *History {
	cfg.defaults()
	gw := gateway.ForKind(t, cfg.Kind)
	r := &run{t: t, cfg: cfg, gw: gw, bucket: gateway.NewBucket(t, gw), locks: map[string]chan struct{}{},
		stop: make(chan struct{}), rng: rand.New(rand.NewSource(cfg.Seed))}
	r.setLeader(-1)
	for i := 0; i < cfg.Files; i++ {
		// Half in a directory: unlike the root, the kernel forgets it
		// whenever a bind drops the mount's entries.
		name := fmt.Sprintf("f%d", i)
		if i%2 == 1 {
			name = subdir + "/" + name
		}
		r.files = append(r.files, name)
	}
	for i := 0; i < cfg.Logs; i++ {
		r.logs = append(r.logs, fmt.Sprintf("log%d", i))
	}
	h := &History{Server: string(cfg.Kind), Binary: harness.Binary(t), Started: time.Now(), Duration: cfg.Duration.String(),
		Mounts: cfg.Mounts, Files: r.files, Logs: r.logs, LoadAvg: loadavg()}
	for i := 0; i < cfg.Mounts; i++ {
		s := &slot{i: i, proxy: harness.NewProxy(t, gw.Addr), holder: holderName(i, 0)}
		s.fs = harness.Mount(t, gw, r.bucket, r.mountArgs(s.holder, s.proxy)...)
		r.noteLog(s.holder, s.fs.LogPath)
		s.dir = s.fs.Dir
		r.slots = append(r.slots, s)
		for _, f := range append(append([]string(nil), r.files...), r.logs...) {
			r.locks[fmt.Sprintf("%d/%s", i, f)] = make(chan struct{}, 1)
		}
	}
	r.bind(0)
	if err := os.Mkdir(filepath.Join(r.slots[0].dir, subdir), 0o755); err != nil {
		t.Fatalf("mkdir %s through the first leader: %v", subdir, err)
	}

	var wg sync.WaitGroup
	var workers []*workerProc
	for _, s := range r.slots {
		for k := 0; k < cfg.WorkersPerMount; k++ {
			w, err := r.startWorker(len(workers), s)
			if err != nil {
				t.Fatalf("start worker: %v", err)
			}
			workers = append(workers, w)
			wg.Add(1)
			go func() { defer wg.Done(); r.client(w, rand.New(rand.NewSource(cfg.Seed+int64(w.n)+1))) }()
		}
	}
	for k := 0; k < cfg.Churn; k++ {
		w, err := r.startWorker(len(workers), nil)
		if err != nil {
			t.Fatalf("start churn worker: %v", err)
		}
		workers = append(workers, w)
		wg.Add(1)
		go func() { defer wg.Done(); r.churn(w, rand.New(rand.NewSource(cfg.Seed+int64(w.n)+1))) }()
	}
	var hogs []*exec.Cmd
	for k := 0; k < cfg.Hogs; k++ {
		if cmd := startHog(int(cfg.Duration/time.Second) + 1); cmd != nil {
			hogs = append(hogs, cmd)
		}
	}
	if cfg.Hogs > 0 {
		r.fault(Fault{Kind: "hog", Target: "cpu", Start: Now(), End: Now() + int64(cfg.Duration), Detail: fmt.Sprintf("%d busy loops for the whole run", cfg.Hogs)})
	}
	hogs = append(hogs, r.nemesis(time.Now().Add(cfg.Duration))...)
	close(r.stop)
	for _, hog := range hogs {
		_ = hog.Process.Kill()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Errorf("workers still busy 3 minutes after the run ended: killing them")
		for _, w := range workers {
			_ = w.cmd.Process.Kill()
		}
		<-done
	}
	for _, w := range workers {
		_ = w.stdin.Close()
		_ = w.cmd.Wait()
	}
	r.finalReads()
	r.saveLogs()
	r.mu.Lock()
	h.Ops, h.Faults = r.ops, r.faults
	r.mu.Unlock()
	h.LoadAvg += " … " + loadavg()
	return h
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

// finalReads reads every file with a plain S3 client once the workers are
// done: the logs' final content for the append invariants.
func (r *run) finalReads() {
	c := r.gw.Client()
	for _, f := range append(append([]string(nil), r.files...), r.logs...) {
		op := Op{ID: r.id(), Process: -2, Mount: -1, Kind: KS3Read, File: f, Invoke: Now()}
		res := Result{}
		s3read(c, r.bucket, f, &res)
		op.Complete = Now()
		op.Found, op.Data, op.Epoch, op.Errno = res.Found, res.Data, res.Epoch, res.Err
		r.record(op)
	}
}

type workerProc struct {
	n     int
	slot  *slot
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func (r *run) startWorker(n int, s *slot) (*workerProc, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), r.gw.Env()...), WorkerEnv+"="+r.gw.Addr+" "+r.bucket)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	return &workerProc{n: n, slot: s, cmd: cmd, stdin: stdin, out: sc}, nil
}

// client is the driver's loop for one worker: pick an operation, take the
// file's lock on the worker's mount (two processes of one mount writing one
// file at once would interleave like any local filesystem's writers, which
// no model of whole-file operations describes), send it, record the answer.
func (r *run) client(w *workerProc, rng *rand.Rand) {
	all := append(append([]string(nil), r.files...), r.logs...)
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		kind, flavor := pick(rng)
		if r.skips(kind, flavor) {
			continue
		}
		file := r.files[rng.Intn(len(r.files))]
		if kind == KAppend || kind == KRead || kind == KS3Read {
			file = all[rng.Intn(len(all))]
		}
		var lock chan struct{}
		if kind != KS3Read {
			lock = r.locks[fmt.Sprintf("%d/%s", w.slot.i, file)]
			select {
			case lock <- struct{}{}:
			case <-r.stop:
				return
			}
		}
		ok := r.do(w, rng, kind, flavor, file)
		if ok && flavor == "peek" {
			// The shape of issue 39 §1: a close, then at once an O_TRUNC
			// open of the same file, looked at from outside while it is
			// written.
			ok = r.do(w, rng, KWrite, "peek", file)
		}
		if lock != nil {
			<-lock
		}
		if !ok {
			return
		}
		pause := rng.Intn(10)
		if r.lastFailed(w) {
			pause = 20 + rng.Intn(100) // a fenced mount refuses at once: do not spin
		}
		time.Sleep(time.Duration(pause) * time.Millisecond)
	}
}

// skips reports whether the run leaves out operations of kind and flavor.
func (r *run) skips(kind Kind, flavor string) bool {
	for _, k := range r.cfg.Skip {
		if k == string(kind) || (flavor != "" && k == flavor) {
			return true
		}
	}
	return false
}

// lastFailed reports whether w's last operation was refused.
func (r *run) lastFailed(w *workerProc) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.ops) - 1; i >= 0 && i >= len(r.ops)-50; i-- {
		if r.ops[i].Process == w.n {
			return r.ops[i].Outcome == Failed
		}
	}
	return false
}

// pick chooses an operation: mostly reads (of all three kinds) and whole
// writes of every flavor.
func pick(rng *rand.Rand) (Kind, string) {
	n := rng.Intn(100)
	switch {
	case n < 16:
		return KS3Read, ""
	case n < 32:
		return KRead, ""
	case n < 44:
		return KWrite, "plain"
	case n < 54:
		return KWrite, "peek" // a plain write, then a peek write
	case n < 65:
		return KAppend, ""
	case n < 70:
		return KWrite, "fsync"
	case n < 78:
		return KWrite, "dup"
	case n < 82:
		return KWrite, "fork"
	case n < 88:
		return KWrite, "rename"
	case n < 94:
		return KDelete, ""
	}
	return KChmod, ""
}

// do has the worker carry out one operation on its mount and records it;
// false if the worker is gone.
func (r *run) do(w *workerProc, rng *rand.Rand, kind Kind, flavor, file string) bool {
	w.slot.gate.RLock()
	defer w.slot.gate.RUnlock()
	_, holder := w.slot.current()
	c, op := r.command(w, w.slot, holder, rng, kind, flavor, file)
	sent := Now()
	res, ok := r.send(w, c)
	if !ok {
		op.Outcome, op.Errno = Unknown, "worker lost"
		op.Invoke = sent
		r.record(op)
		return false
	}
	r.result(w, c, op, res)
	return true
}

// command builds one operation on slot s (whose instance is holder) and
// the record it starts.
func (r *run) command(w *workerProc, s *slot, holder string, rng *rand.Rand, kind Kind, flavor, file string) (Command, Op) {
	id := r.id()
	path := filepath.Join(s.dir, file)
	c := Command{ID: id, Kind: kind, Flavor: flavor, Path: path, Dir: filepath.Dir(path), Key: file}
	switch kind {
	case KWrite:
		n := 1 + rng.Intn(3)
		if flavor == "churn" {
			n = 1 // the round's A; its B is made by churn
		}
		for i := 0; i < n; i++ {
			c.Pieces = append(c.Pieces, fmt.Sprintf("%s#%d.%d/%d %s\n", file, id, i+1, n, strings.Repeat("x", rng.Intn(200))))
		}
		if flavor != "churn" {
			c.Pause = rng.Intn(20)
		}
		if flavor == "rename" {
			c.Tmp = filepath.Join(c.Dir, fmt.Sprintf("tmp-w%d", w.n))
		}
		if flavor == "dup" {
			c.Hold1, c.Hold2 = 100+rng.Intn(2500), 100+rng.Intn(2500)
		}
		if flavor == "peek" && rng.Intn(2) == 0 {
			flavor, c.Flavor = "plain", "plain" // the close before the peek's open
		}
	case KAppend:
		c.Pieces = []string{fmt.Sprintf("%s#%d.a\n", file, id)}
	case KChmod:
		c.Mode = []uint32{0o644, 0o600, 0o640}[rng.Intn(3)]
	case KDelete:
		if rng.Intn(2) == 0 {
			// Time for a fault, and the kernel forgetting the
			// directory, between the unlink and the fsync.
			c.Pause = rng.Intn(300)
		}
	}
	op := Op{ID: id, Process: w.n, Mount: s.i, Holder: holder, Kind: kind, Flavor: flavor, File: file,
		Intended: strings.Join(c.Pieces, ""), Mode: c.Mode}
	if kind == KS3Read {
		op.Mount, op.Holder = -1, ""
	}
	return c, op
}

// send gives w one command and waits for its answer; false if the worker
// is gone.
func (r *run) send(w *workerProc, c Command) (Result, bool) {
	var res Result
	b, _ := json.Marshal(c)
	if _, err := w.stdin.Write(append(b, '\n')); err != nil {
		return res, false
	}
	if !w.out.Scan() || json.Unmarshal(w.out.Bytes(), &res) != nil {
		return res, false
	}
	return res, true
}

// result completes op with the worker's answer to c and records it (and
// its peek).
func (r *run) result(w *workerProc, c Command, op Op, res Result) {
	op.Invoke, op.Written, op.Complete, op.Steps = res.Invoke, res.Written, res.Complete, res.Steps
	op.Value = strings.Join(c.Pieces[:min(res.Pieces, len(c.Pieces))], "")
	switch op.Kind {
	case KRead, KS3Read:
		op.Found, op.Data, op.Epoch, op.Errno = res.Found, res.Data, res.Epoch, res.Err
	default:
		op.Outcome, op.Errno, op.Decided = decide(op.Kind, op.Flavor, res.Steps)
	}
	r.record(op)
	if res.Peek != nil {
		p := Op{ID: r.id(), Process: 1000 + w.n, Mount: -1, Kind: KS3Read, Flavor: "peek", File: op.File,
			Invoke: res.Peek.Invoke, Complete: res.Peek.Complete, Found: res.Peek.Found, Data: res.Peek.Data,
			Epoch: res.Peek.Epoch, Errno: res.Peek.Err}
		r.record(p)
	}
}

// churn is the driver's loop for a churn worker: batches of issue 39 §1's
// round on the mount that leads, with nothing between the rounds — a
// close, at once an O_TRUNC open of the same file, its first piece
// written, the object read with a plain S3 client (never forked with the
// file open), the second piece, the close. The previous descriptor's
// RELEASE may arrive after the next OPEN; a last release that publishes
// what the new handle staged shows as an empty or half-written object.
func (r *run) churn(w *workerProc, rng *rand.Rand) {
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		i := int(r.leading.Load())
		if i < 0 {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		s := r.slots[i]
		file := r.files[rng.Intn(len(r.files))]
		lock := r.locks[fmt.Sprintf("%d/%s", i, file)]
		select {
		case lock <- struct{}{}:
		case <-r.stop:
			return
		}
		ok, refused := r.churnBatch(w, s, rng, file)
		<-lock
		if !ok {
			return
		}
		if refused {
			time.Sleep(time.Duration(20+rng.Intn(50)) * time.Millisecond)
		}
	}
}

// churnBatch does one batch of churn rounds on slot s; ok false if the
// worker is gone, refused if the last round was refused.
func (r *run) churnBatch(w *workerProc, s *slot, rng *rand.Rand, file string) (ok, refused bool) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	_, holder := s.current()
	var cmds []Command
	var ops []Op
	for k := 0; k < r.cfg.ChurnRounds; k++ {
		a, aop := r.command(w, s, holder, rng, KWrite, "churn", file)
		b, bop := r.command(w, s, holder, rng, KWrite, "churn", file)
		b.Peek = true
		b.Pieces = []string{
			fmt.Sprintf("%s#%d.1/2 %s\n", file, b.ID, strings.Repeat("y", rng.Intn(100))),
			fmt.Sprintf("%s#%d.2/2 %s\n", file, b.ID, strings.Repeat("z", rng.Intn(100))),
		}
		bop.Intended = strings.Join(b.Pieces, "")
		cmds, ops = append(cmds, a, b), append(ops, aop, bop)
	}
	sent := Now()
	res, ok := r.send(w, Command{ID: r.id(), Kind: KBatch, Batch: cmds})
	if !ok || len(res.Batch) != len(cmds) {
		for _, op := range ops {
			op.Outcome, op.Errno = Unknown, "worker lost"
			op.Invoke = sent
			r.record(op)
		}
		return false, false
	}
	for k := range cmds {
		r.result(w, cmds[k], ops[k], res.Batch[k])
	}
	out, _, _ := decide(KWrite, "churn", res.Batch[len(res.Batch)-1].Steps)
	return true, out == Failed
}

// decide reads a mutation's outcome from its system calls: the first call
// that stores (fsync, close, the dup's close, rename; a delete's directory
// fsync) and succeeds decides it took effect, unless a write(2) before it
// failed with an errno of unknown outcome (then it stays open); a
// definitive refusal before any success decides it never did; errors of
// unknown outcome leave it open.
func decide(kind Kind, flavor string, steps []Step) (Outcome, string, int64) {
	stores := map[string]bool{"fsync": true, "close": true, "close-dup": true}
	if flavor == "rename" {
		stores = map[string]bool{"rename": true}
	}
	if kind == KDelete {
		stores = map[string]bool{"fsync-dir": true}
	}
	if kind == KChmod {
		stores = map[string]bool{"chmod": true}
	}
	unknown, writeUnknown := "", ""
	for _, s := range steps {
		switch {
		case s.Call == "open" && s.Errno != "":
			return Failed, s.Errno, 0
		case s.Call == "write" && definitive(s.Errno):
			// The application was told the write failed: nothing of it
			// may land, whatever the close says (a fenced mount's close
			// has nothing left to store and returns 0).
			return Failed, "write " + s.Errno, 0
		case s.Call == "write" && s.Errno != "":
			// EIO and the like: the application cannot know what of
			// the write landed, whatever the close says.
			writeUnknown = "write " + s.Errno
		case s.Call == "unlink" && s.Errno != "":
			if definitive(s.Errno) {
				return Failed, s.Errno, 0
			}
			return Unknown, s.Errno, 0
		case s.Call == "open-dir" && s.Errno != "":
			return Unknown, s.Errno, 0
		case flavor == "rename" && s.Call == "close" && s.Errno != "":
			return Failed, "tmp " + s.Errno, 0 // the rename was not tried
		case !stores[s.Call]:
			continue
		case s.Errno == "" && writeUnknown != "":
			return Unknown, writeUnknown, 0
		case s.Errno == "":
			return OK, "", s.T
		case kind == KDelete:
			// A directory's fsync reports any refused delete of the
			// directory, not necessarily this one.
			return Unknown, s.Errno, 0
		case definitive(s.Errno) && unknown == "":
			return Failed, s.Errno, 0
		case unknown == "":
			unknown = s.Errno
		}
	}
	if unknown == "" {
		unknown = "no store call"
	}
	return Unknown, unknown, 0
}

// bind hands the next token to slot i through the root xattr and records
// the bind.
func (r *run) bind(i int) bool {
	r.token++
	s := r.slots[i]
	_, holder := s.current()
	op := Op{ID: r.id(), Process: -1, Mount: i, Holder: holder, Token: r.token, Kind: KBind, Invoke: Now()}
	done := make(chan error, 1)
	tok := strconv.FormatUint(r.token, 10)
	go func() { done <- unix.Setxattr(s.dir, "user.fencefs.token", []byte(tok), 0) }()
	select {
	case err := <-done:
		op.Complete = Now()
		switch {
		case err == nil:
			op.Outcome = OK
		case definitive(errnoName(err)):
			op.Outcome, op.Errno = Failed, errnoName(err)
		default:
			op.Outcome, op.Errno = Unknown, errnoName(err)
		}
	case <-time.After(60 * time.Second):
		op.Outcome, op.Errno = Unknown, "no answer in 60s"
	}
	r.record(op)
	if op.Outcome == OK {
		r.setLeader(i)
	} else {
		r.setLeader(-1)
		r.t.Logf("bind of %d on %s: %s %s", r.token, holder, op.Outcome, op.Errno)
	}
	return op.Outcome == OK
}

// raise binds the next token with `fencefs epoch raise`: every mount is
// fenced, and none leads until the next bind.
func (r *run) raise() {
	r.token++
	holder := fmt.Sprintf("cli-%d", r.token)
	op := Op{ID: r.id(), Process: -1, Mount: -1, Holder: holder, Token: r.token, Kind: KBind, Flavor: "raise", Invoke: Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := harness.Run(ctx, r.t, r.gw, nil, "epoch", "raise", r.bucket, strconv.FormatUint(r.token, 10), "--holder", holder)
	op.Complete = Now()
	var ee *exec.ExitError
	switch {
	case err == nil:
		op.Outcome = OK
	case errors.As(err, &ee) && ctx.Err() == nil:
		op.Outcome, op.Errno = Unknown, strings.TrimSpace(out)
	default:
		op.Outcome, op.Errno = Unknown, err.Error()
	}
	r.record(op)
	r.setLeader(-1)
}

func (r *run) other(not int) int {
	if len(r.slots) == 1 {
		return 0
	}
	for {
		if i := r.rng.Intn(len(r.slots)); i != not {
			return i
		}
	}
}

// nemesis injects faults until deadline, one at a time (a CPU hog runs
// beside the others), and leaves every mount thawed, connected and running.
// It returns the hogs still running.
func (r *run) nemesis(deadline time.Time) []*exec.Cmd {
	var hogs []*exec.Cmd
	hogUntil := time.Time{}
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(300+r.rng.Intn(1200)) * time.Millisecond)
		if r.leader < 0 && r.rng.Intn(3) != 0 {
			// Mostly someone leads: a history of refusals checks little.
			i := r.rng.Intn(len(r.slots))
			r.bind(i)
			r.fault(Fault{Kind: "move", Target: holderOf(r.slots[i]), Start: Now(), End: Now()})
			continue
		}
		n := r.rng.Intn(100)
		start := Now()
		switch {
		case n < 28: // leadership moves to another mount
			if !r.cfg.allows("move") {
				continue
			}
			i := r.other(r.leader)
			r.bind(i)
			r.fault(Fault{Kind: "move", Target: holderOf(r.slots[i]), Start: start, End: Now()})
		case n < 46: // a failback to a mount that holds open descriptors
			if !r.cfg.allows("failback") {
				continue
			}
			a := r.leader
			if a < 0 {
				a = r.rng.Intn(len(r.slots))
				r.bind(a)
			}
			b := r.other(a)
			r.bind(b)
			time.Sleep(time.Duration(200+r.rng.Intn(1500)) * time.Millisecond)
			r.bind(a)
			r.fault(Fault{Kind: "failback", Target: holderOf(r.slots[a]), Start: start, End: Now(), Detail: "via " + holderOf(r.slots[b])})
		case n < 60: // a mount frozen, often the leader, leadership moving meanwhile
			if !r.cfg.allows("freeze") {
				continue
			}
			i := r.leader
			if i < 0 || r.rng.Intn(3) == 0 {
				i = r.rng.Intn(len(r.slots))
			}
			fs, holder := r.slots[i].current()
			_ = fs.Signal(syscall.SIGSTOP)
			time.Sleep(time.Duration(300+r.rng.Intn(2000)) * time.Millisecond)
			detail := ""
			if r.rng.Intn(2) == 0 {
				j := r.other(i)
				r.bind(j)
				detail = "while " + holderOf(r.slots[j]) + " took over"
				time.Sleep(time.Duration(r.rng.Intn(1000)) * time.Millisecond)
			}
			_ = fs.Signal(syscall.SIGCONT)
			r.fault(Fault{Kind: "freeze", Target: holder, Start: start, End: Now(), Detail: detail})
		case n < 74: // a mount cut from the storage, leadership moving meanwhile
			if !r.cfg.allows("cut") {
				continue
			}
			i := r.rng.Intn(len(r.slots))
			r.slots[i].proxy.Cut(r.t)
			time.Sleep(time.Duration(500+r.rng.Intn(3000)) * time.Millisecond)
			detail := ""
			if r.rng.Intn(2) == 0 {
				j := r.other(i)
				r.bind(j)
				detail = "while " + holderOf(r.slots[j]) + " took over"
			}
			r.slots[i].proxy.Heal(r.t)
			r.fault(Fault{Kind: "cut", Target: holderOf(r.slots[i]), Start: start, End: Now(), Detail: detail})
		case n < 80: // kill -9 and a restart as a new instance (no token)
			if !r.cfg.allows("kill") {
				continue
			}
			i := r.rng.Intn(len(r.slots))
			old := r.restart(i)
			r.fault(Fault{Kind: "kill", Target: old, Start: start, End: Now(), Detail: "restarted as " + holderOf(r.slots[i])})
		case n < 85: // an operator's `fencefs epoch raise`
			if !r.cfg.allows("raise") {
				continue
			}
			r.raise()
			r.fault(Fault{Kind: "raise", Target: "cli", Start: start, End: Now()})
		case n < 95: // two busy loops beside everything, for a while
			if !r.cfg.allows("hog") {
				continue
			}
			if time.Now().Before(hogUntil) {
				continue
			}
			secs := 3 + r.rng.Intn(8)
			hogUntil = time.Now().Add(time.Duration(secs) * time.Second)
			for k := 0; k < 2; k++ {
				if cmd := startHog(secs); cmd != nil {
					hogs = append(hogs, cmd)
				}
			}
			r.fault(Fault{Kind: "hog", Target: "cpu", Start: start, End: start + int64(secs)*int64(time.Second), Detail: "2 busy loops"})
		default:
			// a quiet moment
		}
	}
	return hogs
}

func holderOf(s *slot) string { _, h := s.current(); return h }

// restart kills slot i's mount (-9), unmounts what is left and mounts a new
// instance on the same directory, under a new holder name and with no
// token. It returns the old holder.
func (r *run) restart(i int) string {
	s := r.slots[i]
	s.mu.Lock()
	old, oldHolder := s.fs, s.holder
	s.mu.Unlock()
	old.Kill()
	// The operations in flight fail on the dead mount (ENOTCONN); wait for
	// them, and keep new ones out until the new instance is mounted.
	s.gate.Lock()
	defer s.gate.Unlock()
	if err := old.Unmount(); err != nil {
		r.t.Logf("unmount after kill -9 of %s: %v", oldHolder, err)
	}
	if r.leader == i {
		r.setLeader(-1)
	}
	s.mu.Lock()
	s.gen++
	holder := holderName(i, s.gen)
	s.mu.Unlock()
	fs, err := harness.Start(r.t, r.gw, r.bucket, harness.Options{Dir: s.dir}, r.mountArgs(holder, s.proxy)...)
	if err != nil {
		r.t.Fatalf("restart %s after kill -9: %v", holder, err)
	}
	s.mu.Lock()
	s.fs, s.holder = fs, holder
	s.mu.Unlock()
	r.noteLog(holder, fs.LogPath)
	return oldHolder
}

// startHog starts a busy-loop process for secs seconds (nil if it could
// not start).
func startHog(secs int) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", HogEnv, secs))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil
	}
	go func() { _ = cmd.Wait() }()
	return cmd
}

// RunHog is a CPU hog's main: spin for secs seconds.
func RunHog(secs string) int {
	n, _ := strconv.Atoi(secs)
	end := time.Now().Add(time.Duration(n) * time.Second)
	x := 0
	for time.Now().Before(end) {
		for i := 0; i < 1e6; i++ {
			x += i
		}
	}
	return x & 0
}

// s3read GETs key whole into res; a fencefs tombstone counts as absent.
func s3read(c *minio.Client, bucket, key string, res *Result) {
	(&worker{s3: c, bucket: bucket}).s3read(key, res)
}
