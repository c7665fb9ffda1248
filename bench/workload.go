package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"
)

// Metric keys; see metricDefs for titles and units.
const (
	mMount    = "mount"
	mSeqWrite = "seq_write"
	mSeqRead  = "seq_read"
	// mReadBack: the large file written through the mount, the page
	// cache dropped, then read back by the same mount (issue 41)
	mReadBack  = "readback"
	mSeqClose  = "seq_close"
	mCreate    = "create"
	mStat      = "stat"
	mReaddir   = "readdir"
	mRead      = "read"
	mRename    = "rename"
	mRenameDir = "rename_dir"
	mUnlink    = "unlink"
	mRSSWrite  = "rss_write"
	mRSSPeak   = "rss_peak"
	// mStageWrite is the most local disk the mount used for staging
	// while writing the large file.
	mStageWrite = "staging_write"
)

const (
	largeReadKey  = "large-read.bin"
	largeWriteKey = "large-write.bin"
	readBackKey   = "readback.bin"
	mib           = 1 << 20
)

// measurement is what one run of one target produced.
type measurement struct {
	run    int
	values map[string]float64 // metric key → value, only for what was measured
	// durability checks done with the benchmark's own S3 client right after
	// operations returned, and the ones that failed
	checks   int
	failures []string
	profiled bool    // a perf profile was recorded (numbers are perturbed)
	idle     float64 // fraction of the machine's CPU time idle just before the run (-1 unknown)
	other    float64 // CPUs used by other processes during the run (-1 unknown); see cpuMeter
	// requests: phase → S3 request kind → requests per operation and
	// their latency, for targets with a metrics endpoint
	requests map[string]map[string]reqStat
	// phaseErrors are the legacy workloads that failed ("phase: error");
	// the run went on with the next one
	phaseErrors []string
	// namespace: what the bucket showed of each namespace workload, by
	// its acknowledged metric key (namespace.go)
	namespace map[string]nsState
}

func (m *measurement) fail(format string, args ...any) {
	m.failures = append(m.failures, fmt.Sprintf(format, args...))
}

// measure runs every selected workload once on target t, the main ones on
// a fresh bucket and the listing ones on a second mount of the shared
// listing bucket, and returns what it measured; on error, the measurement
// holds what was measured before it. Everything started is stopped before
// it returns.
func (e *benchEnv) measure(ctx context.Context, t target, run int) (m *measurement, err error) {
	m = &measurement{run: run, values: map[string]float64{}, requests: map[string]map[string]reqStat{}, other: -1}
	name := fmt.Sprintf("%s-r%d", t.Name(), run)
	tctx, cancel := context.WithTimeout(ctx, e.cfg.TargetTimeout)
	defer cancel()
	w := &workloads{env: e, t: t, m: m, name: name, noCheck: isFloor(t)}
	if phases := w.mainPhases(); len(phases) > 0 {
		bucket := fmt.Sprintf("bench-%s-r%d-%d", t.Name(), run, time.Now().UnixNano()%1e6)
		if err := e.gw.CreateBucket(ctx, bucket); err != nil {
			return m, fmt.Errorf("create bucket: %w", err)
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			e.deleteBucket(cctx, bucket)
		}()
		if e.cfg.selected(mSeqRead) && !w.noCheck {
			if _, err := e.client.CopyObject(ctx,
				minio.CopyDestOptions{Bucket: bucket, Object: largeReadKey},
				minio.CopySrcOptions{Bucket: e.srcBucket, Object: largeReadKey}); err != nil {
				return m, fmt.Errorf("copy the read source: %w", err)
			}
		}
		w.bucket = bucket
		if err := e.session(tctx, w, filepath.Join(e.cfg.WorkDir, name), true, func(ctx context.Context) error {
			return w.runPhases(ctx, phases, mRSSPeak)
		}); err != nil {
			return m, err
		}
	}
	if phases := w.listingPhases(); len(phases) > 0 {
		w.bucket = e.legacy.listingBucket
		return m, e.session(tctx, w, filepath.Join(e.cfg.WorkDir, name+"-listing"), false, func(ctx context.Context) error {
			return w.runPhases(ctx, phases, mRSSList)
		})
	}
	return m, nil
}

