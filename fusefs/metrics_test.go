package fusefs

import (
	"os"
	"testing"
	"time"

	"github.com/fencefs/fencefs/internal/promreg"
	"github.com/fencefs/fencefs/objstore"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// TestOldestDirtyAgeIsTheAgeOfTheOldestUncommittedChange follows the gauge
// fencefs_fuse_oldest_dirty_age_seconds (the alert "dirty data older than N
// minutes" reads it) through files becoming dirty and being committed.
func TestOldestDirtyAgeIsTheAgeOfTheOldestUncommittedChange(t *testing.T) {
	fsys := newFilesystem(Options{}, t.TempDir())
	a := newFileNode(fsys, objstore.ObjectInfo{Key: "a"})
	b := newFileNode(fsys, objstore.ObjectInfo{Key: "b"})
	mark := func(n *fileNode) func() {
		return func() { n.c.mu.Lock(); n.c.markDirtyLocked(); n.c.mu.Unlock() }
	}
	clean := func(n *fileNode) func() {
		return func() { n.c.mu.Lock(); n.c.setCleanLocked(); n.c.mu.Unlock() }
	}
	since := func(n *fileNode) time.Time { return time.Unix(0, n.c.dirtySince.Load()) }
	hour := time.Hour
	for _, step := range []struct {
		name string
		do   func()
		// want is the age at now = the reference node's dirty time + 1h
		// (nil reference: nothing is dirty, want 0).
		ref *fileNode
	}{
		{"nothing dirty", func() {}, nil},
		{"a becomes dirty", mark(a), a},
		{"b becomes dirty later: a is still the oldest", func() { time.Sleep(2 * time.Millisecond); mark(b)() }, a},
		{"a changes again: its age does not restart", mark(a), a},
		{"a committed: b is the oldest", clean(a), b},
		{"b committed: nothing dirty", clean(b), nil},
	} {
		step.do()
		now := time.Now()
		want := time.Duration(0)
		if step.ref != nil {
			now = since(step.ref).Add(hour)
			want = hour
		}
		if got := fsys.oldestDirtyAge(now); got != want {
			t.Errorf("%s: oldestDirtyAge = %v, want %v", step.name, got, want)
		}
	}

	// The gauge is registered under its documented name and reads the
	// wall clock.
	reg := prometheus.NewRegistry()
	if err := fsys.metrics.register(reg); err != nil {
		t.Fatal(err)
	}
	if got := gaugeValue(t, reg, "fencefs_fuse_oldest_dirty_age_seconds"); got != 0 {
		t.Errorf("nothing dirty: gauge = %v, want 0", got)
	}
	mark(a)()
	a.c.dirtySince.Store(time.Now().Add(-10 * time.Minute).UnixNano())
	if got := gaugeValue(t, reg, "fencefs_fuse_oldest_dirty_age_seconds"); got < 600 || got > 3600 {
		t.Errorf("a file dirty for 10 minutes: gauge = %v, want about 600", got)
	}
}

// gaugeValue is the value of reg's single sample of the gauge name; the
// test fails if there is none.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	v, ok := promreg.GaugeValue(reg, name)
	if !ok {
		t.Fatalf("%s is not exported as one gauge sample", name)
	}
	return v
}

// TestStagingFSGaugesShowTheCacheDirectorysFileSystem: the staging disk
// alert divides staging_fs_avail_bytes by staging_fs_size_bytes; both come
// from statfs of the staging directory, and read 0 once it is gone.
func TestStagingFSGaugesShowTheCacheDirectorysFileSystem(t *testing.T) {
	dir := t.TempDir()
	fsys := newFilesystem(Options{}, dir)
	reg := prometheus.NewRegistry()
	if err := fsys.metrics.register(reg); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	avail := gaugeValue(t, reg, "fencefs_fuse_staging_fs_avail_bytes")
	size := gaugeValue(t, reg, "fencefs_fuse_staging_fs_size_bytes")
	if want := float64(st.Blocks) * float64(st.Bsize); size != want {
		t.Errorf("staging_fs_size_bytes = %v, want %v (statfs)", size, want)
	}
	if avail <= 0 || avail > size {
		t.Errorf("staging_fs_avail_bytes = %v, want in (0, %v]", avail, size)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"fencefs_fuse_staging_fs_avail_bytes", "fencefs_fuse_staging_fs_size_bytes"} {
		if got := gaugeValue(t, reg, name); got != 0 {
			t.Errorf("staging directory gone: %s = %v, want 0", name, got)
		}
	}
}
