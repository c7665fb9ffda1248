package fusefs

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestTombstonesAreInvisible uses a mount whose deletes write tombstones
// (for backends that ignore If-Match on DELETE): deleted names vanish from
// lookups and listings, directories holding only tombstones vanish, and a
// name can be created again over its tombstone.
func TestTombstonesAreInvisible(t *testing.T) {
	k := newKT(t, 2*time.Minute)
	// Directories here are implicit: the Versity gateway's posix backend
	// cannot hold a tombstone at a "dir/" marker key.
	for _, p := range []string{"d/a", "d/b", "d/sub/c"} {
		k.putObject(t, p, []byte(p), nil)
	}
	m := k.mount(serveConfig{Token: 1, TombstoneDeletes: true})
	for _, p := range []string{"d/a", "d/sub/c"} {
		if err := os.Remove(m.Path(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(m.Path("d/sub")); err != nil {
		t.Fatalf("rmdir of an implicit directory holding only a tombstone: %v", err)
	}
	syncDir(t, m.Path("d")) // the deletes of d's entries are in the bucket
	// The bucket holds the tombstones, the mount does not show them.
	if _, err := k.statObject("d/a"); err != nil {
		t.Fatalf("no tombstone at d/a (the test would not test anything): %v", err)
	}
	if k.objectExists(t, "d/a") {
		t.Fatal("d/a is live after unlink")
	}

	// A second mount, with nothing cached, sees the same.
	m2 := k.mount(serveConfig{})
	for _, mm := range []*testMount{m, m2} {
		ents, err := os.ReadDir(mm.Path("d"))
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 1 || ents[0].Name() != "b" {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Errorf("%s: readdir d = %v, want [b]", mm.Dir, names)
		}
		for _, p := range []string{"d/a", "d/sub", "d/sub/c"} {
			if _, err := lstat(mm.Path(p)); errnoOf(err) != syscall.ENOENT {
				t.Errorf("%s: lstat %s = %v, want ENOENT", mm.Dir, p, err)
			}
		}
	}
	// Implicit directories of tombstones only are gone; names come back.
	k.putObject(t, "gone/x", []byte("x"), nil)
	if err := os.Remove(m.Path("gone/x")); err != nil {
		t.Fatal(err)
	}
	syncDir(t, m.Path("gone"))
	if _, err := lstat(m2.Path("gone")); errnoOf(err) != syscall.ENOENT {
		t.Errorf("a directory of tombstones only: lstat = %v, want ENOENT", err)
	}
	if err := os.WriteFile(m.Path("d/a"), []byte("again"), 0o644); err != nil {
		t.Fatalf("create over a tombstone: %v", err)
	}
	if err := os.Mkdir(m.Path("d/sub"), 0o755); err != nil {
		t.Fatalf("mkdir over a tombstone: %v", err)
	}
	if b, err := k.getObject("d/a"); err != nil || string(b) != "again" {
		t.Fatalf("S3 d/a = %q, %v", b, err)
	}
}