// session starts target w.t on w.bucket with scratch as its private
// directory, runs fn with w.in set to the instance, and stops it, also
// when ctx ends (a watchdog kills a hung mount). The time to mount is
// recorded when mountTime is set; the other load is the highest seen over
// the sessions of a run.
func (e *benchEnv) session(ctx context.Context, w *workloads, scratch string, mountTime bool, fn func(context.Context) error) (err error) {
	if err := os.MkdirAll(scratch, 0o755); err != nil {
		return err
	}
	meter := startCPUMeter(os.Getpid(), e.gw.Pid())
	t0 := time.Now()
	in, err := w.t.Start(ctx, e, w.bucket, scratch)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	if in.pid > 0 && mountTime {
		w.m.values[mMount] = time.Since(t0).Seconds()
	}
	// Watchdog: past the deadline (or on Ctrl-C), kill the mount so that
	// system calls blocked on it return.
	finished := make(chan struct{})
	watchdogDone := make(chan struct{})
	go func() {
		defer close(watchdogDone)
		select {
		case <-ctx.Done():
			slog.Warn("killing the mount", "target", w.t.Name(), "reason", ctx.Err())
			in.kill()
		case <-finished:
		}
	}()
	if in.pid > 0 {
		meter.add(in.pid)
	}
	defer func() {
		w.m.other = max(w.m.other, meter.other())
		close(finished)
		<-watchdogDone
		if serr := in.Stop(); serr != nil {
			err = errors.Join(err, fmt.Errorf("stop: %w", serr))
		}
		if err != nil && in.logPath != "" {
			err = fmt.Errorf("%w (mount log: %s)", err, in.logPath)
		}
	}()
	w.in = in
	return fn(ctx)
}

// workloads runs the phases of one target run.
type workloads struct {
	env    *benchEnv
	t      target
	in     *instance
	m      *measurement
	bucket string
	name   string // target-run, for profile file names
	// noCheck: the target stores nothing in the bucket (the FUSE floor),
	// so there is no durability to check
	noCheck bool
	// before is the request count snapshot at the start of the timed part
	// of the current phase (n is nil without a metrics endpoint)
	before requestCounts
	// tombstones are the keys of the bucket found to hold fencefs
	// tombstones, with their ETags (namespace.go)
	tombstones map[string]string
}

// phase is one workload step of a target run.
type phase struct {
	sel  string // the workload it belongs to (-workloads)
	name string // its metric key, also the key of its request counts
	ops  int    // operations in the phase, to count requests per operation
	fn   func(ctx context.Context) error
}

// mainPhases are the selected phases that run on the target run's own
// bucket, in order: the basic workloads, then the shell workloads; only the
// latter on the FUSE floor.
func (w *workloads) mainPhases() []phase {
	cfg := w.env.cfg
	small := make([][]byte, cfg.SmallCount)
	for i := range small {
		small[i] = smallContent(i, cfg.SmallSize)
	}
	smallName := func(i int) string { return fmt.Sprintf("small/f%05d", i) }
	var phases []phase
	if !w.noCheck {
		phases = []phase{
			{mSeqRead, mSeqRead, 1, w.seqRead},
			{mSeqWrite, mSeqWrite, 1, w.seqWrite},
			{mReadBack, mReadBack, 1, w.readBack},
			{mCreate, mCreate, len(small), func(ctx context.Context) error { return w.create(ctx, small, smallName) }},
			{mStat, mStat, len(small), func(ctx context.Context) error { return w.stat(ctx, small, smallName) }},
			{mReaddir, mReaddir, 1, w.readdir},
			{mRead, mRead, len(small), func(ctx context.Context) error { return w.read(ctx, small, smallName) }},
			{mRename, mRename, cfg.RenameFiles, w.rename},
			{mRenameDir, mRenameDir, 1, w.renameDir},
			{mUnlink, mUnlink, len(small), func(ctx context.Context) error { return w.unlink(ctx, len(small), smallName) }},
		}
	}
	return w.selectPhases(append(phases, w.shellPhases()...))
}

// selectPhases keeps the phases of the selected workloads.
func (w *workloads) selectPhases(phases []phase) []phase {
	var out []phase
	for _, p := range phases {
		if w.env.cfg.selected(p.sel) {
			out = append(out, p)
		}
	}
	return out
}

