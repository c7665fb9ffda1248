package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/fencefs/fencefs/internal/mounts"
)

// smallTree makes a directory tree of 3 files in 3 directories and its
// tarball.
func smallTree(t *testing.T) *tarball {
	t.Helper()
	src := filepath.Join(t.TempDir(), "tree")
	if err := os.MkdirAll(filepath.Join(src, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"x.go", "a/y.go", "a/b/z.txt"} {
		if err := os.WriteFile(filepath.Join(src, f), []byte("content of "+f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tb, err := makeTarball(t.Context(), src, filepath.Join(t.TempDir(), "tree.tar"))
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// checkLoops runs the redirect loop and the append loop of n files in the
// existing directory sh with d, and checks each file as read reads it.
func checkLoops(t *testing.T, d shellDriver, n int, read func(name string) ([]byte, error)) {
	t.Helper()
	if err := d.RedirectLoop(t.Context(), "sh", n); err != nil {
		t.Fatal(err)
	}
	if err := d.AppendLoop(t.Context(), "sh", n); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		b, err := read(fmt.Sprintf("sh/f%d", i))
		if want := payload(i) + appendLine(i); err != nil || string(b) != want {
			t.Errorf("sh/f%d = %q, %v; want %q", i, b, err, want)
		}
	}
}

func TestShellWorkloadsWriteWhatTheProgramsWrite(t *testing.T) {
	root := t.TempDir()
	d := &fsDriver{root: root}
	ctx := t.Context()
	for _, dir := range []string{"sh", "tar"} {
		if err := d.Mkdir(ctx, dir); err != nil {
			t.Fatal(err)
		}
	}
	const n = 5
	checkLoops(t, d, n, func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(root, name)) })
	if got, err := d.ListLong(ctx, "sh"); err != nil || got != n {
		t.Errorf("ls -l sh = %d, %v; want %d", got, err, n)
	}
	tb := smallTree(t)
	if err := d.ExtractTar(ctx, tb, "tar"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "tar", "tree", "a", "b", "z.txt")); err != nil || string(b) != "content of a/b/z.txt" {
		t.Errorf("extracted z.txt = %q, %v", b, err)
	}
	if got, err := d.FindFiles(ctx, "tar"); err != nil || got != len(tb.files) {
		t.Errorf("find tar -type f = %d, %v; want %d", got, err, len(tb.files))
	}
	if err := d.Mkdir(ctx, movedDir); err != nil {
		t.Fatal(err)
	}
	if err := d.MoveLoop(ctx, loopDir, movedDir, 2); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"sh/f0": false, "sh/f1": false, "sh/f2": true, "sh2/f0": true, "sh2/f1": true, "sh2/f2": false} {
		if _, err := os.Stat(filepath.Join(root, name)); (err == nil) != want {
			t.Errorf("after mv of 2 files, %s exists: %v, want %v", name, err == nil, want)
		}
	}
	if err := d.RemoveTree(ctx, loopDir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, loopDir)); !os.IsNotExist(err) {
		t.Errorf("after rm -rf: %v", err)
	}
	if err := d.SyncDirs(ctx, ".", movedDir); err != nil {
		t.Errorf("sync of the directories: %v", err)
	}
	if err := d.SyncDirs(ctx, loopDir); err == nil {
		t.Error("sync of a removed directory: no error")
	}
	err := d.RedirectLoop(ctx, "missing", 2)
	if err == nil || !strings.Contains(err.Error(), "bash redirect loop") ||
		!strings.Contains(err.Error(), "No such file or directory") || strings.Contains(err.Error(), "\n") {
		t.Errorf("redirect into a missing directory: %v; want one line naming the loop and the error", err)
	}
}

