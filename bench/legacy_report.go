package main

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/fencefs/fencefs/integration/gateway"
)

// legacyDefs are the columns of the legacy workloads' tables.
func legacyDefs(cfg config) []metricDef {
	return []metricDef{
		{mRedirect, fmt.Sprintf("bash `echo … > d/f$i` ×%d", cfg.ShellFiles), "files/s", true, true},
		{mAppend, fmt.Sprintf("bash `echo … >> d/f$i` ×%d", cfg.ShellFiles), "files/s", true, true},
		{mMv, fmt.Sprintf("bash `mv d/f$i d2/f$i` ×%d", cfg.MvFiles), "files/s", true, true},
		{mMvDurable, "mv, until in the bucket", "files/s", true, true},
		{mRmrf, fmt.Sprintf("rm -rf of %d files", rmrfFiles(cfg)), "files/s", true, true},
		{mRmrfDurable, "rm -rf, until in the bucket", "files/s", true, true},
		{mRmrfRenamed, fmt.Sprintf("rm -rf of %d files, %d renamed in place", cfg.ShellFiles, cfg.MvFiles), "files/s", true, true},
		{mRmrfRenamedDurable, "rm -rf of renamed, until in the bucket", "files/s", true, true},
		{mTar, "tar x", "s", false, true},
		{mParallel, fmt.Sprintf("%d shells × %d redirects", cfg.Shells, cfg.ShellFiles), "files/s", true, true},
		{mLslCold, fmt.Sprintf("ls -l %d objects, cold", cfg.ListFiles), "s", false, true},
		{mLslWarm, "ls -l, warm", "s", false, true},
		{mFind, fmt.Sprintf("find -type f, %d objects in 4 dirs", cfg.FindFiles), "s", false, true},
		{mRSSList, fmt.Sprintf("peak RSS, ls -l and find over %d objects", listedObjects(cfg)), "MiB", false, false},
	}
}

// listedObjects is the number of objects the listing workloads list.
func listedObjects(cfg config) int {
	n := 0
	if cfg.selected(wLsl) {
		n += cfg.ListFiles
	}
	if cfg.selected(wFind) {
		n += cfg.FindFiles
	}
	return n
}

// legacyGoalKind says how a goal of the legacy workloads is evaluated.
type legacyGoalKind int

const (
	goalRatio      legacyGoalKind = iota // speed ratio to ref ≥ factor (goal.evaluate)
	goalMiB                              // value ≤ limit MiB (goal.evaluate)
	goalSeconds                          // seconds ≤ limit, only at the goal's object count
	goalEfficiency                       // bound / measured ≥ factor
)

// legacyGoal is one performance target of the legacy workloads.
type legacyGoal struct {
	goal
	kind legacyGoalKind
}

// findLimit is the find goal in seconds, over findGoalFiles objects: 5×
// faster than the 55 s an earlier fencefs took.
const (
	findLimit     = 11.0
	findGoalFiles = 100000
)