// runPhases runs phases in order; each records its metric, its S3 requests
// per operation and the mount's peak RSS, the peak over all of them under
// peakKey.
func (w *workloads) runPhases(ctx context.Context, phases []phase, peakKey string) error {
	var peak int64
	for _, p := range phases {
		if err := ctx.Err(); err != nil {
			return err
		}
		slog.Debug("phase", "target", w.t.Name(), "phase", p.name)
		w.env.settle()
		pid := w.in.pid
		if pid > 0 {
			if err := resetPeakRSS(pid); err != nil {
				slog.Warn("cannot reset the peak RSS; it covers the process lifetime", "err", err)
			}
		}
		w.markStart(ctx)
		stopPerf := w.startPerf(ctx, p.name)
		var staging *stagingSampler
		if p.name == mSeqWrite && pid > 0 && w.in.cacheDir != "" {
			staging = sampleStaging(pid, w.in.cacheDir, 50*time.Millisecond)
		}
		err := p.fn(ctx)
		if staging != nil {
			w.m.values[mStageWrite] = float64(staging.Stop()) / mib
		}
		stopPerf()
		w.countRequests(ctx, p.name, p.ops)
		if pid > 0 {
			if rss, rerr := peakRSS(pid); rerr == nil {
				peak = max(peak, rss)
				if p.name == mSeqWrite {
					w.m.values[mRSSWrite] = float64(rss) / mib
				}
				w.m.values[peakKey] = float64(peak) / mib
			}
		}
		if err != nil && slices.Contains(legacyWorkloads, p.sel) && ctx.Err() == nil {
			// A program's workload a target cannot do (rclone without
			// its cache cannot append) leaves the others measurable.
			slog.Warn("workload failed", "target", w.t.Name(), "phase", p.name, "err", err)
			w.m.phaseErrors = append(w.m.phaseErrors, fmt.Sprintf("%s: %v", p.name, err))
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		// The large objects are not used again: free their gigabyte
		// before the next phase, through the S3 client (later phases do
		// not touch them). The gateway's CPU per byte written doubles once
		// a few GiB are resident (measured on this machine), which made
		// whichever target wrote while memory was fuller look slower.
		if key := map[string]string{mSeqRead: largeReadKey, mSeqWrite: largeWriteKey, mReadBack: readBackKey}[p.name]; key != "" {
			if rerr := w.env.client.RemoveObject(ctx, w.bucket, key, minio.RemoveObjectOptions{}); rerr != nil {
				slog.Warn("cannot remove a large object before the next phase", "key", key, "err", rerr)
			}
		}
	}
	return nil
}

// markStart records the request counters at the start of the timed part
// of a phase; phases with an untimed setup call it again after the setup.
func (w *workloads) markStart(ctx context.Context) {
	w.before = requestCounts{}
	if w.in.metricsAddr == "" {
		return
	}
	c, err := scrapeRequests(ctx, w.in.metricsAddr)
	if err != nil {
		slog.Warn("reading fencefs metrics", "target", w.t.Name(), "err", err)
		return
	}
	w.before = c
}

// countRequests records the S3 requests per operation of the phase that
// just ended. Requests made in the background (intent deletions) are counted
// in the phase during which they complete.
func (w *workloads) countRequests(ctx context.Context, phase string, ops int) {
	if w.before.n == nil {
		return
	}
	after, err := scrapeRequests(ctx, w.in.metricsAddr)
	if err != nil {
		slog.Warn("reading fencefs metrics", "target", w.t.Name(), "err", err)
		return
	}
	w.m.requests[phase] = perOp(w.before, after, ops)
}

// startPerf starts `perf record` on the mount process and the gateway for
// one phase when -perf is set and the target is fencefs; the returned
// function stops it.
func (w *workloads) startPerf(ctx context.Context, phase string) func() {
	if w.env.cfg.PerfDir == "" || w.in.pid == 0 || !strings.HasPrefix(w.t.Name(), "fencefs") {
		return func() {}
	}
	out := filepath.Join(w.env.cfg.PerfDir, fmt.Sprintf("%s-%s.perf.data", w.name, phase))
	// The gateway too, so that `perf report --sort comm` shows the split.
	pids := fmt.Sprintf("%d,%d", w.in.pid, w.env.gw.Pid())
	cmd := exec.Command("perf", "record", "-g", "-F", "999", "-p", pids, "-o", out)
	logf, err := os.Create(out + ".log")
	if err == nil {
		cmd.Stdout, cmd.Stderr = logf, logf
		defer logf.Close()
	}
	if err := cmd.Start(); err != nil {
		slog.Warn("perf record", "err", err)
		return func() {}
	}
	w.m.profiled = true
	time.Sleep(200 * time.Millisecond) // let perf attach
	return func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
	}
}

// seqRead reads the large object, never before seen by this mount, to its end.
func (w *workloads) seqRead(ctx context.Context) error {
	t0 := time.Now()
	n, err := w.in.driver.ReadLarge(ctx, largeReadKey)
	d := time.Since(t0)
	if err != nil {
		return err
	}
	if n != w.env.large.size {
		return fmt.Errorf("read %d bytes, want %d", n, w.env.large.size)
	}
	w.m.values[mSeqRead] = float64(n) / mib / d.Seconds()
	return nil
}

