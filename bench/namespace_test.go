package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/minio/minio-go/v7"
)

// executable makes an executable file in a new directory and returns its
// path.
func executable(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "geesefs")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseFlagsChecksTheNamespaceCountsAndTheGeesefsBinary(t *testing.T) {
	bin := executable(t)
	notExec := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(notExec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		wantErr string
		mv      int
		geesefs string
	}{
		{name: "defaults", args: nil, mv: 100},
		{name: "quick shrinks mv", args: []string{"-quick"}, mv: 10},
		{name: "quick keeps an explicit count", args: []string{"-quick", "-mv-files", "7"}, mv: 7},
		{name: "mv must leave files for rm -rf", args: []string{"-shell-files", "50", "-mv-files", "50"}, wantErr: "-mv-files 50: fewer than -shell-files 50"},
		{name: "without mv the count does not matter", args: []string{"-workloads", "rmrf", "-shell-files", "5"}, mv: 100},
		{name: "mv count positive", args: []string{"-mv-files", "0"}, wantErr: "positive"},
		{name: "sync wait positive", args: []string{"-sync-wait", "0s"}, wantErr: "positive"},
		{name: "geesefs given", args: []string{"-geesefs", bin, "-only", "geesefs,fencefs-strict"}, mv: 100, geesefs: bin},
		{name: "geesefs target needs its binary", args: []string{"-only", "geesefs"}, wantErr: `unknown target "geesefs"`},
		{name: "geesefs binary missing", args: []string{"-geesefs", bin + "-missing"}, wantErr: "no such file"},
		{name: "geesefs binary not executable", args: []string{"-geesefs", notExec}, wantErr: "not an executable file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseFlags(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseFlags(%q) error = %v, want %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.MvFiles != tt.mv || c.GeesefsBin != tt.geesefs {
				t.Errorf("mv-files %d, geesefs %q; want %d, %q", c.MvFiles, c.GeesefsBin, tt.mv, tt.geesefs)
			}
		})
	}
}

func TestParseFlagsMakesTheGeesefsPathAbsolute(t *testing.T) {
	bin := executable(t)
	t.Chdir(filepath.Dir(bin))
	c, err := parseFlags([]string{"-geesefs", "./geesefs"})
	if err != nil || c.GeesefsBin != bin {
		t.Errorf("-geesefs ./geesefs = %q, %v; want %q", c.GeesefsBin, err, bin)
	}
}

