package fusefs

import (
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestImplicitDirectoryEmptiedHereStaysUntilItsRmdir checks that a directory
// without a marker object, whose last objects this mount removes, stays
// visible here until it is removed itself: rm -r and a rename-away of the
// last entry followed by rmdir work even though the kernel looks the
// directory up again (entry and metadata TTLs of 1 ms) after the bucket
// stopped holding anything under it. Another mount sees it gone.
func TestImplicitDirectoryEmptiedHereStaysUntilItsRmdir(t *testing.T) {
	k := newKT(t, 2*time.Minute)
	for _, p := range []string{"tree/a", "tree/sub/b", "tree/sub/deep/c", "solo/only", "moved/last"} {
		k.putObject(t, p, []byte(p), nil)
	}
	m := k.mount(serveConfig{Token: 1, EntryTTL: time.Millisecond, MetaTTL: time.Millisecond, AttrTTL: time.Millisecond})

	// rm -r: every object goes, then each directory's rmdir looks it up.
	if out, err := exec.Command("rm", "-r", m.Path("tree")).CombinedOutput(); err != nil {
		t.Fatalf("rm -r of an implicit tree: %v\n%s", err, out)
	}
	if _, err := os.Lstat(m.Path("tree")); !os.IsNotExist(err) {
		t.Errorf("tree after rm -r: %v, want ENOENT", err)
	}

	// The last object removed by unlink: the directory stays, empty,
	// listed by its parent, until rmdir.
	if err := os.Remove(m.Path("solo/only")); err != nil {
		t.Fatal(err)
	}
	syncDir(t, m.Path("solo"))
	if k.objectExists(t, "solo/only") {
		t.Fatal("solo/only still in the bucket after unlink")
	}
	time.Sleep(10 * time.Millisecond) // past every TTL: the kernel asks again
	fi, err := os.Stat(m.Path("solo"))
	if err != nil || !fi.IsDir() {
		t.Fatalf("emptied implicit directory: %v, %v; want a directory until its rmdir", fi, err)
	}
	if names := readNames(t, m.Path("solo")); len(names) != 0 {
		t.Errorf("emptied directory lists %q, want nothing", names)
	}
	if names := readNames(t, m.Dir); !slices.Contains(names, "solo") {
		t.Errorf("root lists %q, want solo among them until its rmdir", names)
	}

	// A second mount knows nothing of it: the bucket holds no object there.
	other := k.mount(serveConfig{Mode: "off", EntryTTL: time.Millisecond, MetaTTL: time.Millisecond})
	if _, err := os.Stat(other.Path("solo")); !os.IsNotExist(err) {
		t.Errorf("another mount sees solo: %v, want ENOENT (nothing in the bucket)", err)
	}

	if err := syscall.Rmdir(m.Path("solo")); err != nil {
		t.Fatalf("rmdir of the emptied directory: %v", err)
	}
	if _, err := os.Stat(m.Path("solo")); !os.IsNotExist(err) {
		t.Errorf("solo after rmdir: %v, want ENOENT", err)
	}
	if names := readNames(t, m.Dir); slices.Contains(names, "solo") {
		t.Errorf("root lists %q after rmdir of solo", names)
	}

	// The last entry renamed away, then the directory removed.
	if err := os.Rename(m.Path("moved/last"), m.Path("last")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if err := syscall.Rmdir(m.Path("moved")); err != nil {
		t.Fatalf("rmdir after moving the last entry out: %v", err)
	}
	if b, err := k.getObject("last"); err != nil || string(b) != "moved/last" {
		t.Errorf("S3 last = %q, %v", b, err)
	}
}
