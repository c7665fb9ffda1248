package main

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseSizeAcceptsBinaryUnitsAndRejectsGarbage(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "1GiB", want: 1 << 30},
		{in: "64MiB", want: 64 << 20},
		{in: "4KiB", want: 4096},
		{in: "512K", want: 512 << 10},
		{in: "2G", want: 2 << 30},
		{in: "4096", want: 4096},
		{in: "10B", want: 10},
		{in: " 8 MiB ", want: 8 << 20},
		{in: "", wantErr: true},
		{in: "GiB", wantErr: true},
		{in: "1.5GiB", wantErr: true},
		{in: "-1MiB", wantErr: true},
		{in: "1TiB", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestSizeStringUsesTheLargestExactUnit(t *testing.T) {
	tests := map[int64]string{1 << 30: "1 GiB", 32 << 20: "32 MiB", 4096: "4 KiB", 1000: "1000 B", 1536 << 20: "1536 MiB"}
	for in, want := range tests {
		if got := sizeString(in); got != want {
			t.Errorf("sizeString(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestMedianOfOddEvenAndNoRuns(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median(3,1,2) = %v", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median(4,1,3,2) = %v", got)
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median() = %v, want NaN", got)
	}
	xs := []float64{3, 1, 2}
	median(xs)
	if xs[0] != 3 {
		t.Errorf("median reordered its argument: %v", xs)
	}
}

func TestSpeedRatioIsHigherForFasterWhateverTheUnit(t *testing.T) {
	thr := metricDef{higherBetter: true}
	tim := metricDef{higherBetter: false}
	if got := speedRatio(thr, 200, 100); got != 2 {
		t.Errorf("throughput 200 vs 100 = %v, want 2", got)
	}
	if got := speedRatio(tim, 0.5, 1); got != 2 {
		t.Errorf("time 0.5s vs 1s = %v, want 2", got)
	}
	if got := speedRatio(thr, math.NaN(), 1); !math.IsNaN(got) {
		t.Errorf("missing value gave %v, want NaN", got)
	}
	if got := speedRatio(thr, 1, 0); !math.IsNaN(got) {
		t.Errorf("zero reference gave %v, want NaN", got)
	}
}

func TestPeakRSSOfThisProcessIsPlausible(t *testing.T) {
	got, err := peakRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if got < 1<<20 || got > 1<<40 {
		t.Errorf("peak RSS of the test process = %d bytes", got)
	}
}

func TestQuickModeShrinksSizesUnlessGiven(t *testing.T) {
	c, err := parseFlags([]string{"-quick"})
	if err != nil {
		t.Fatal(err)
	}
	if c.LargeSize != 32<<20 || c.SmallCount != 100 || c.Runs != 1 || c.Out != "-" {
		t.Errorf("quick defaults: size %d, small %d, runs %d, out %q", c.LargeSize, c.SmallCount, c.Runs, c.Out)
	}
	c, err = parseFlags([]string{"-quick", "-size", "8MiB", "-runs", "2"})
	if err != nil {
		t.Fatal(err)
	}
	if c.LargeSize != 8<<20 || c.Runs != 2 {
		t.Errorf("explicit flags overridden by -quick: size %d runs %d", c.LargeSize, c.Runs)
	}
	c, err = parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.LargeSize != 1<<30 || c.SmallCount != 1000 || c.Runs != 3 || c.SmallSize != 4096 {
		t.Errorf("full defaults: %+v", c)
	}
}

func TestParseFlagsRejectsUnknownTargetsAndNonPositiveCounts(t *testing.T) {
	for _, args := range [][]string{
		{"-only", "raw,goofys"},
		{"-runs", "0"},
		{"-small", "-5"},
		{"-size", "lots"},
		{"extra"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q): no error", args)
		}
	}
	c, err := parseFlags([]string{"-only", "raw, s3fs"})
	if err != nil || len(c.Only) != 2 {
		t.Errorf("-only raw, s3fs: %v %v", c.Only, err)
	}
}

func TestLargeSourceFileMatchesTheWrittenChunks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "large")
	const chunk = 1 << 20
	size := int64(20<<20 + 123)
	s, err := newLargeSource(path, size, chunk)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != size {
		t.Fatalf("file has %d bytes, want %d", len(b), size)
	}
	for off := int64(0); off < size; off += chunk {
		n := min(chunk, size-off)
		if string(s.chunk(off, n)) != string(b[off:off+n]) {
			t.Fatalf("chunk at %d differs from the file", off)
		}
	}
}

func TestSmallContentIsDeterministicAndDistinct(t *testing.T) {
	a, b := smallContent(1, 4096), smallContent(2, 4096)
	if string(a) != string(smallContent(1, 4096)) {
		t.Error("content of file 1 changed between calls")
	}
	if string(a) == string(b) {
		t.Error("files 1 and 2 have the same content")
	}
}