// legacyGoals are the performance targets of the legacy workloads.
var legacyGoals = func() []legacyGoal {
	ratio := func(desc, target, metric, ref string, factor float64) legacyGoal {
		return legacyGoal{goal{desc: desc, target: target, metric: metric, ref: ref, factor: factor}, goalRatio}
	}
	gs := []legacyGoal{
		ratio("bash redirect loop strict ≥ 1.6× s3fs", "fencefs-strict", mRedirect, "s3fs", 1.6),
		ratio("8 shells' redirect loops strict ≥ 3× s3fs", "fencefs-strict", mParallel, "s3fs", 3),
		ratio("bash redirect loop off ≥ 2.5× s3fs", "fencefs-off", mRedirect, "s3fs", 2.5),
		ratio("bash redirect loop strict ≥ 0.5× off", "fencefs-strict", mRedirect, "fencefs-off", 0.5),
		ratio("8 shells' redirect loops strict ≥ 0.8× off", "fencefs-strict", mParallel, "fencefs-off", 0.8),
		ratio("tar x strict ≥ 1.5× s3fs", "fencefs-strict", mTar, "s3fs", 1.5),
		ratio("ls -l cold strict ≥ 2× s3fs", "fencefs-strict", mLslCold, "s3fs", 2),
		ratio("ls -l warm strict ≥ 10× s3fs", "fencefs-strict", mLslWarm, "s3fs", 10),
		ratio("seq write strict ≥ 0.9× raw", "fencefs-strict", mSeqWrite, "raw", 0.9),
		ratio("seq read strict ≥ 1.3× s3fs", "fencefs-strict", mSeqRead, "s3fs", 1.3),
		ratio("rm -rf strict ≥ 1× s3fs", "fencefs-strict", mRmrf, "s3fs", 1),
		ratio("rm -rf until in the bucket strict ≥ 1× s3fs", "fencefs-strict", mRmrfDurable, "s3fs", 1),
		ratio("rm -rf strict ≥ 0.5× off", "fencefs-strict", mRmrf, "fencefs-off", 0.5),
		ratio("rm -rf of renamed strict ≥ 1× s3fs", "fencefs-strict", mRmrfRenamed, "s3fs", 1),
		ratio("rm -rf of renamed until in the bucket strict ≥ 1× s3fs", "fencefs-strict", mRmrfRenamedDurable, "s3fs", 1),
		{goal{desc: "peak RSS after ls -l and find strict ≤ 256 MiB", target: "fencefs-strict", metric: mRSSList, limit: 256}, goalMiB},
		{goal{desc: fmt.Sprintf("find over %d objects strict ≤ %.0f s (5× the 55 s before)", findGoalFiles, findLimit),
			target: "fencefs-strict", metric: mFind, limit: findLimit}, goalSeconds},
	}
	for _, m := range []string{mRedirect, mAppend, mTar, mParallel} {
		gs = append(gs, legacyGoal{goal{desc: m + " strict ≥ 0.8× its bound", target: "fencefs-strict", metric: m, factor: 0.8}, goalEfficiency})
	}
	// Issue 33: strict at least as fast as geesefs --fsync-on-close (whose
	// uploads and deletes come after the call returned: noted next to
	// the ratio).
	for _, m := range []string{mRmrf, mMv, mTar, mRedirect, mParallel, mSeqRead} {
		gs = append(gs, ratio(m+" strict ≥ 1× geesefs", "fencefs-strict", m, geesefsName, 1))
	}
	return gs
}()

// minioGoals are the goals of the listing workloads on MinIO, whose
// listings carry each object's metadata: a cold ls -l needs no HEAD, and
// find's time is about the listing's.
var minioGoals = []legacyGoal{
	{goal{desc: "ls -l cold strict ≥ 3× s3fs (MinIO)", target: "fencefs-strict", metric: mLslCold, ref: "s3fs", factor: 3}, goalRatio},
	{goal{desc: "find strict ≤ 1.5× the raw client's listing (MinIO)", target: "fencefs-strict", metric: mFind, ref: "raw", factor: 1 / 1.5}, goalRatio},
}

// legacyGoalsOn returns the goals of the legacy workloads on server.
func legacyGoalsOn(server gateway.Kind) []legacyGoal {
	if server == gateway.MinIO {
		return append(append([]legacyGoal(nil), legacyGoals...), minioGoals...)
	}
	return legacyGoals
}

