package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
)

// TestMountOverFilesOrAMountIsRefusedUnlessNonempty: mounting over a
// directory with files hides them, and mounting over a fencefs mount hides
// that mount (running, unreachable); both are refused with one line unless
// --nonempty asks for it.
func TestMountOverFilesOrAMountIsRefusedUnlessNonempty(t *testing.T) {
	harness.RequireFUSE(t)
	gw := gateway.ForTest(t)
	bin := harness.Binary(t)
	bucket := gateway.NewBucket(t, gw)
	tmp := t.TempDir()

	full := filepath.Join(tmp, "full")
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "keep.txt"), []byte("local"), 0o644); err != nil {
		t.Fatal(err)
	}
	cleanupBackground(t, bin, full)
	mountArgs := func(mp string, extra ...string) []string {
		return append([]string{bucket, mp, "--cache-dir", filepath.Join(tmp, "cache-"+filepath.Base(mp)), "-o", "endpoint=" + gw.Endpoint}, extra...)
	}
	r := runBin(t, gw.Env(), mountArgs(full)...)
	oneErrorLine(t, r, "fencefs: mount: ", "mountpoint "+full+" is not empty (it holds keep.txt)", "--nonempty")
	if mounted(t, full) {
		t.Fatalf("%s is mounted over its files", full)
	}

	// Over an existing fencefs mount.
	first := harness.Mount(t, gw, bucket)
	cleanupBackground(t, bin, first.Dir)
	r = runBin(t, gw.Env(), mountArgs(first.Dir)...)
	oneErrorLine(t, r, "fencefs: mount: ", "mountpoint "+first.Dir+" is a fencefs mount of", "fusermount3 -u "+first.Dir)
	if err := os.WriteFile(first.Path("still.txt"), []byte("the first mount answers"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("the first mount after the refused stacking: write = %v, want its own EROFS (no token)", err)
	}

	// --nonempty (or -o nonempty) mounts over the files, which come back
	// at the unmount.
	r = runBin(t, gw.Env(), mountArgs(full, "--nonempty")...)
	if r.code != 0 {
		t.Fatalf("mount --nonempty: %d %q", r.code, r.stderr)
	}
	if !mounted(t, full) {
		t.Fatalf("%s not mounted with --nonempty", full)
	}
	if _, err := os.Stat(filepath.Join(full, "keep.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("keep.txt seen through the mount: %v", err)
	}
	if out, err := exec.Command("fusermount3", "-u", full).CombinedOutput(); err != nil {
		t.Fatalf("fusermount3 -u: %v %s", err, out)
	}
	waitFor(t, "the unmount", func() bool { return !mounted(t, full) })
	if b, err := os.ReadFile(filepath.Join(full, "keep.txt")); err != nil || string(b) != "local" {
		t.Errorf("keep.txt after the unmount: %q, %v", b, err)
	}
}

// TestARefusedTokenAttributeSaysWhyInStatus: setfattr can only answer an
// errno; fencefs status shows why the bind was refused, until a bind
// succeeds.
func TestARefusedTokenAttributeSaysWhyInStatus(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	if r := runBin(t, gw.Env(), "epoch", "raise", bucket, "5"); r.code != 0 {
		t.Fatalf("epoch raise: %q", r.stderr)
	}
	fs := harness.Mount(t, gw, bucket)
	if err := unixSetxattr(fs.Dir, "user.fencefs.token", "3"); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("setfattr of a token older than the epoch: %v, want EINVAL", err)
	}
	st := runBin(t, nil, "status", fs.Dir)
	if !regexpMatch(`(?m)^bind_error\s+\d{4}-\d\d-\d\dT[0-9:]+Z: bind token 3: .*token 3 is older than the bucket's epoch 5`, st.stdout) {
		t.Fatalf("status after a refused bind does not say why:\n%s", st.stdout)
	}
	if err := unixSetxattr(fs.Dir, "user.fencefs.token", "6"); err != nil {
		t.Fatalf("setfattr 6: %v", err)
	}
	st = runBin(t, nil, "status", fs.Dir)
	if !regexpMatch(`(?m)^bind_error\s*$`, st.stdout) || !strings.Contains(st.stdout, "active") {
		t.Errorf("status after a successful bind still shows an error:\n%s", st.stdout)
	}
}
