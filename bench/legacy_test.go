package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseWorkloadsAddsWhatTheyNeedAndRejectsUnknownNames(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "redirect", want: []string{wRedirect}},
		{in: "append", want: []string{wRedirect, wAppend}},
		{in: "mv", want: []string{wRedirect, wMv}},
		{in: "rmrf,lsl", want: []string{wRedirect, wRmrf, wLsl}},
		{in: "lsl,find,mv,rmrf,tar,parallel", want: []string{wRedirect, wMv, wRmrf, wTar, wParallel, wLsl, wFind}},
		{in: "lsl, find", want: []string{wLsl, wFind}},
		{in: "find,tar,redirect", want: []string{wRedirect, wTar, wFind}},
		{in: "stat", want: []string{mCreate, mStat}},
		{in: "legacy", want: legacyWorkloads},
		{in: "basic", want: basicWorkloads},
		{in: "all", want: append(slices.Clone(basicWorkloads), legacyWorkloads...)},
		{in: "seq_write,parallel", want: []string{mSeqWrite, wParallel}},
		{in: "ls", wantErr: `unknown workload "ls"`},
		{in: "rm", wantErr: `unknown workload "rm"`},
		{in: "", wantErr: "no workload selected"},
		{in: " , ", wantErr: "no workload selected"},
	}
	for _, tt := range tests {
		got, err := parseWorkloads(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseWorkloads(%q) = %v, %v; want error %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("parseWorkloads(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestQuickModeShrinksTheLegacyCountsUnlessGiven(t *testing.T) {
	tests := []struct {
		args                    []string
		shell, ls, find, shells int
	}{
		{args: nil, shell: 500, ls: 20000, find: 100000, shells: 8},
		{args: []string{"-quick"}, shell: 50, ls: 2000, find: 4000, shells: 8},
		{args: []string{"-quick", "-ls-files", "300", "-shells", "2"}, shell: 50, ls: 300, find: 4000, shells: 2},
	}
	for _, tt := range tests {
		c, err := parseFlags(tt.args)
		if err != nil {
			t.Fatal(err)
		}
		if c.ShellFiles != tt.shell || c.ListFiles != tt.ls || c.FindFiles != tt.find || c.Shells != tt.shells {
			t.Errorf("%q: shell %d ls %d find %d shells %d", tt.args, c.ShellFiles, c.ListFiles, c.FindFiles, c.Shells)
		}
	}
	for _, args := range [][]string{{"-workloads", "redirect,du"}, {"-find-files", "3"}, {"-shells", "0"}} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q): no error", args)
		}
	}
}

func TestListingKeysAreMarkersThenTheCountsInFourDirectories(t *testing.T) {
	keys := listingKeys(config{ListFiles: 3, FindFiles: 10})
	var markers, lsl int
	perDir := map[string]int{}
	for _, k := range keys {
		switch {
		case strings.HasSuffix(k, "/"):
			markers++
		case strings.HasPrefix(k, "lsl/"):
			lsl++
		default:
			perDir[k[:len("find/d0")]]++
		}
	}
	if markers != 6 || lsl != 3 || len(perDir) != 4 || perDir["find/d0"] != 3 || perDir["find/d3"] != 2 {
		t.Errorf("markers %d, lsl %d, find dirs %v", markers, lsl, perDir)
	}
	if !strings.HasSuffix(keys[0], "/") || strings.HasSuffix(keys[len(keys)-1], "/") {
		t.Errorf("markers must come first: %v", keys)
	}
	if got := listingKeys(config{ListFiles: 3, FindFiles: 10, Workloads: []string{wLsl}}); len(got) != 4 {
		t.Errorf("keys for lsl alone: %v", got)
	}
}