// legacyMarkdown writes the section of the legacy workloads: medians,
// ratios, bounds and efficiency, S3 requests, goals.
func (r *results) legacyMarkdown(b *bytes.Buffer) {
	cfg := r.cfg
	var defs []metricDef
	for _, d := range legacyDefs(cfg) {
		if r.measuredAny(d.key) {
			defs = append(defs, d)
		}
	}
	b.WriteString("## Workloads of legacy programs (median of runs)\n\n")
	b.WriteString("Real programs on each mount: bash loops of redirects and appends, of `mv` of some of those files into another " +
		"directory, `rm -rf` of their directory, `tar x`, `ls -l` and `find` of " +
		"directories written by the raw client (on a second mount of a shared bucket, cold: the mount has not seen them). " +
		"The raw client does the same with S3 calls; " + floorName + " is go-fuse's loopback filesystem over the work " +
		"directory, no S3 (what FUSE alone costs). Durability: when a loop or tar x has returned, the benchmark's S3 client " +
		fmt.Sprintf("checks every %dth file it wrote (and the last) has its size in the bucket.", cfg.CheckEvery))
	if r.tree != nil {
		fmt.Fprintf(b, " tar x extracts %s (%d files, %d directories).", r.tree.src, len(r.tree.files), r.tree.dirs)
	}
	b.WriteString("\n\n")
	if len(defs) == 0 {
		b.WriteString("(not measured)\n\n")
		return
	}
	header := []string{"target"}
	for _, d := range defs {
		header = append(header, fmt.Sprintf("%s (%s)", d.title, d.unit))
	}
	var rows [][]string
	for _, t := range r.targets {
		row := []string{"**" + t.Name() + "**"}
		for _, d := range defs {
			row = append(row, withNote(num(r.median(t.Name(), d.key)), r.nsNote(t.Name(), d.key)))
		}
		rows = append(rows, row)
	}
	table(b, header, rows)
	if r.measuredAny(mMv) || r.measuredAny(mRmrf) {
		b.WriteString("mv and rm -rf: the rate until the program returned, and until its changes were in the bucket: after it returned, " +
			"fsync(2) of the directories it changed and syncfs(2) of the mount, then the benchmark's S3 client lists the bucket " +
			fmt.Sprintf("(every %s, up to %s) until it shows every change; a fencefs tombstone counts as deleted. ", nsPoll, r.cfg.SyncWait) +
			"\"not durable at return\": the bucket lacked changes when the program returned (they were asynchronous); " +
			"\"not durable at fsync\": it still lacked some when the fsync returned.\n\n")
	}
	r.phaseErrorList(b)

	b.WriteString("### fencefs relative to the others (higher is better)\n\n")
	var pairs [][2]string
	for _, t := range r.targets {
		if !strings.HasPrefix(t.Name(), "fencefs") {
			continue
		}
		for _, ref := range append(append([]string{}, peers...), "raw", "fencefs-off") {
			if ref != t.Name() {
				pairs = append(pairs, [2]string{t.Name(), ref})
			}
		}
	}
	r.pairTable(b, defs, pairs)

	r.boundsTable(b)
	r.requestsTable(b, "S3 requests per operation of the legacy workloads (fencefs metrics, median of runs)", defs)

	b.WriteString("## Goals of the legacy workloads\n\n")
	byKey := map[string]metricDef{}
	for _, d := range append(metricDefs(cfg), legacyDefs(cfg)...) {
		byKey[d.key] = d
	}
	rows = nil
	for _, g := range legacyGoalsOn(cfg.Server) {
		v, m := r.evaluateLegacy(g, byKey)
		rows = append(rows, []string{g.desc, v, m})
	}
	table(b, []string{"goal", "measured", "met"}, rows)
}

// measuredAny reports whether some run of some target measured key.
func (r *results) measuredAny(key string) bool {
	for _, runs := range r.runs {
		for _, m := range runs {
			if _, ok := m.values[key]; ok {
				return true
			}
		}
	}
	return false
}