func TestGeesefsIsATargetOnlyWithItsBinaryAndRunsWithFsyncOnClose(t *testing.T) {
	if names := targetNames(config{}); slices.Contains(names, geesefsName) {
		t.Errorf("targets without -geesefs: %v", names)
	}
	cfg := config{GeesefsBin: "/opt/geesefs"}
	names := targetNames(cfg)
	if i := slices.Index(names, geesefsName); i < 0 || names[i-1] != "s3fs" {
		t.Fatalf("targets with -geesefs: %v; want geesefs after s3fs", names)
	}
	var g *mountTarget
	for _, tg := range allTargets(cfg) {
		if tg.Name() == geesefsName {
			g = tg.(*mountTarget)
		}
	}
	// --fsync-on-close uploads in FUSE RELEASE, after close(2) returned.
	if g.DurableAtClose() || g.Namespace() != (nsContract{durable: nsAtSync, async: true}) {
		t.Errorf("geesefs promises: at close %v, namespace %+v", g.DurableAtClose(), g.Namespace())
	}
	gw := &gateway.Gateway{Endpoint: "http://127.0.0.1:9000", Region: "us-east-1", AccessKey: "AK", SecretKey: "SECRET"}
	prog, args, env, err := g.command(mountSpec{env: &benchEnv{gw: gw}, bucket: "b", mountpoint: "/m"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-f", "--fsync-on-close", "--endpoint", gw.Endpoint, "--region", gw.Region, "b", "/m"}
	if prog != cfg.GeesefsBin || !slices.Equal(args, want) {
		t.Errorf("command = %s %q; want %s %q", prog, args, cfg.GeesefsBin, want)
	}
	if !slices.Contains(env, "AWS_ACCESS_KEY_ID=AK") || !slices.Contains(env, "AWS_SECRET_ACCESS_KEY=SECRET") {
		t.Errorf("environment %q lacks the credentials", env)
	}
	if strings.Contains(strings.Join(args, " "), "SECRET") {
		t.Errorf("the secret is on the command line: %q", args)
	}
}

func TestRmrfRemovesWhatMvLeft(t *testing.T) {
	for _, tt := range []struct {
		workloads []string
		want      int
	}{
		{[]string{wRedirect, wMv, wRmrf}, 40},
		{[]string{wRedirect, wRmrf}, 50},
	} {
		if got := rmrfFiles(config{ShellFiles: 50, MvFiles: 10, Workloads: tt.workloads}); got != tt.want {
			t.Errorf("rmrfFiles with %v = %d, want %d", tt.workloads, got, tt.want)
		}
	}
}

// sequence returns a pending function answering counts in turn, then the
// last one forever, and counting its calls.
func sequence(counts ...int) (func(context.Context) (int, error), *int) {
	calls := 0
	return func(context.Context) (int, error) {
		i := min(calls, len(counts)-1)
		calls++
		return counts[i], nil
	}, &calls
}

func TestPollPendingWaitsUntilTheBucketShowsEveryChange(t *testing.T) {
	tests := []struct {
		name              string
		counts            []int
		first, last, poll int
		late              bool
	}{
		{name: "there at once", counts: []int{0}, poll: 1},
		{name: "there later", counts: []int{5, 2, 0}, first: 5, poll: 3, late: true},
		{name: "never there", counts: []int{5, 4}, first: 5, last: 4, late: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pending, calls := sequence(tt.counts...)
			late, first, last, err := pollPending(t.Context(), pending, time.Millisecond, 50*time.Millisecond)
			if err != nil || first != tt.first || last != tt.last || (late > 0) != tt.late {
				t.Errorf("pollPending = %v, %d, %d, %v; want late %v, %d, %d", late, first, last, err, tt.late, tt.first, tt.last)
			}
			if tt.poll > 0 && *calls != tt.poll {
				t.Errorf("%d checks of the bucket, want %d", *calls, tt.poll)
			}
		})
	}
}

func TestNamespaceDoneChecksWhatTheTargetPromised(t *testing.T) {
	const ops = 10
	took := 100 * time.Millisecond // 100 ops/s acknowledged
	tests := []struct {
		name      string
		promise   nsPromise
		noCheck   bool
		counts    []int // what the bucket lacks: at return, after the sync, …
		checks    int
		failure   string
		state     nsState
		durable   bool // a durable rate is recorded
		slowerDur bool // … below the acknowledged one by the polling
	}{
		{name: "durable at return as promised", promise: nsAtReturn, counts: []int{0},
			checks: 2, state: nsState{ops: ops}, durable: true},
		{name: "promised at return, late", promise: nsAtReturn, counts: []int{3, 0},
			checks: 2, failure: "3 of 10 changes not in the bucket when the program returned", state: nsState{ops: ops, atReturn: 3}, durable: true},
		{name: "promised at the sync, late at return only", promise: nsAtSync, counts: []int{3, 0},
			checks: 1, state: nsState{ops: ops, atReturn: 3}, durable: true},
		{name: "promised at the sync, late after it", promise: nsAtSync, counts: []int{3, 2, 0},
			checks: 1, failure: "2 of 10 changes not in the bucket after the directories' fsync", state: nsState{ops: ops, atReturn: 3, afterSync: 2},
			durable: true, slowerDur: true},
		{name: "no promise, never there", promise: nsNone, counts: []int{3, 2},
			state: nsState{ops: ops, atReturn: 3, afterSync: 2, never: 2}},
		{name: "the floor is not checked", noCheck: true, counts: []int{3}, durable: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pending, calls := sequence(tt.counts...)
			w := &workloads{
				env:     &benchEnv{cfg: config{SyncWait: 30 * time.Millisecond}},
				t:       &mountTarget{name: "x", namespace: nsContract{durable: tt.promise}},
				in:      &instance{driver: &s3Driver{}},
				m:       &measurement{values: map[string]float64{}},
				noCheck: tt.noCheck,
			}
			err := w.namespaceDone(t.Context(), nsRun{ack: mRmrf, durable: mRmrfDurable, ops: ops, took: took, pending: pending})
			if err != nil {
				t.Fatal(err)
			}
			if tt.noCheck && *calls != 0 {
				t.Errorf("the floor's bucket was checked %d times", *calls)
			}
			failures := strings.Join(w.m.failures, "; ")
			if w.m.checks != tt.checks || (tt.failure == "") != (failures == "") || !strings.Contains(failures, tt.failure) {
				t.Errorf("%d checks, failures %q; want %d, %q", w.m.checks, failures, tt.checks, tt.failure)
			}
			if got := w.m.namespace[mRmrf]; !tt.noCheck && got != tt.state {
				t.Errorf("state %+v, want %+v", got, tt.state)
			}
			ack, dur := w.m.values[mRmrf], w.m.values[mRmrfDurable]
			if ack < 90 || ack > 100.01 {
				t.Errorf("acknowledged rate %v, want 100/s", ack)
			}
			if _, ok := w.m.values[mRmrfDurable]; ok != tt.durable || dur > ack || (tt.slowerDur && dur > 0.95*ack) {
				t.Errorf("durable rate %v (recorded %v), acknowledged %v; want recorded %v, slower %v", dur, ok, ack, tt.durable, tt.slowerDur)
			}
		})
	}
}