// fakeResults builds results with one run per target holding values.
func fakeResults(values map[string]map[string]float64, failures map[string]int) *results {
	cfg := config{LargeSize: 1 << 30, SmallCount: 1000, SmallSize: 4096, DirFiles: 100, RenameFiles: 100, Runs: 1, CheckEvery: 10, PartSize: 16 << 20, RawThreads: 4, WriteChunk: 1 << 20}
	r := newResults(cfg, allTargets(cfg))
	for name, vals := range values {
		m := &measurement{run: 1, values: vals, checks: 10}
		for i := 0; i < failures[name]; i++ {
			m.fail("missing %d", i)
		}
		r.add(name, m)
	}
	return r
}

func TestGoalsAreMetOnlyAboveTheirFactorAndWhenDurable(t *testing.T) {
	defs := map[string]metricDef{}
	for _, d := range metricDefs(config{}) {
		defs[d.key] = d
	}
	seqWrite := goals[0]
	tests := []struct {
		name     string
		strict   float64
		failures int
		want     string
	}{
		{name: "above 0.9x", strict: 95, want: "✓"},
		{name: "exactly 0.9x", strict: 90, want: "✓"},
		{name: "below 0.9x", strict: 89, want: "✗"},
		{name: "fast but not durable", strict: 500, failures: 1, want: "✗"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := fakeResults(map[string]map[string]float64{
				"raw":            {mSeqWrite: 100},
				"fencefs-strict": {mSeqWrite: tt.strict},
			}, map[string]int{"fencefs-strict": tt.failures})
			if _, got := r.evaluate(seqWrite, defs); got != tt.want {
				t.Errorf("evaluate = %s, want %s", got, tt.want)
			}
		})
	}
	r := fakeResults(map[string]map[string]float64{"raw": {mSeqWrite: 100}}, nil)
	if _, got := r.evaluate(seqWrite, defs); got != "n/a" {
		t.Errorf("unmeasured target: %s, want n/a", got)
	}
}

func TestRSSGoalIsALimit(t *testing.T) {
	defs := map[string]metricDef{}
	for _, d := range metricDefs(config{}) {
		defs[d.key] = d
	}
	var rss goal
	for _, g := range goals {
		if g.target == "fencefs-strict" && g.metric == mRSSWrite {
			rss = g
		}
	}
	for _, tt := range []struct {
		v    float64
		want string
	}{{100, "✓"}, {256, "✓"}, {300, "✗"}} {
		r := fakeResults(map[string]map[string]float64{"fencefs-strict": {mRSSWrite: tt.v}}, nil)
		if _, got := r.evaluate(rss, defs); got != tt.want {
			t.Errorf("RSS %v MiB: %s, want %s", tt.v, got, tt.want)
		}
	}
}