func TestPagesRoundUpToWholeListingPages(t *testing.T) {
	for n, want := range map[int]int{0: 1, 1: 1, 999: 1, 1000: 1, 1001: 2, 20000: 20} {
		if got := pages(n); got != want {
			t.Errorf("pages(%d) = %d, want %d", n, got, want)
		}
	}
	// find over 100,000 objects: the root's page, then 25 pages in each
	// of 4 directories; over 4,000: 1 + 4×1.
	if got := findPages(100000); got != 101 {
		t.Errorf("findPages(100000) = %d, want 101", got)
	}
	if got := findPages(4000); got != 5 {
		t.Errorf("findPages(4000) = %d, want 5", got)
	}
}

func TestBoundIsRoundTripsAtRawLatencyPlusTheFloor(t *testing.T) {
	cfg := config{ShellFiles: 100, MvFiles: 20, Shells: 4, ListFiles: 2500, FindFiles: 4000, Runs: 1}
	r := newResults(cfg, allTargets(cfg))
	r.cal = calibration{Put: 0.002, Get: 0.001, Put8: 0.0005, ListPage: 0.05, Copy: 0.003, Delete: 0.001}
	r.tree = &tarball{files: make([]tarFile, 9), dirs: 1}
	r.add(floorName, &measurement{run: 1, values: map[string]float64{
		mRedirect: 1000, // 1 ms per file
		mAppend:   500,  // 2 ms per file
		mTar:      0.01, // 1 ms per entry
		mParallel: 4000, // 0.25 ms per file
		mLslCold:  0.1,
		mLslWarm:  0.05,
		mMv:       100, // 10 ms per file
		mRmrf:     1000,
	}})
	// fencefs-strict: 4 ms per redirected file, 0.3 s for the cold ls -l.
	r.add("fencefs-strict", &measurement{run: 1, values: map[string]float64{mRedirect: 250, mLslCold: 0.3, mLslWarm: 0.5}})
	tests := []struct {
		key                string
		rtt, floor, total  float64 // seconds of one run of the workload
		strictEff          float64 // NaN: not measured
		wantStrictEffKnown bool
	}{
		// 100 × PUT 2 ms = 0.2 s; floor 100 files at 1000/s = 0.1 s.
		{key: mRedirect, rtt: 0.2, floor: 0.1, total: 0.3, strictEff: 0.3 / 0.4, wantStrictEffKnown: true},
		// 100 × (GET 1 ms + PUT 2 ms) = 0.3 s; floor 0.2 s.
		{key: mAppend, rtt: 0.3, floor: 0.2, total: 0.5},
		// 10 entries × PUT 2 ms; floor 0.01 s.
		{key: mTar, rtt: 0.02, floor: 0.01, total: 0.03},
		// 400 files × 0.5 ms; floor 400 / 4000 = 0.1 s.
		{key: mParallel, rtt: 0.2, floor: 0.1, total: 0.3},
		// 3 pages × 50 ms; floor 0.1 s.
		{key: mLslCold, rtt: 0.15, floor: 0.1, total: 0.25, strictEff: 0.25 / 0.3, wantStrictEffKnown: true},
		// nothing to fetch: the floor alone.
		{key: mLslWarm, rtt: 0, floor: 0.05, total: 0.05, strictEff: 0.1, wantStrictEffKnown: true},
		// 20 × (COPY 3 ms + DELETE 1 ms); floor 20 × 10 ms.
		{key: mMv, rtt: 0.08, floor: 0.2, total: 0.28},
		// the 80 files mv left and the directory's marker × DELETE 1 ms;
		// floor 80 files at 1000/s.
		{key: mRmrf, rtt: 0.081, floor: 0.08, total: 0.161},
		// the same round trips; no floor measured for the durable rate.
		{key: mRmrfDurable, rtt: 0.081, floor: math.NaN(), total: math.NaN()},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			var spec boundSpec
			for _, s := range boundSpecs {
				if s.key == tt.key {
					spec = s
				}
			}
			rtt, floor, total := r.boundOf(spec)
			if !near(rtt, tt.rtt) || !nearOrNaN(floor, tt.floor) || !nearOrNaN(total, tt.total) {
				t.Errorf("bound: round trips %v floor %v total %v; want %v %v %v", rtt, floor, total, tt.rtt, tt.floor, tt.total)
			}
			eff := r.efficiencyOf("fencefs-strict", spec)
			if tt.wantStrictEffKnown != !math.IsNaN(eff) || (tt.wantStrictEffKnown && !near(eff, tt.strictEff)) {
				t.Errorf("efficiency of fencefs-strict = %v, want %v", eff, tt.strictEff)
			}
		})
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// nearOrNaN is near, or both unknown.
func nearOrNaN(a, b float64) bool { return near(a, b) || (math.IsNaN(a) && math.IsNaN(b)) }

