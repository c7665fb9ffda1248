package fusefs

import (
	"os"
	"os/exec"
	"sort"
	"syscall"
	"testing"
	"time"
)

func readNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// TestPrefixMountShowsOnlyItsPrefixAndHidesItsFenceDomain mounts team/ of a
// bucket with team/ as its own fence domain.
func TestPrefixMountShowsOnlyItsPrefixAndHidesItsFenceDomain(t *testing.T) {
	k := newKT(t, 2*time.Minute)
	k.putObject(t, "outside", []byte("o"), nil)
	k.putObject(t, "team/inside", []byte("i"), nil)
	m := k.mount(serveConfig{Token: 1, Prefix: "team/", Domain: "team/"})
	if !k.objectExists(t, "team/.fencefs/epoch") {
		t.Fatal("no team/.fencefs/epoch: the domain is not where the test expects it")
	}
	if err := os.WriteFile(m.Path("new"), []byte("n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := k.getObject("team/new"); err != nil || string(b) != "n" {
		t.Fatalf("S3 team/new = %q, %v", b, err)
	}
	if got := readNames(t, m.Dir); len(got) != 2 || got[0] != "inside" || got[1] != "new" {
		t.Fatalf("readdir of the mount root = %v, want [inside new]", got)
	}
	if _, err := lstat(m.Path(".fencefs")); errnoOf(err) != syscall.ENOENT {
		t.Fatalf("lstat .fencefs = %v, want ENOENT", err)
	}
	if _, err := lstat(m.Path("outside")); errnoOf(err) != syscall.ENOENT {
		t.Fatalf("a key outside the prefix is visible: %v", err)
	}

	// The whole bucket, seen by a mount whose domain is team/: the domain's
	// protocol directory is hidden inside team.
	w := k.mount(serveConfig{Domain: "team/"})
	if got := readNames(t, w.Path("team")); len(got) != 2 || got[0] != "inside" || got[1] != "new" {
		t.Fatalf("readdir team = %v, want [inside new]", got)
	}
	if got := readNames(t, w.Dir); len(got) != 2 || got[0] != "outside" || got[1] != "team" {
		t.Fatalf("readdir root = %v, want [outside team]", got)
	}
}

// TestDirectoryRenameAboveTheLimitIsEXDEVAndMvFallsBack checks the bound on
// directory renames: rename(2) refuses with EXDEV, and mv(1) then copies and
// deletes file by file.
func TestDirectoryRenameAboveTheLimitIsEXDEVAndMvFallsBack(t *testing.T) {
	k := newKT(t, 2*time.Minute)
	for _, p := range []string{"big/a", "big/b", "big/c/d"} {
		k.putObject(t, p, []byte(p), nil)
	}
	k.putObject(t, "small/a", []byte("a"), nil)
	// Short TTLs: mv's final rmdir of the implicit "big" (no marker; its
	// objects are gone by then) looks it up again and must still find it.
	m := k.mount(serveConfig{Token: 1, MaxDirRename: 2, EntryTTL: time.Millisecond, MetaTTL: time.Millisecond})
	if err := syscall.Rename(m.Path("small"), m.Path("small2")); err != nil {
		t.Fatalf("rename of a directory within the limit: %v", err)
	}
	if err := syscall.Rename(m.Path("big"), m.Path("big2")); errnoOf(err) != syscall.EXDEV {
		t.Fatalf("rename of 3 objects with max_dir_rename=2: %v, want EXDEV", err)
	}
	for _, p := range []string{"big/a", "big/b", "big/c/d"} {
		if !k.objectExists(t, p) {
			t.Fatalf("a refused rename changed the bucket: %s is gone", p)
		}
	}
	if out, err := exec.Command("mv", m.Path("big"), m.Path("big2")).CombinedOutput(); err != nil {
		t.Fatalf("mv: %v\n%s", err, out)
	}
	for _, p := range []string{"a", "b", "c/d"} {
		if b, err := k.getObject("big2/" + p); err != nil || string(b) != "big/"+p {
			t.Errorf("S3 big2/%s = %q, %v", p, b, err)
		}
		if k.objectExists(t, "big/"+p) {
			t.Errorf("big/%s still exists after mv", p)
		}
	}

	d := k.mount(serveConfig{Mode: "off", MaxDirRename: -1})
	if err := syscall.Rename(d.Path("big2"), d.Path("big3")); err != nil {
		t.Fatalf("rename with no limit: %v", err)
	}
}