func TestRawClientDoesTheSameWorkloadsWithS3Calls(t *testing.T) {
	gw := gateway.ForTest(t)
	ctx := t.Context()
	cfg := config{ListFiles: 5, FindFiles: 10, Workloads: legacyWorkloads}
	e := &benchEnv{cfg: cfg, gw: gw, client: gw.Client()}
	d := &s3Driver{env: e, bucket: gateway.NewBucket(t, gw)}
	const n = 4
	checkLoops(t, d, n, func(name string) ([]byte, error) { return d.ReadSmall(ctx, name) })
	tb := smallTree(t)
	if err := d.ExtractTar(ctx, tb, "tar"); err != nil {
		t.Fatal(err)
	}
	if b, err := d.ReadSmall(ctx, "tar/tree/a/y.go"); err != nil || string(b) != "content of a/y.go" {
		t.Errorf("tar/tree/a/y.go = %q, %v", b, err)
	}
	if got, err := d.FindFiles(ctx, "tar"); err != nil || got != len(tb.files) {
		t.Errorf("files under tar/ = %d, %v; want %d", got, err, len(tb.files))
	}
	if err := d.MoveLoop(ctx, loopDir, movedDir, 2); err != nil {
		t.Fatal(err)
	}
	if b, err := d.ReadSmall(ctx, "sh2/f1"); err != nil || string(b) != payload(1)+appendLine(1) {
		t.Errorf("sh2/f1 after mv = %q, %v", b, err)
	}
	if err := d.RemoveTree(ctx, loopDir); err != nil {
		t.Fatal(err)
	}
	if got, err := d.FindFiles(ctx, loopDir); err != nil || got != 0 {
		t.Errorf("files under sh/ after rm -rf = %d, %v; want 0", got, err)
	}
	if got, err := d.FindFiles(ctx, movedDir); err != nil || got != 2 {
		t.Errorf("files under sh2/ = %d, %v; want the 2 moved", got, err)
	}

	// The listing bucket: markers are not entries; find's objects are in
	// 4 directories.
	e.legacy.listingBucket = gateway.NewBucket(t, gw)
	if err := putParallel(ctx, e.client, e.legacy.listingBucket, listingKeys(cfg), 4); err != nil {
		t.Fatal(err)
	}
	l := &s3Driver{env: e, bucket: e.legacy.listingBucket}
	if got, err := l.ListLong(ctx, "lsl"); err != nil || got != cfg.ListFiles {
		t.Errorf("entries in lsl/ = %d, %v; want %d", got, err, cfg.ListFiles)
	}
	if got, err := l.FindFiles(ctx, "find"); err != nil || got != cfg.FindFiles {
		t.Errorf("files under find/ = %d, %v; want %d", got, err, cfg.FindFiles)
	}
	if got, err := l.ListLong(ctx, "find"); err != nil || got != 0 {
		t.Errorf("files directly in find/ = %d, %v; want 0 (4 directories)", got, err)
	}

	c, err := e.calibrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]float64{"PUT": c.Put, "GET": c.Get, "parallel PUT": c.Put8, "LIST page": c.ListPage} {
		if math.IsNaN(v) || v <= 0 || v > 5 {
			t.Errorf("calibrated %s round trip = %v s", name, v)
		}
	}
}

func TestFloorRunsEveryLegacyWorkloadOnTheLoopbackAndUnmounts(t *testing.T) {
	harness.RequireFUSE(t)
	gw := gateway.ForTest(t)
	ctx := t.Context()
	cfg := config{ShellFiles: 5, MvFiles: 2, Shells: 2, ListFiles: 7, FindFiles: 8, CheckEvery: 1, SyncWait: time.Second,
		Workloads: legacyWorkloads, WorkDir: t.TempDir(), TargetTimeout: 2 * time.Minute}
	e := &benchEnv{cfg: cfg, gw: gw, client: gw.Client()}
	e.legacy.tree = smallTree(t)
	e.legacy.listingBucket = "bench-listing" // the floor lists its own copy of it
	var err error
	if e.legacy.loopback, err = buildLoopback(ctx, cfg.WorkDir); err != nil {
		t.Fatal(err)
	}
	m, err := e.measure(ctx, floorTarget{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{mRedirect, mAppend, mMv, mMvDurable, mRmrf, mRmrfDurable, mTar, mParallel, mLslCold, mLslWarm, mFind, mRSSList} {
		if v, ok := m.values[k]; !ok || v <= 0 {
			t.Errorf("%s = %v, %v; want a measurement", k, v, ok)
		}
	}
	if m.checks != 0 || len(m.failures) != 0 || len(m.phaseErrors) != 0 || len(m.namespace) != 0 {
		t.Errorf("floor: %d checks, failures %v, failed workloads %v; want none", m.checks, m.failures, m.phaseErrors)
	}
	for _, mnt := range []string{"fuse-floor-r1/mnt", "fuse-floor-r1-listing/mnt"} {
		if ok, err := mounts.IsMounted(filepath.Join(cfg.WorkDir, mnt)); err != nil || ok {
			t.Errorf("%s still mounted after measure (%v)", mnt, err)
		}
	}
}