func TestBoundIsUnknownWithoutTheFloor(t *testing.T) {
	if got := bound(0.2, math.NaN()); !math.IsNaN(got) {
		t.Errorf("bound without a floor = %v", got)
	}
	if got := efficiency(0.3, math.NaN()); !math.IsNaN(got) {
		t.Errorf("efficiency of an unmeasured target = %v", got)
	}
	if got := efficiency(0.3, 0.6); got != 0.5 {
		t.Errorf("efficiency(0.3 s bound, 0.6 s measured) = %v, want 0.5", got)
	}
}

func TestLegacyGoalsNeedTheirObjectCountsAndADurableTarget(t *testing.T) {
	goalByMetric := func(kind legacyGoalKind, metric string) legacyGoal {
		for _, g := range legacyGoals {
			if g.kind == kind && g.metric == metric {
				return g
			}
		}
		t.Fatalf("no goal on %s", metric)
		return legacyGoal{}
	}
	find := goalByMetric(goalSeconds, mFind)
	eff := goalByMetric(goalEfficiency, mRedirect)
	tests := []struct {
		name      string
		findFiles int
		strict    map[string]float64
		failures  int
		g         legacyGoal
		want      string
	}{
		{name: "find fast enough", findFiles: 100000, strict: map[string]float64{mFind: 10}, g: find, want: "✓"},
		{name: "find too slow", findFiles: 100000, strict: map[string]float64{mFind: 12}, g: find, want: "✗"},
		{name: "find over fewer objects", findFiles: 4000, strict: map[string]float64{mFind: 1}, g: find, want: "n/a"},
		{name: "redirect at 0.9 of its bound", findFiles: 4, strict: map[string]float64{mRedirect: 90}, g: eff, want: "✓"},
		{name: "redirect at 0.5 of its bound", findFiles: 4, strict: map[string]float64{mRedirect: 50}, g: eff, want: "✗"},
		{name: "fast but not durable", findFiles: 4, strict: map[string]float64{mRedirect: 200}, failures: 1, g: eff, want: "✗"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config{ShellFiles: 100, Shells: 8, ListFiles: 10, FindFiles: tt.findFiles, Runs: 1}
			r := newResults(cfg, allTargets(cfg))
			// Bound of the loop: 100 × 5 ms PUT + 100 × 5 ms floor = 1 s,
			// i.e. 100 files/s.
			r.cal = calibration{Put: 0.005}
			r.add(floorName, &measurement{run: 1, values: map[string]float64{mRedirect: 200}})
			m := &measurement{run: 1, values: tt.strict, checks: 10}
			for i := 0; i < tt.failures; i++ {
				m.fail("missing")
			}
			r.add("fencefs-strict", m)
			if v, got := r.evaluateLegacy(tt.g, nil); got != tt.want {
				t.Errorf("evaluateLegacy = %s %s, want %s", v, got, tt.want)
			}
		})
	}
}

