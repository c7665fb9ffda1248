package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// metricDef describes one column of the tables.
type metricDef struct {
	key          string
	title        string
	unit         string
	higherBetter bool // throughput; else a time or a size
	speed        bool // goes into the ratio tables
}

// metricDefs returns the table's columns, titled with the sizes of cfg.
func metricDefs(cfg config) []metricDef {
	return []metricDef{
		{mSeqWrite, "seq write " + sizeString(cfg.LargeSize), "MiB/s", true, true},
		{mSeqRead, "seq read " + sizeString(cfg.LargeSize), "MiB/s", true, true},
		{mSeqClose, "close(2) after seq write", "s", false, false},
		{mCreate, fmt.Sprintf("create+write+close %d×%s", cfg.SmallCount, sizeString(int64(cfg.SmallSize))), "ops/s", true, true},
		{mStat, "stat", "ops/s", true, true},
		{mReaddir, "readdir", "entries/s", true, true},
		{mRead, "read", "ops/s", true, true},
		{mUnlink, "unlink", "ops/s", true, true},
		{mRename, "rename file", "ops/s", true, true},
		{mRenameDir, fmt.Sprintf("rename dir (%d files)", cfg.DirFiles), "s", false, true},
		{mReadBack, "read back " + sizeString(cfg.LargeSize) + " just written, after drop_caches", "MiB/s", true, true},
		{mMount, "mount", "s", false, false},
		{mRSSWrite, "peak RSS, seq write", "MiB", false, false},
		{mStageWrite, "peak staging, seq write", "MiB", false, false},
		{mRSSPeak, "peak RSS, all", "MiB", false, false},
	}
}

// results collects the measurements of every target and run.
type results struct {
	cfg     config
	targets []target
	runs    map[string][]*measurement // target name → runs
	errors  map[string][]string       // target name → "run N: error"
	Machine []kv
	Elapsed time.Duration
	// what the legacy workloads' bounds are computed from (bounds.go)
	cal  calibration
	tree *tarball
}

func newResults(cfg config, targets []target) *results {
	return &results{cfg: cfg, targets: targets, runs: map[string][]*measurement{}, errors: map[string][]string{}}
}

func (r *results) add(target string, m *measurement) {
	if m != nil {
		r.runs[target] = append(r.runs[target], m)
	}
}

func (r *results) addError(target string, run int, err error) {
	msg := strings.TrimSpace(err.Error())
	if len(msg) > 1500 {
		msg = msg[:1500] + " …"
	}
	r.errors[target] = append(r.errors[target], fmt.Sprintf("run %d: %s", run, msg))
}

// median is the median of a metric over the runs of a target that measured
// it (NaN if none did).
func (r *results) median(target, key string) float64 {
	var xs []float64
	for _, m := range r.runs[target] {
		if v, ok := m.values[key]; ok {
			xs = append(xs, v)
		}
	}
	return median(xs)
}

// durable reports whether every durability check of target passed, and the
// counts.
func (r *results) durable(target string) (ok bool, checks, failed int) {
	for _, m := range r.runs[target] {
		checks += m.checks
		failed += len(m.failures)
	}
	return failed == 0, checks, failed
}

// speedRatio is how many times faster a is than b on metric d (NaN when a
// value is missing): a/b for throughputs, b/a for times.
func speedRatio(d metricDef, a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || a <= 0 || b <= 0 {
		return math.NaN()
	}
	if d.higherBetter {
		return a / b
	}
	return b / a
}

// goal is one performance target, as a ratio or a limit.
type goal struct {
	desc   string
	target string
	metric string
	// ref and factor: speedRatio(target, ref) ≥ factor; or when ref is ""
	// the target's value ≤ limit.
	ref    string
	factor float64
	limit  float64
}