func TestMarkdownReportHasEveryTargetRatiosAndNotDurableMark(t *testing.T) {
	r := fakeResults(map[string]map[string]float64{
		"raw":            {mSeqWrite: 100, mCreate: 400},
		"fencefs-strict": {mSeqWrite: 90, mCreate: 200, mRSSWrite: 60},
		"s3fs":           {mSeqWrite: 50, mCreate: 50},
		"rclone-writes":  {mSeqWrite: 300, mCreate: 300},
	}, map[string]int{"rclone-writes": 3})
	md := r.markdown()
	for _, want := range []string{
		"| **raw** |", "| **fencefs-strict** |", "| **s3fs** |",
		"fencefs-strict / raw | 0.90×", "fencefs-strict / s3fs | 1.80×",
		"uploads later by design", "small create strict ≥ 2× s3fs | 4.00× | ✓",
		"## Goals of the basic workloads", "## Machine", "Reproduce:",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

func TestParseRequestCountsSumsOutcomesPerKind(t *testing.T) {
	text := `# HELP fencefs_s3_requests_total S3 requests (attempts) by request kind and outcome.
# TYPE fencefs_s3_requests_total counter
fencefs_s3_requests_total{op="put",outcome="ok"} 10
fencefs_s3_requests_total{op="put",outcome="precondition"} 2
fencefs_s3_requests_total{op="head",outcome="not_found"} 3
fencefs_s3_request_duration_seconds_bucket{op="put",le="0.001"} 1
fencefs_s3_request_duration_seconds_sum{op="put"} 0.5
fencefs_s3_request_duration_seconds_count{op="put"} 12
`
	got, err := parseRequestCounts(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.n) != 2 || got.n["put"] != 12 || got.n["head"] != 3 || got.secs["put"] != 0.5 {
		t.Errorf("parseRequestCounts = %v", got)
	}
	before := requestCounts{n: map[string]float64{"put": 2, "head": 3}, secs: map[string]float64{"put": 0.1, "head": 0.2}}
	per := perOp(before, got, 5)
	if len(per) != 1 || per["put"].PerOp != 2 || math.Abs(per["put"].MeanSeconds-0.04) > 1e-9 {
		t.Errorf("perOp = %v, want put 2 per op at 40ms (head unchanged)", per)
	}
}

func TestRequestsTableCountsMissingKindsAsZero(t *testing.T) {
	cfg := config{LargeSize: 1 << 30, SmallCount: 10, SmallSize: 4096, DirFiles: 10, RenameFiles: 10, Runs: 3}
	r := newResults(cfg, allTargets(cfg))
	for i, c := range []map[string]reqStat{
		{"put": {1, 0.002}, "delete": {1, 0.001}},
		{"put": {1, 0.004}},
		{"put": {3, 0.003}},
	} {
		r.add("fencefs-strict", &measurement{run: i + 1, values: map[string]float64{}, requests: map[string]map[string]reqStat{mCreate: c}})
	}
	var b bytes.Buffer
	r.requestsTable(&b, "requests", metricDefs(cfg))
	if !strings.Contains(b.String(), "| fencefs-strict | – | – | delete 0.00 @1.00ms, put 1.00 @3.00ms (1.00) |") {
		t.Errorf("requests table:\n%s", b.String())
	}
}

func TestCPUMeterCountsOurOwnBusyLoopAsOurs(t *testing.T) {
	const burn = 300 * time.Millisecond
	m := startCPUMeter(os.Getpid())
	c0, err := cpuTotal()
	if err != nil {
		t.Fatal(err)
	}
	burned := burnCPU(t, burn)
	ours := m.ours()
	c1, err := cpuTotal()
	if err != nil {
		t.Fatal(err)
	}
	// /proc counts in clock ticks (10 ms): allow a few.
	const tick = 0.03
	if ours < burned-tick {
		t.Errorf("meter: our processes used %.3fs CPU, but this test burned %.3fs", ours, burned)
	}
	if machine := busySeconds(c1) - busySeconds(c0); machine < burned-tick {
		t.Errorf("the machine was busy %.3fs while this test alone burned %.3fs", machine, burned)
	}
	if other := m.other(); other < 0 {
		t.Error("meter could not read /proc")
	}

	idle := startCPUMeter(os.Getpid())
	time.Sleep(burn)
	if got := idle.ours(); got > 0.1*burn.Seconds()+tick {
		t.Errorf("meter: %.3fs of our CPU during %v of sleep", got, burn)
	}
}

// burnCPU spins one goroutine, locked to its thread, until that thread has
// used d of CPU time (however loaded the machine), and returns the thread's
// CPU time as the kernel reports it.
func burnCPU(t *testing.T, d time.Duration) float64 {
	t.Helper()
	done := make(chan float64)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var ts unix.Timespec
		spent := func() time.Duration {
			if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
				return d // give up spinning; the checks will fail
			}
			return time.Duration(ts.Nano())
		}
		start := spent()
		x := 0
		for spent()-start < d {
			for i := 0; i < 10000; i++ {
				x += i
			}
		}
		_ = x
		done <- (spent() - start).Seconds()
	}()
	return <-done
}

func TestRotateStartsEachRunWithTheNextTarget(t *testing.T) {
	ts := allTargets(config{})
	names := func(ts []target) string {
		var n []string
		for _, t := range ts {
			n = append(n, t.Name())
		}
		return strings.Join(n, ",")
	}
	all := names(ts)
	for k := 0; k < 2*len(ts); k++ {
		r := rotate(ts, k)
		if r[0].Name() != ts[k%len(ts)].Name() || len(r) != len(ts) {
			t.Errorf("rotate(%d) = %s", k, names(r))
		}
	}
	if names(ts) != all {
		t.Error("rotate modified its argument")
	}
}

func TestGoalShowsTheRunByRunRange(t *testing.T) {
	defs := map[string]metricDef{}
	for _, d := range metricDefs(config{}) {
		defs[d.key] = d
	}
	cfg := config{LargeSize: 1 << 30, SmallCount: 10, SmallSize: 4096, DirFiles: 10, RenameFiles: 10, Runs: 3}
	r := newResults(cfg, allTargets(cfg))
	for i, pair := range [][2]float64{{90, 100}, {70, 100}, {95, 100}} {
		r.add("fencefs-strict", &measurement{run: i + 1, values: map[string]float64{mSeqWrite: pair[0]}})
		r.add("raw", &measurement{run: i + 1, values: map[string]float64{mSeqWrite: pair[1]}})
	}
	got, verdict := r.evaluate(goals[0], defs)
	if got != "0.90× (runs 0.70–0.95×)" || verdict != "✓" {
		t.Errorf("evaluate = %q %s", got, verdict)
	}
}

func TestProblemsReportFailedRunsAndBrokenPromisesOnly(t *testing.T) {
	r := fakeResults(map[string]map[string]float64{
		"raw": {}, "fencefs-strict": {}, "rclone-writes": {},
	}, map[string]int{"fencefs-strict": 2, "rclone-writes": 5})
	r.addError("s3fs", 1, errors.New("mount failed"))
	got := strings.Join(r.problems(), "; ")
	for _, want := range []string{"fencefs-strict: 2 of 10 durability checks failed", "s3fs: 1 failed run(s)"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems %q lack %q", got, want)
		}
	}
	if strings.Contains(got, "rclone-writes") {
		t.Errorf("rclone-writes promises no durability at close, yet is a problem: %q", got)
	}
}