func TestLegacyReportShowsBoundsEfficiencyRequestsAndFailedWorkloads(t *testing.T) {
	cfg := config{ShellFiles: 10, Shells: 8, ListFiles: 10, FindFiles: 8, Runs: 1, Workloads: legacyWorkloads}
	r := newResults(cfg, selectTargets(cfg))
	r.cal = calibration{Put: 0.001, Get: 0.001, Put8: 0.0005, ListPage: 0.01}
	r.add(floorName, &measurement{run: 1, values: map[string]float64{mRedirect: 2000}})
	r.add("s3fs", &measurement{run: 1, values: map[string]float64{mRedirect: 100}})
	r.add("rclone-off", &measurement{run: 1, values: map[string]float64{mRedirect: 300},
		phaseErrors: []string{"append: bash append loop: exit status 1: bash: line 1: echo: write error: Illegal seek"}})
	r.add("fencefs-strict", &measurement{run: 1, values: map[string]float64{mRedirect: 400},
		requests: map[string]map[string]reqStat{mRedirect: {"put": {1, 0.001}, "get": {0.5, 0.001}}}})
	md := r.markdown()
	for _, want := range []string{
		"## Workloads of legacy programs (median of runs)", "## Goals of the legacy workloads",
		"| **fuse-floor** | 2000 |",
		"fencefs-strict / s3fs | 4.00× |",
		"| redirect | 10 × PUT | 1.00ms | 0.50ms | 1.50ms |",
		"| fencefs-strict | 0.60× 2.50ms, 1.50 req |",
		"| s3fs | 0.15× 10.0ms, – req |",
		"**rclone-off** run 1: append: bash append loop: exit status 1",
		"bash redirect loop strict ≥ 1.6× s3fs | 4.00× | ✓",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "## Goals of the basic workloads") {
		t.Error("report of legacy workloads only has the goals of the basic workloads")
	}
	if got := strings.Join(r.problems(), "; "); got != "" {
		t.Errorf("a peer that cannot append is a problem: %q", got)
	}
}

func TestSelectTargetsAddsTheFloorOnlyWithLegacyWorkloads(t *testing.T) {
	names := func(cfg config) []string {
		var out []string
		for _, t := range selectTargets(cfg) {
			out = append(out, t.Name())
		}
		return out
	}
	if got := names(config{Workloads: basicWorkloads}); slices.Contains(got, floorName) {
		t.Errorf("basic workloads: %v", got)
	}
	if got := names(config{Workloads: []string{wTar}, Only: []string{"s3fs"}}); !slices.Equal(got, []string{"s3fs", floorName}) {
		t.Errorf("tar on s3fs only: %v", got)
	}
}

func TestLineCounterCountsLinesAcrossWrites(t *testing.T) {
	var c lineCounter
	for _, p := range []string{"total 8\n-rw", "-r--r-- 1 a\n", "", "x\ny\n"} {
		if _, err := c.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if c.n != 4 {
		t.Errorf("counted %d lines, want 4", c.n)
	}
}

func TestMakeTarballListsEveryFileAndDirectory(t *testing.T) {
	src := filepath.Join(t.TempDir(), "tree")
	for _, d := range []string{"a", "a/b", "c"} {
		if err := os.MkdirAll(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i, f := range []string{"x.go", "a/y.go", "a/b/z.txt"} {
		if err := os.WriteFile(filepath.Join(src, f), bytes.Repeat([]byte("z"), i*100), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tb, err := makeTarball(t.Context(), src, filepath.Join(t.TempDir(), "t.tar"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range tb.files {
		got = append(got, fmt.Sprintf("%s:%d", f.name, f.size))
	}
	slices.Sort(got)
	want := []string{"tree/a/b/z.txt:200", "tree/a/y.go:100", "tree/x.go:0"}
	if tb.dirs != 4 || !slices.Equal(got, want) {
		t.Errorf("tarball: %d dirs, files %v; want 4 dirs, %v", tb.dirs, got, want)
	}
	if _, err := makeTarball(t.Context(), filepath.Join(src, "x.go"), filepath.Join(t.TempDir(), "u.tar")); err == nil ||
		!strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a file as -tar-dir: %v", err)
	}
}