// goals are the performance targets of the basic workloads (set for a
// 2-core machine).
var goals = []goal{
	{desc: "seq write strict ≥ 0.9× raw signed PUT", target: "fencefs-strict", metric: mSeqWrite, ref: "raw", factor: 0.9},
	{desc: "seq read strict ≥ 0.8× raw GET", target: "fencefs-strict", metric: mSeqRead, ref: "raw", factor: 0.8},
	{desc: "small create strict ≥ 2× s3fs", target: "fencefs-strict", metric: mCreate, ref: "s3fs", factor: 2},
	{desc: "small create strict ≥ 1× rclone (cache off)", target: "fencefs-strict", metric: mCreate, ref: "rclone-off", factor: 1},
	{desc: "small create fast ≥ 3× s3fs", target: "fencefs-fast", metric: mCreate, ref: "s3fs", factor: 3},
	{desc: "small create off ≥ 0.7× raw serial PUT", target: "fencefs-off", metric: mCreate, ref: "raw", factor: 0.7},
	{desc: "peak RSS writing the large file ≤ 256 MiB (strict)", target: "fencefs-strict", metric: mRSSWrite, limit: 256},
	{desc: "peak RSS writing the large file ≤ 256 MiB (fast)", target: "fencefs-fast", metric: mRSSWrite, limit: 256},
	{desc: "peak RSS writing the large file ≤ 256 MiB (off)", target: "fencefs-off", metric: mRSSWrite, limit: 256},
	{desc: "peak staging writing the large file ≤ 256 MiB (strict)", target: "fencefs-strict", metric: mStageWrite, limit: 256},
	{desc: "strict overhead on large writes ≤ 5% vs off", target: "fencefs-strict", metric: mSeqWrite, ref: "fencefs-off", factor: 0.95},
	{desc: "strict overhead on large reads ≤ 5% vs off", target: "fencefs-strict", metric: mSeqRead, ref: "fencefs-off", factor: 0.95},
	// Issue 41: a leader reading back what it just wrote.
	{desc: "read back strict ≥ 0.9× off", target: "fencefs-strict", metric: mReadBack, ref: "fencefs-off", factor: 0.9},
	{desc: "read back strict ≥ 1× geesefs", target: "fencefs-strict", metric: mReadBack, ref: geesefsName, factor: 1},
}

// evaluate returns the measured value (a ratio, or the value for a limit)
// and "✓", "✗" or "n/a". A target that is not durable at close fails every
// goal: the comparison would not be like with like.
func (r *results) evaluate(g goal, defs map[string]metricDef) (string, string) {
	v := r.median(g.target, g.metric)
	if math.IsNaN(v) {
		return "–", "n/a"
	}
	ok, _, _ := r.durable(g.target)
	if g.ref == "" {
		met := v <= g.limit
		return fmt.Sprintf("%s MiB", num(v)), mark(met && ok)
	}
	ratio := speedRatio(defs[g.metric], v, r.median(g.ref, g.metric))
	if math.IsNaN(ratio) {
		return "–", "n/a"
	}
	s := fmt.Sprintf("%.2f×", ratio)
	if lo, hi, n := r.pairedRange(g, defs[g.metric]); n > 1 {
		s += fmt.Sprintf(" (runs %.2f–%.2f×)", lo, hi)
	}
	return s, mark(ratio >= g.factor && ok)
}

// pairedRange is the range of the goal's ratio computed run by run (run i
// of the target against run i of the reference), and the number of pairs:
// when it straddles the goal's factor, the verdict is within the noise.
func (r *results) pairedRange(g goal, d metricDef) (lo, hi float64, n int) {
	ref := map[int]float64{}
	for _, m := range r.runs[g.ref] {
		if v, ok := m.values[g.metric]; ok {
			ref[m.run] = v
		}
	}
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, m := range r.runs[g.target] {
		v, ok := m.values[g.metric]
		b, okb := ref[m.run]
		if !ok || !okb {
			continue
		}
		if x := speedRatio(d, v, b); !math.IsNaN(x) {
			lo, hi, n = min(lo, x), max(hi, x), n+1
		}
	}
	return lo, hi, n
}

func mark(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

// num formats a value with about three significant digits.
func num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func ratioString(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v)
}

