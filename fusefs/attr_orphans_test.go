package fusefs

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestAPendingChmodOfANodeTheKernelForgotIsShownAndStored: a chmod
// acknowledged and held by the attribute write-back (an hour here) on a
// directory and on a closed file nobody holds open; binding the mount's
// own next token drops every kernel entry, and the kernel forgets both
// inodes. The nodes looked up next still show the change, fsync stores
// it, and a change never looked up again is stored at unmount; a rename of
// the directory above one carries it, the removal of a name drops its
// change (nothing brings the object back). Before,
// the change vanished with the forgotten node and fsync returned success
// with the old mode in the bucket.
func TestAPendingChmodOfANodeTheKernelForgotIsShownAndStored(t *testing.T) {
	k := newKT(t, 2*time.Minute)
	a := k.mount(serveConfig{Token: 1, Holder: "a", AttrWriteback: time.Hour})
	for _, d := range []string{"d", "e", "r"} {
		if err := os.Mkdir(a.Path(d), 0o755); err != nil {
			t.Fatal(err)
		}
		syncDir(t, a.Path(d))
	}
	for _, f := range []string{"f", "r/g", "h"} {
		if err := writeClose(a.Path(f), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, "x"); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name, key string
		mode      uint32
	}{
		{"d", "d/", syscall.S_IFDIR | 0o700},
		{"f", "f", syscall.S_IFREG | 0o600},
		{"e", "e/", syscall.S_IFDIR | 0o711},     // never looked up again: unmount stores it
		{"r/g", "r2/g", syscall.S_IFREG | 0o640}, // its directory renamed
		{"h", "h", syscall.S_IFREG | 0o604},      // removed
	}
	inos := map[string]uint64{}
	if st, err := lstat(a.Path("r")); err == nil {
		inos["r"] = st.Ino
	}
	for _, c := range cases {
		st, err := lstat(a.Path(c.name))
		if err != nil {
			t.Fatal(err)
		}
		inos[c.name] = st.Ino
		if err := os.Chmod(a.Path(c.name), os.FileMode(c.mode&0o777)); err != nil {
			t.Fatal(err)
		}
	}
	bindMount(t, a, 2)
	next := uint64(3)
	for _, c := range cases[:2] {
		st := waitNewInode(t, a, a.Path(c.name), inos[c.name], &next)
		if st.Mode != c.mode {
			t.Errorf("%s looked up after the kernel forgot it: mode %o, want the pending %o", c.name, st.Mode, c.mode)
		}
		f, err := os.Open(a.Path(c.name))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Errorf("fsync of %s: %v", c.name, err)
		}
		f.Close()
		if got := k.userMeta(t, c.key)["mode"]; got != strconv.Itoa(int(c.mode)) {
			t.Errorf("%s: mode in the bucket after fsync %s, want %d", c.name, got, c.mode)
		}
	}
	waitNewInode(t, a, a.Path("r"), inos["r"], &next)
	if err := os.Rename(a.Path("r"), a.Path("r2")); err != nil {
		t.Fatal(err)
	}
	if got := k.userMeta(t, "r2/g")["mode"]; got != strconv.Itoa(syscall.S_IFREG|0o640) {
		t.Errorf("r2/g: mode in the bucket after the rename of r %s, want %d", got, syscall.S_IFREG|0o640)
	}
	if err := os.Remove(a.Path("h")); err != nil {
		t.Fatal(err)
	}
	a.stop()
	if k.objectExists(t, "h") {
		t.Error("h is in the bucket again after its unlink and the unmount")
	}
	if got := k.userMeta(t, "e/")["mode"]; got != strconv.Itoa(int(cases[2].mode)) {
		t.Errorf("e: mode in the bucket after unmount %s, want %d", got, cases[2].mode)
	}
}

// waitNewInode waits until path has an inode number other than ino (the
// kernel forgot the old one) and returns its attributes. The kernel keeps
// the inode when the cache drop of a bind met a lookup of path in flight;
// then binding m's next token (*next, counted up) drops the kernel's
// entries again.
func waitNewInode(t *testing.T, m *testMount, path string, ino uint64, next *uint64) syscall.Stat_t {
	t.Helper()
	for range 5 {
		for range 20 {
			st, err := lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Ino != ino {
				return st
			}
			time.Sleep(100 * time.Millisecond)
		}
		bindMount(t, m, *next)
		*next++
	}
	t.Fatalf("the kernel kept inode %d of %s through 5 binds", ino, path)
	return syscall.Stat_t{}
}

// TestAPendingChmodOfADirectoryRenamedOverNeverReachesTheOneThatReplacedIt:
// the directory a rename replaced had a chmod pending; its node, forgotten
// after the rename, must not hand the change to the directory now at its
// name (both empty markers: the same ETag).
func TestAPendingChmodOfADirectoryRenamedOverNeverReachesTheOneThatReplacedIt(t *testing.T) {
	k := newKT(t, 2*time.Minute)
	a := k.mount(serveConfig{Token: 1, Holder: "a", AttrWriteback: time.Hour})
	for _, d := range []string{"s", "t"} {
		if err := os.Mkdir(a.Path(d), 0o755); err != nil {
			t.Fatal(err)
		}
		syncDir(t, a.Path(d))
	}
	if err := os.Chmod(a.Path("t"), 0o701); err != nil {
		t.Fatal(err)
	}
	// rename(2) itself: os.Rename refuses an existing directory.
	if err := syscall.Rename(a.Path("s"), a.Path("t")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the replaced node's FORGET
	if st, err := lstat(a.Path("t")); err != nil || st.Mode != syscall.S_IFDIR|0o755 {
		t.Errorf("t after the rename: mode %o, %v; want the renamed directory's 40755", st.Mode, err)
	}
	a.stop()
	if got := k.userMeta(t, "t/")["mode"]; got != strconv.Itoa(syscall.S_IFDIR|0o755) {
		t.Errorf("t/ in the bucket after unmount: mode %s, want %d", got, syscall.S_IFDIR|0o755)
	}
}