// readBack writes the large file through the mount (untimed), drops the
// kernel's page cache, dentries and inodes (what a reader after
// `echo 3 > /proc/sys/vm/drop_caches` meets), and reads it back to its end
// through the same mount: a leader reading what it just committed. Only
// the read is timed; its S3 requests are counted from after the write.
func (w *workloads) readBack(ctx context.Context) error {
	if _, err := w.in.driver.WriteLarge(ctx, readBackKey, w.env.large); err != nil {
		return err
	}
	w.checkExists(ctx, readBackKey, w.env.large.size)
	if err := dropCaches(); err != nil {
		slog.Warn("cannot drop the page cache before reading back; the read may come from it", "err", err)
	}
	w.env.settle()
	w.markStart(ctx)
	t0 := time.Now()
	n, err := w.in.driver.ReadLarge(ctx, readBackKey)
	d := time.Since(t0)
	if err != nil {
		return err
	}
	if n != w.env.large.size {
		return fmt.Errorf("read back %d bytes, want %d", n, w.env.large.size)
	}
	w.m.values[mReadBack] = float64(n) / mib / d.Seconds()
	return nil
}

// dropCaches writes back dirty pages and drops the kernel's clean page
// cache, dentries and inodes (needs root).
func dropCaches() error {
	unix.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
}

// seqWrite writes the large file, from open to close, then checks that the
// object is in the bucket with its full size.
func (w *workloads) seqWrite(ctx context.Context) error {
	t0 := time.Now()
	closeDur, err := w.in.driver.WriteLarge(ctx, largeWriteKey, w.env.large)
	if err != nil {
		return err
	}
	d := time.Since(t0)
	w.m.values[mSeqWrite] = float64(w.env.large.size) / mib / d.Seconds()
	if closeDur >= 0 {
		w.m.values[mSeqClose] = closeDur.Seconds()
	}
	w.checkExists(ctx, largeWriteKey, w.env.large.size)
	return nil
}

// checkExists is a durability check: key is in the bucket with size bytes.
func (w *workloads) checkExists(ctx context.Context, key string, size int64) {
	w.m.checks++
	info, err := w.env.client.StatObject(ctx, w.bucket, key, minio.StatObjectOptions{})
	switch {
	case err != nil:
		w.m.fail("%s: not in the bucket after close (%v)", key, err)
	case info.Size != size:
		w.m.fail("%s: %d bytes in the bucket after close, want %d", key, info.Size, size)
	}
}

// checkGone is a durability check: key is no longer in the bucket.
func (w *workloads) checkGone(ctx context.Context, key string) {
	w.m.checks++
	_, err := w.env.client.StatObject(ctx, w.bucket, key, minio.StatObjectOptions{})
	if err == nil {
		w.m.fail("%s: still in the bucket after the call returned", key)
	} else if minio.ToErrorResponse(err).StatusCode != 404 {
		w.m.fail("%s: checking: %v", key, err)
	}
}

// checked reports whether operation i of n gets a durability check.
func (w *workloads) checked(i, n int) bool {
	return i%w.env.cfg.CheckEvery == 0 || i == n-1
}

// opsRate runs op for i in [0,n) and records as metric key the operations
// per second over the time spent in op only (durability checks run by after
// are not counted).
func (w *workloads) opsRate(ctx context.Context, key string, n int, op func(i int) error, after func(i int)) error {
	var spent time.Duration
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		t0 := time.Now()
		err := op(i)
		spent += time.Since(t0)
		if err != nil {
			return fmt.Errorf("op %d: %w", i, err)
		}
		if after != nil {
			after(i)
		}
	}
	w.m.values[key] = float64(n) / spent.Seconds()
	return nil
}

// moved are the n files of a rename workload: from(i) holds data before
// the rename, to(i) after it.
type moved struct {
	n        int
	data     []byte
	from, to func(i int) string
}

// setupMove writes the files of a rename workload, all holding
// smallContent(seed): n files named by fromFormat(i) in the new directory
// dir, to be renamed to toFormat(i). The timed part starts when it returns.
func (w *workloads) setupMove(ctx context.Context, dir, fromFormat, toFormat string, seed, n int) (moved, error) {
	m := moved{
		n:    n,
		data: smallContent(seed, w.env.cfg.SmallSize),
		from: func(i int) string { return fmt.Sprintf(fromFormat, i) },
		to:   func(i int) string { return fmt.Sprintf(toFormat, i) },
	}
	if err := w.in.driver.Mkdir(ctx, dir); err != nil {
		return m, err
	}
	for i := 0; i < n; i++ {
		if err := w.in.driver.WriteSmall(ctx, m.from(i), m.data); err != nil {
			return m, fmt.Errorf("setup: %w", err)
		}
	}
	w.markStart(ctx)
	return m, nil
}