// table writes a markdown table.
func table(b *bytes.Buffer, header []string, rows [][]string) {
	b.WriteString("| " + strings.Join(header, " | ") + " |\n|")
	for range header {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, row := range rows {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	b.WriteString("\n")
}

// peers are the other filesystems fencefs is compared with.
var peers = []string{"s3fs", geesefsName, "rclone-off", "rclone-writes"}

// markdown renders the whole report.
func (r *results) markdown() string {
	var b bytes.Buffer
	cfg := r.cfg
	defs := metricDefs(cfg)
	byKey := map[string]metricDef{}
	for _, d := range defs {
		byKey[d.key] = d
	}
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# fencefs benchmark — %s on %s\n\n", time.Now().Format("2006-01-02 15:04 MST"), host)
	mode := fmt.Sprintf("%d runs per target, medians", cfg.Runs)
	if cfg.Quick {
		mode = "**quick smoke run** (small sizes, not comparable with full runs); " + mode
	}
	fmt.Fprintf(&b, "%s; large file %s, %d small files of %s, %d renamed files, a %d-file directory; took %s. %s\n\n",
		mode, sizeString(cfg.LargeSize), cfg.SmallCount, sizeString(int64(cfg.SmallSize)),
		cfg.RenameFiles, cfg.DirFiles, r.Elapsed.Round(time.Second), r.idleSummary())
	fmt.Fprintf(&b, "Workloads: %s.\n\n", strings.Join(cfg.Workloads, ", "))

	if cfg.selectedAny(basicWorkloads) {
		r.basicMarkdown(&b, defs, byKey)
	}
	if cfg.selectedAny(legacyWorkloads) {
		r.legacyMarkdown(&b)
	}

	r.errorsMarkdown(&b)
	r.runsMarkdown(&b, defs)
	r.methodMarkdown(&b)
	return b.String()
}

// errorsMarkdown writes the section of the failed runs and durability
// checks (at most five per run), if there were any.
func (r *results) errorsMarkdown(b *bytes.Buffer) {
	if len(r.errors) > 0 || r.anyFailures() {
		b.WriteString("## Errors and failed durability checks\n\n")
		for _, t := range r.targets {
			for _, e := range r.errors[t.Name()] {
				fmt.Fprintf(b, "- **%s** %s\n", t.Name(), indentLines(e))
			}
			for _, m := range r.runs[t.Name()] {
				for i, f := range m.failures {
					if i == 5 {
						fmt.Fprintf(b, "- **%s** run %d: … %d more\n", t.Name(), m.run, len(m.failures)-5)
						break
					}
					fmt.Fprintf(b, "- **%s** run %d: %s\n", t.Name(), m.run, f)
				}
			}
		}
		b.WriteString("\n")
	}
}

// runsMarkdown writes the table of every run's values of defs and of the
// legacy workloads' metrics.
func (r *results) runsMarkdown(b *bytes.Buffer, defs []metricDef) {
	cfg := r.cfg
	b.WriteString("## Every run\n\n")
	b.WriteString("`idle`: share of the machine's CPU time idle in the 2 s before the run. `other`: CPUs used during the run by " +
		"processes other than the benchmark, the gateway and the mount (kernel write-back included); other load makes a run noisy.\n\n")
	runDefs := append(slices.Clone(defs), legacyDefs(cfg)...)
	header := []string{"target", "run", "idle", "other"}
	for _, d := range runDefs {
		header = append(header, d.key)
	}
	var rows [][]string
	for _, t := range r.targets {
		for _, m := range r.runs[t.Name()] {
			idle := "?"
			if m.idle >= 0 {
				idle = fmt.Sprintf("%.0f%%", 100*m.idle)
			}
			other := "?"
			if m.other >= 0 {
				other = fmt.Sprintf("%.2f", m.other)
			}
			row := []string{t.Name(), fmt.Sprint(m.run), idle, other}
			if m.profiled {
				row[1] += " (perf)"
			}
			for _, d := range runDefs {
				v, ok := m.values[d.key]
				if !ok {
					v = math.NaN()
				}
				row = append(row, num(v))
			}
			rows = append(rows, row)
		}
	}
	table(b, header, rows)
}

// methodMarkdown writes the method, the machine and how to reproduce the
// run.
func (r *results) methodMarkdown(b *bytes.Buffer) {
	cfg := r.cfg
	b.WriteString("## Method\n\n")
	b.WriteString(method(cfg))
	b.WriteString("\n## Machine\n\n")
	for _, m := range r.Machine {
		fmt.Fprintf(b, "- %s: %s\n", m.k, m.v)
	}
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(b, "- load average at end: %s\n", strings.TrimSpace(string(la)))
	}
	fmt.Fprintf(b, "\nReproduce: `make bench` (or `%s`).\n",
		strings.Join(append([]string{"go run ./bench -bin bin/fencefs -gateway bin/versitygw"}, reproFlags(cfg)...), " "))
}

// basicMarkdown writes the tables of the basic workloads: medians, ratios
// to the raw client and to the peers, the goals, the S3 requests.
func (r *results) basicMarkdown(b *bytes.Buffer, defs []metricDef, byKey map[string]metricDef) {
	// Medians.
	b.WriteString("## Results (median of runs)\n\n")
	header := []string{"target", "durable at close"}
	for _, d := range defs {
		header = append(header, fmt.Sprintf("%s (%s)", d.title, d.unit))
	}
	var rows [][]string
	for _, t := range r.targets {
		row := []string{"**" + t.Name() + "**", r.durableString(t)}
		for _, d := range defs {
			row = append(row, num(r.median(t.Name(), d.key)))
		}
		rows = append(rows, row)
	}
	table(b, header, rows)

	var speedDefs []metricDef
	for _, d := range defs {
		if d.speed {
			speedDefs = append(speedDefs, d)
		}
	}
	b.WriteString("## Speed relative to the raw client (higher is better)\n\n")
	var pairs [][2]string
	for _, t := range r.targets {
		if t.Name() != "raw" {
			pairs = append(pairs, [2]string{t.Name(), "raw"})
		}
	}
	r.pairTable(b, speedDefs, pairs)

	b.WriteString("## fencefs relative to each peer (higher is better)\n\n")
	pairs = nil
	for _, t := range r.targets {
		if strings.HasPrefix(t.Name(), "fencefs") {
			for _, p := range peers {
				pairs = append(pairs, [2]string{t.Name(), p})
			}
		}
	}
	r.pairTable(b, speedDefs, pairs)

	b.WriteString("## Goals of the basic workloads\n\n")
	rows = nil
	for _, g := range goals {
		v, m := r.evaluate(g, byKey)
		rows = append(rows, []string{g.desc, v, m})
	}
	table(b, []string{"goal", "measured", "met"}, rows)

	r.requestsTable(b, "S3 requests per operation (fencefs metrics, median of runs)", defs)
}

// requestsTable writes the S3 requests per operation of the targets that
// report them (fencefs, through its metrics), median over runs.
func (r *results) requestsTable(b *bytes.Buffer, title string, defs []metricDef) {
	var phases []metricDef
	for _, d := range defs {
		if d.speed && phaseKey(d.key) == d.key { // a durable rate shares its phase's requests
			phases = append(phases, d)
		}
	}
	var rows [][]string
	for _, t := range r.targets {
		runs := r.runs[t.Name()]
		row := []string{t.Name()}
		any := false
		for _, d := range phases {
			// Every run that counted the phase contributes a count for
			// every kind (0 when it made no such request); latencies
			// come from the runs that made the request.
			var counted []map[string]reqStat
			kinds := map[string]*kindRuns{}
			for _, m := range runs {
				if c, ok := m.requests[d.key]; ok {
					counted = append(counted, c)
					for k := range c {
						kinds[k] = &kindRuns{}
					}
				}
			}
			for k, kr := range kinds {
				for _, c := range counted {
					kr.perOp = append(kr.perOp, c[k].PerOp)
					if c[k].PerOp > 0 {
						kr.latency = append(kr.latency, c[k].MeanSeconds)
					}
				}
			}
			if len(kinds) == 0 {
				row = append(row, "–")
				continue
			}
			any = true
			row = append(row, requestCell(kinds))
		}
		if any {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("## " + title + "\n\n")
	b.WriteString("Requests of each kind per operation of the workload, with their mean latency, as counted by the mount " +
		"itself (`fencefs_s3_requests_total`, `fencefs_s3_request_duration_seconds`), retries included; background " +
		"requests (intent deletions) count in the phase in which they are sent.\n\n")
	header := []string{"target"}
	for _, d := range phases {
		header = append(header, d.title)
	}
	table(b, header, rows)
}

// kindRuns are one request kind's per-run values in one phase.
type kindRuns struct {
	perOp   []float64 // requests per operation, one per run
	latency []float64 // mean latency in seconds, runs that made the request
}

// requestCell formats request kinds as "head 2.00 @1.2ms, put 1.00 @3.4ms
// (3.00)": medians over runs, kinds sorted by name, then the total.
func requestCell(kinds map[string]*kindRuns) string {
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	slices.Sort(names)
	var parts []string
	total := 0.0
	for _, k := range names {
		v := median(kinds[k].perOp)
		total += v
		p := k + " " + num(v)
		if lat := median(kinds[k].latency); !math.IsNaN(lat) {
			p += " @" + latencyString(lat)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ") + " (" + num(total) + ")"
}

// latencyString formats seconds as ms below one second.
func latencyString(s float64) string {
	if s < 1 {
		return num(s*1000) + "ms"
	}
	return num(s) + "s"
}

// idleSummary tells how idle the machine was before the runs.
func (r *results) idleSummary() string {
	var idle, other []float64
	for _, t := range r.targets {
		for _, m := range r.runs[t.Name()] {
			if m.idle >= 0 {
				idle = append(idle, m.idle)
			}
			if m.other >= 0 {
				other = append(other, m.other)
			}
		}
	}
	var parts []string
	noisy := false
	if len(idle) > 0 {
		parts = append(parts, fmt.Sprintf("CPU idle before each run: median %.0f%%, lowest %.0f%%.", 100*median(idle), 100*slices.Min(idle)))
		noisy = noisy || slices.Min(idle) < 0.7
	}
	if len(other) > 0 {
		parts = append(parts, fmt.Sprintf("Other load during the runs: median %.2f CPUs, highest %.2f.", median(other), slices.Max(other)))
		noisy = noisy || slices.Max(other) > 0.3
	}
	if noisy {
		parts = append(parts, "**Other load competed with some runs: compare runs in the table of every run.**")
	}
	return strings.Join(parts, " ")
}

func indentLines(s string) string { return strings.ReplaceAll(s, "\n", "\n  ") }

// problems lists the target runs that failed and the targets that promise
// durability at close but did not keep it.
func (r *results) problems() []string {
	var out []string
	for _, t := range r.targets {
		if n := len(r.errors[t.Name()]); n > 0 {
			out = append(out, fmt.Sprintf("%s: %d failed run(s)", t.Name(), n))
		}
		if ok, checks, failed := r.durable(t.Name()); !ok && t.DurableAtClose() {
			out = append(out, fmt.Sprintf("%s: %d of %d durability checks failed", t.Name(), failed, checks))
		}
	}
	return append(out, r.legacyProblems()...)
}

func (r *results) anyFailures() bool {
	for _, t := range r.targets {
		if ok, _, _ := r.durable(t.Name()); !ok {
			return true
		}
	}
	return false
}

// durableString is the "durable at close" cell: what was observed, and
// whether it matches what the target promises.
func (r *results) durableString(t target) string {
	ok, checks, failed := r.durable(t.Name())
	switch {
	case checks == 0:
		return "–"
	case ok:
		return fmt.Sprintf("yes (%d checks)", checks)
	case !t.DurableAtClose():
		return fmt.Sprintf("**no** (%d/%d missing; uploads later by design)", failed, checks)
	default:
		return fmt.Sprintf("**NO** (%d/%d failed)", failed, checks)
	}
}

// median returns the median of xs (NaN for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