func TestTombstoneMetadataIsRecognisedInAnyCase(t *testing.T) {
	tests := []struct {
		meta map[string]string
		want bool
	}{
		{map[string]string{"Fencefs-Tombstone": "1"}, true},
		{map[string]string{"X-Amz-Meta-Fencefs-Tombstone": "1"}, true},
		{map[string]string{"fencefs-tombstone": "1", "Fencefs-Epoch": "3"}, true},
		{map[string]string{"Fencefs-Tombstone": "0"}, false},
		{map[string]string{"Fencefs-Epoch": "3"}, false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := hasTombstoneMeta(tt.meta); got != tt.want {
			t.Errorf("hasTombstoneMeta(%v) = %v, want %v", tt.meta, got, tt.want)
		}
	}
}

func TestPendingCountsLiveObjectsAndTakesTombstonesForDeleted(t *testing.T) {
	gw := gateway.ForTest(t)
	ctx := t.Context()
	bucket := gateway.NewBucket(t, gw)
	w := &workloads{env: &benchEnv{gw: gw, client: gw.Client()}, bucket: bucket}
	put := func(key, body string, meta map[string]string) {
		t.Helper()
		if _, err := w.env.client.PutObject(ctx, bucket, key, strings.NewReader(body), int64(len(body)),
			minio.PutObjectOptions{UserMetadata: meta}); err != nil {
			t.Fatal(err)
		}
	}
	// f0 was not moved (still at its old name); f1 was: its old name is
	// a tombstone, its new name is there.
	put(loopDir+"/f0", "payload 0\n", nil)
	put(loopDir+"/f1", strings.Repeat("t", 128), map[string]string{"fencefs-tombstone": "1"})
	put(movedDir+"/f1", "payload 1\n", nil)
	if got, err := w.mvPending(ctx, 2); err != nil || got != 1 {
		t.Errorf("moves pending = %d, %v; want 1 (f0)", got, err)
	}
	if got, err := w.rmrfPending(ctx); err != nil || got != 1 {
		t.Errorf("objects left after rm -rf = %d, %v; want 1 (f0, not the tombstone)", got, err)
	}
	// A file written again over the tombstone is live again.
	put(loopDir+"/f1", "payload 1\n", nil)
	if got, err := w.rmrfPending(ctx); err != nil || got != 2 {
		t.Errorf("objects left after f1 was written again = %d, %v; want 2", got, err)
	}
}

func TestNamespaceRowsSayWhatWasNotDurable(t *testing.T) {
	cfg := config{ShellFiles: 50, MvFiles: 10, Shells: 8, ListFiles: 10, FindFiles: 8, Runs: 1,
		SyncWait: time.Minute, GeesefsBin: "/opt/geesefs", Workloads: legacyWorkloads}
	r := newResults(cfg, selectTargets(cfg))
	r.cal = calibration{Put: 0.001, Get: 0.001, Put8: 0.0005, Copy: 0.002, Delete: 0.002}
	ns := func(key string, st nsState) map[string]nsState { return map[string]nsState{key: st} }
	// The floor: 1 ms per mv, 0.25 ms per file removed.
	r.add(floorName, &measurement{run: 1, values: map[string]float64{mMv: 1000, mMvDurable: 1000, mRmrf: 4000, mRmrfDurable: 4000}})
	r.add("fencefs-strict", &measurement{run: 1, values: map[string]float64{mRmrf: 400, mRmrfDurable: 400},
		namespace: ns(mRmrf, nsState{ops: 40}),
		requests:  map[string]map[string]reqStat{mRmrf: {"delete": {1, 0.001}, "put": {1, 0.001}}}})
	r.add("s3fs", &measurement{run: 1, values: map[string]float64{mRmrf: 500, mRmrfDurable: 500}, namespace: ns(mRmrf, nsState{ops: 40})})
	gm := &measurement{run: 1, values: map[string]float64{mRmrf: 800, mRmrfDurable: 200, mRedirect: 500},
		namespace: ns(mRmrf, nsState{ops: 40, afterSync: 5}), checks: 10}
	gm.fail("sh/f0: not in the bucket after close")
	r.add(geesefsName, gm)
	r.add("fencefs-strict", &measurement{run: 2, values: map[string]float64{mRedirect: 250}})
	r.add("rclone-writes", &measurement{run: 1, values: map[string]float64{mMv: 300},
		namespace: ns(mMv, nsState{ops: 10, atReturn: 10, afterSync: 10, never: 10})})
	md := r.markdown()
	for _, want := range []string{
		"| **geesefs** | 500 | – | – | 800 (not durable at return: sent afterwards, by design) | 200 (not durable at fsync: 5/40 later) |",
		"| **rclone-writes** | – | 300 (not durable at return: 10/10) | – (10/10 not in the bucket 1m0s after the fsync) | – | – |",
		"| **s3fs** | – | – | – | 500 | 500 |",
		"| fencefs-strict / geesefs (geesefs not durable at close) | 0.50× | – | – | 0.50× (geesefs not durable at return) | 2.00× (geesefs not durable at fsync) |",
		"| fencefs-strict / s3fs | – | – | – | 0.80× | 0.80× |",
		"COPY 2.00ms, DELETE 2.00ms",
		"| mv | 10 × (COPY + DELETE) | 4.00ms | 1.00ms | 5.00ms |",
		"| rmrf | 41 × DELETE | 2.05ms | 0.25ms | 2.30ms |",
		"| fencefs-strict | – 4.00ms, – req | –, – req | –, – req | 0.92× 2.50ms, 2.00 req | 0.92× 2.50ms, 2.00 req |",
		"| geesefs (not durable at close) | – 2.00ms, – req | –, – req | –, – req | 1.84× 1.25ms, – req (not durable at return) | 0.46× 5.00ms, – req (not durable at fsync) |",
		"| rmrf strict ≥ 1× geesefs | 0.50× (geesefs not durable at return; geesefs not durable at close) | ✗ |",
		"| redirect strict ≥ 1× geesefs | 0.50× (geesefs not durable at close) | ✗ |",
		"| rm -rf strict ≥ 1× s3fs | 0.80× | ✗ |",
		"| rm -rf until in the bucket strict ≥ 1× s3fs | 0.80× | ✗ |",
		"| rm -rf strict ≥ 0.5× off | – | n/a |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	var b bytes.Buffer
	r.requestsTable(&b, "requests", legacyDefs(cfg))
	if got := b.String(); !strings.Contains(got, "rm -rf of 40 files") || strings.Contains(got, "until in the bucket") {
		t.Errorf("requests table has a column per phase, not per rate:\n%s", got)
	}
}

func TestNamespaceWorkloadsDoNotRunOnFilesAFailedPhaseLeftUnknown(t *testing.T) {
	tests := []struct {
		failed      []string
		mvErr, rmrf string
	}{
		{failed: nil},
		{failed: []string{"append: bash append loop: exit status 1"}},
		{failed: []string{"redirect: bash redirect loop: exit status 1"}, mvErr: "redirect failed", rmrf: "redirect failed"},
		{failed: []string{"mv: bash mv loop: exit status 1"}, rmrf: "mv failed"},
	}
	for _, tt := range tests {
		w := &workloads{m: &measurement{phaseErrors: tt.failed}}
		for _, c := range []struct {
			err  error
			want string
		}{{w.unknownFiles(mRedirect), tt.mvErr}, {w.unknownFiles(mRedirect, mMv), tt.rmrf}} {
			if (c.err == nil) != (c.want == "") || (c.err != nil && !strings.Contains(c.err.Error(), c.want)) {
				t.Errorf("after %q: %v, want %q", tt.failed, c.err, c.want)
			}
		}
	}
}