// checkMoved checks, when file i gets a durability check, that it is at
// its new name with its size and gone from the old one.
func (w *workloads) checkMoved(ctx context.Context, m moved, i int) {
	if w.checked(i, m.n) {
		w.checkExists(ctx, m.to(i), int64(len(m.data)))
		w.checkGone(ctx, m.from(i))
	}
}

// create makes the small files: open(O_CREAT), write, close, each.
func (w *workloads) create(ctx context.Context, small [][]byte, name func(int) string) error {
	if err := w.in.driver.Mkdir(ctx, "small"); err != nil {
		return err
	}
	return w.opsRate(ctx, mCreate, len(small),
		func(i int) error { return w.in.driver.WriteSmall(ctx, name(i), small[i]) },
		func(i int) {
			if w.checked(i, len(small)) {
				w.checkExists(ctx, name(i), int64(len(small[i])))
			}
		})
}

// stat looks every small file up and checks its size.
func (w *workloads) stat(ctx context.Context, small [][]byte, name func(int) string) error {
	return w.opsRate(ctx, mStat, len(small), func(i int) error {
		size, err := w.in.driver.Stat(ctx, name(i))
		if err == nil && size != int64(len(small[i])) {
			err = fmt.Errorf("%s: size %d, want %d", name(i), size, len(small[i]))
		}
		return err
	}, nil)
}

// readdir lists the directory of small files once (entries per second).
func (w *workloads) readdir(ctx context.Context) error {
	t0 := time.Now()
	n, err := w.in.driver.List(ctx, "small")
	d := time.Since(t0)
	if err != nil {
		return err
	}
	if n != w.env.cfg.SmallCount {
		return fmt.Errorf("listed %d entries, want %d", n, w.env.cfg.SmallCount)
	}
	w.m.values[mReaddir] = float64(n) / d.Seconds()
	return nil
}

// read reads every small file back and compares its content; the kernel's
// page cache of the files is dropped first.
func (w *workloads) read(ctx context.Context, small [][]byte, name func(int) string) error {
	for i := range small {
		if err := w.in.driver.Uncache(ctx, name(i)); err != nil {
			return err
		}
	}
	w.markStart(ctx)
	return w.opsRate(ctx, mRead, len(small), func(i int) error {
		b, err := w.in.driver.ReadSmall(ctx, name(i))
		if err == nil && string(b) != string(small[i]) {
			err = fmt.Errorf("%s: content differs (%d bytes read)", name(i), len(b))
		}
		return err
	}, nil)
}

// rename renames RenameFiles freshly written files one by one.
func (w *workloads) rename(ctx context.Context) error {
	m, err := w.setupMove(ctx, "ren", "ren/a%05d", "ren/b%05d", -1, w.env.cfg.RenameFiles)
	if err != nil {
		return err
	}
	return w.opsRate(ctx, mRename, m.n, func(i int) error { return w.in.driver.Rename(ctx, m.from(i), m.to(i)) },
		func(i int) { w.checkMoved(ctx, m, i) })
}

// renameDir renames a directory holding DirFiles files (seconds), then
// checks every object moved.
func (w *workloads) renameDir(ctx context.Context) error {
	m, err := w.setupMove(ctx, "dir", "dir/f%05d", "dir2/f%05d", -2, w.env.cfg.DirFiles)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := w.in.driver.RenameDir(ctx, "dir", "dir2", m.n); err != nil {
		return err
	}
	w.m.values[mRenameDir] = time.Since(t0).Seconds()
	for i := 0; i < m.n; i++ {
		w.checkMoved(ctx, m, i)
	}
	return nil
}

// unlink removes every small file, then fsyncs their directory: where a
// program's unlinks are durable on a local file system, and on fencefs,
// which acknowledges a delete before it is stored (docs/DESIGN.md
// "Deletes"); targets whose unlink is durable when it returns do nothing
// there. The rate counts the fsync; the checks follow it.
func (w *workloads) unlink(ctx context.Context, n int, name func(int) string) error {
	t0 := time.Now()
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := w.in.driver.Remove(ctx, name(i)); err != nil {
			return fmt.Errorf("op %d: %w", i, err)
		}
	}
	if err := w.shell().SyncDirs(ctx, "small"); err != nil {
		return err
	}
	w.m.values[mUnlink] = float64(n) / time.Since(t0).Seconds()
	for i := 0; i < n; i++ {
		if w.checked(i, n) {
			w.checkGone(ctx, name(i))
		}
	}
	return nil
}