// pairTable writes the speed ratios of target / reference pairs (skipping
// pairs where either was not measured).
func (r *results) pairTable(b *bytes.Buffer, defs []metricDef, pairs [][2]string) {
	header := []string{"target / reference"}
	for _, d := range defs {
		if d.speed {
			header = append(header, d.title)
		}
	}
	var rows [][]string
	for _, p := range pairs {
		if len(r.runs[p[0]]) == 0 || len(r.runs[p[1]]) == 0 {
			continue
		}
		row := []string{withNote(p[0]+" / "+p[1], r.closeNote(p[0], p[1]))}
		for _, d := range defs {
			if d.speed {
				ratio := speedRatio(d, r.median(p[0], d.key), r.median(p[1], d.key))
				cell := ratioString(ratio)
				if !math.IsNaN(ratio) {
					cell = withNote(cell, r.pairNote(p[0], p[1], d.key))
				}
				row = append(row, cell)
			}
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		b.WriteString("(not measured)\n\n")
		return
	}
	table(b, header, rows)
}

// legacyDef returns the definition of a legacy metric.
func (r *results) legacyDef(key string) metricDef {
	for _, d := range legacyDefs(r.cfg) {
		if d.key == key {
			return d
		}
	}
	panic("no legacy metric " + key)
}

// boundOf returns, for one run of a workload, the seconds its fewest round
// trips take at the raw client's latency, the FUSE floor's seconds, and
// their sum, the bound (NaN parts when not measured).
func (r *results) boundOf(s boundSpec) (rtt, floor, total float64) {
	rtt = s.seconds(r.cfg, r.tree, r.cal)
	floor = workloadSeconds(r.legacyDef(s.key), r.median(floorName, s.key), s.ops(r.cfg, r.tree))
	return rtt, floor, bound(rtt, floor)
}

// efficiencyOf is target's efficiency against the bound of s (NaN when
// unknown).
func (r *results) efficiencyOf(target string, s boundSpec) float64 {
	_, _, b := r.boundOf(s)
	measured := workloadSeconds(r.legacyDef(s.key), r.median(target, s.key), s.ops(r.cfg, r.tree))
	return efficiency(b, measured)
}

// requestsPerOp is the median over runs of target's S3 requests (every
// kind) per operation of phase key; NaN when no run counted them.
func (r *results) requestsPerOp(target, key string) float64 {
	var xs []float64
	for _, m := range r.runs[target] {
		if c, ok := m.requests[phaseKey(key)]; ok {
			total := 0.0
			for _, s := range c {
				total += s.PerOp
			}
			xs = append(xs, total)
		}
	}
	return median(xs)
}

// boundsTable writes each workload's bound, then every target's efficiency
// against it with its time and S3 requests per operation.
func (r *results) boundsTable(b *bytes.Buffer) {
	var specs []boundSpec
	for _, s := range boundSpecs {
		if r.measuredAny(s.key) {
			specs = append(specs, s)
		}
	}
	if len(specs) == 0 {
		return
	}
	b.WriteString("### Bounds: the fewest round trips × the raw client's round trip + the FUSE floor\n\n")
	fmt.Fprintf(b, "Raw client's round trips on this %s server: PUT %s, GET %s, PUT with %d in flight %s per request, COPY %s, DELETE %s, "+
		"LIST page of %d keys %s. Times per operation (a file written, moved or removed, an entry extracted, one listing).\n\n",
		r.cfg.Server, latencyString(r.cal.Put), latencyString(r.cal.Get), calParallel, latencyString(r.cal.Put8),
		latencyString(r.cal.Copy), latencyString(r.cal.Delete), listPage, latencyString(r.cal.ListPage))
	var rows [][]string
	for _, s := range specs {
		ops := float64(s.ops(r.cfg, r.tree))
		rtt, floor, total := r.boundOf(s)
		rows = append(rows, []string{s.key, s.rtts(r.cfg, r.tree), latencyString(rtt / ops), latencyString(floor / ops), latencyString(total / ops)})
	}
	table(b, []string{"workload", "fewest round trips", "round trips per op", "FUSE floor per op", "bound per op"}, rows)

	header := []string{"target"}
	for _, s := range specs {
		header = append(header, s.key)
	}
	rows = nil
	for _, t := range r.targets {
		if isFloor(t) || t.Name() == "raw" || len(r.runs[t.Name()]) == 0 {
			continue // the bound is a FUSE filesystem's
		}
		row := []string{t.Name()}
		if ok, _, _ := r.durable(t.Name()); !ok {
			row[0] += " (not durable at close)"
		}
		for _, s := range specs {
			measured := workloadSeconds(r.legacyDef(s.key), r.median(t.Name(), s.key), s.ops(r.cfg, r.tree))
			cell := ratioString(r.efficiencyOf(t.Name(), s))
			if !math.IsNaN(measured) {
				cell += " " + latencyString(measured/float64(s.ops(r.cfg, r.tree)))
			}
			cell += ", " + num(r.requestsPerOp(t.Name(), s.key)) + " req"
			if !math.IsNaN(measured) {
				cell = withNote(cell, r.nsShort(t.Name(), s.key))
			}
			row = append(row, cell)
		}
		rows = append(rows, row)
	}
	if len(rows) > 0 {
		b.WriteString("### Efficiency against the bound (1.00 = as fast as the protocol and FUSE allow), time and S3 requests per operation\n\n")
		b.WriteString("Above 1.00: the target made fewer S3 round trips than the bound (not durable, or served from a cache) or fewer FUSE " +
			"round trips than the loopback (whose kernel caches last 1 s), or the run was noisy.\n\n")
		table(b, header, rows)
	}
}

// evaluateLegacy evaluates a goal of the legacy workloads like evaluate:
// the measured value and "✓", "✗" or "n/a".
func (r *results) evaluateLegacy(g legacyGoal, defs map[string]metricDef) (string, string) {
	switch g.kind {
	case goalSeconds:
		v := r.median(g.target, g.metric)
		if math.IsNaN(v) {
			return "–", "n/a"
		}
		if r.cfg.FindFiles != findGoalFiles {
			return fmt.Sprintf("%s s over %d objects", num(v), r.cfg.FindFiles), "n/a"
		}
		ok, _, _ := r.durable(g.target)
		return num(v) + " s", mark(ok && v <= g.limit)
	case goalEfficiency:
		for _, s := range boundSpecs {
			if s.key == g.metric {
				e := r.efficiencyOf(g.target, s)
				if math.IsNaN(e) {
					return "–", "n/a"
				}
				ok, _, _ := r.durable(g.target)
				return ratioString(e), mark(ok && e >= g.factor)
			}
		}
		return "–", "n/a"
	default:
		v, m := r.evaluate(g.goal, defs)
		if m == "n/a" || g.ref == "" {
			return v, m
		}
		return withNote(v, joinNotes(r.pairNote(g.target, g.ref, g.metric), r.closeNote(g.ref))), m
	}
}

// phaseErrorList lists the legacy workloads that failed, by target.
func (r *results) phaseErrorList(b *bytes.Buffer) {
	any := false
	for _, t := range r.targets {
		for _, m := range r.runs[t.Name()] {
			for _, e := range m.phaseErrors {
				if !any {
					b.WriteString("Workloads that failed (\"–\" above):\n\n")
					any = true
				}
				fmt.Fprintf(b, "- **%s** run %d: %s\n", t.Name(), m.run, indentLines(e))
			}
		}
	}
	if any {
		b.WriteString("\n")
	}
}

// legacyProblems are the legacy workloads that failed on a target other
// than a peer (a peer may not support what a program does: rclone without
// its cache cannot append).
func (r *results) legacyProblems() []string {
	var out []string
	for _, t := range r.targets {
		if slices.Contains(peers, t.Name()) {
			continue
		}
		n := 0
		for _, m := range r.runs[t.Name()] {
			n += len(m.phaseErrors)
		}
		if n > 0 {
			out = append(out, fmt.Sprintf("%s: %d failed legacy workload(s)", t.Name(), n))
		}
	}
	return out
}
