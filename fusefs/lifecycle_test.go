package fusefs

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestUnmountCommitsDirtyFilesFirst: SIGTERM makes the mount process call
// Unmount, which commits a file that is still open and dirty before it
// unmounts (here lazily, since the test still holds the descriptor).
func TestUnmountCommitsDirtyFilesFirst(t *testing.T) {
	k := newKT(t, 2*time.Minute)
	m := k.mount(serveConfig{Token: 1})
	fd, err := syscall.Open(m.Path("dirty"), os.O_CREATE|os.O_WRONLY|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if _, err := syscall.Write(fd, []byte("unsaved")); err != nil {
		t.Fatal(err)
	}
	if k.objectExists(t, "dirty") {
		t.Fatal("the file was committed before close: the test would not test Unmount")
	}
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Wait for the event (the mount detached), not for a time.
	deadline := time.Now().Add(60 * time.Second)
	for isMounted(m.Dir) {
		if time.Now().After(deadline) {
			t.Fatal("the mount is still attached 60s after SIGTERM")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if b, err := k.getObject("dirty"); err != nil || string(b) != "unsaved" {
		t.Fatalf("S3 dirty = %q, %v; want the data committed by Unmount", b, err)
	}
}

// TestCacheDirIsRemovedOnCleanUnmount checks that the staging directory the
// mount creates under the cache directory is gone after a clean unmount.
func TestCacheDirIsRemovedOnCleanUnmount(t *testing.T) {
	k := newKT(t, time.Minute)
	m := k.mount(serveConfig{Token: 1})
	if err := os.WriteFile(m.Path("f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(m.cfg.CacheDir)
	if err != nil || len(ents) != 1 {
		t.Fatalf("cache dir while mounted: %v, %v; want one staging directory", ents, err)
	}
	m.stop()
	ents, err = os.ReadDir(m.cfg.CacheDir)
	if err != nil || len(ents) != 0 {
		t.Fatalf("cache dir after unmount: %v, %v; want it empty", ents, err)
	}
}
