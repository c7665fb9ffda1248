package mounts_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/fencefs/fencefs/internal/mounts"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }

func TestIsMountedReadsTheMountTable(t *testing.T) {
	for _, tt := range []struct {
		dir  string
		want bool
	}{{"/", true}, {"/proc/", true}, {t.TempDir(), false}} {
		if got, err := mounts.IsMounted(tt.dir); err != nil || got != tt.want {
			t.Errorf("IsMounted(%s) = %v, %v; want %v", tt.dir, got, err, tt.want)
		}
	}
}

func TestUnmountOfADirectoryNotMountedDoesNothing(t *testing.T) {
	if err := mounts.Unmount(context.Background(), t.TempDir()); err != nil {
		t.Fatalf("Unmount = %v", err)
	}
}

// mount mounts a fresh bucket with the real binary.
func mount(t *testing.T) *harness.FS {
	gw := gateway.ForTest(t)
	return harness.Mount(t, gw, gateway.NewBucket(t, gw), "--token", "1")
}

func TestUnmountRemovesAMountAndItsServerExits(t *testing.T) {
	fs := mount(t)
	if err := mounts.Unmount(context.Background(), fs.Dir); err != nil {
		t.Fatalf("Unmount = %v", err)
	}
	if ok, err := mounts.IsMounted(fs.Dir); err != nil || ok {
		t.Fatalf("IsMounted after Unmount = %v, %v", ok, err)
	}
	select {
	case <-fs.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("fencefs still running 30 s after its mount was removed")
	}
}

// busyMount mounts a fresh bucket and keeps a file open on it until the
// test ends, so that fusermount3 -u fails with EBUSY.
func busyMount(t *testing.T) *harness.FS {
	fs := mount(t)
	f, err := os.Create(fs.Path("held-open"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return fs
}

func TestUnmountOfABusyMountFallsBackOnALazyUnmount(t *testing.T) {
	fs := busyMount(t)
	err := mounts.Unmount(context.Background(), fs.Dir)
	if err == nil || !strings.Contains(err.Error(), fs.Dir+" stayed busy; lazily unmounted") {
		t.Fatalf("Unmount of a mount with an open file = %v, want the lazy fallback reported", err)
	}
	if ok, err := mounts.IsMounted(fs.Dir); err != nil || ok {
		t.Fatalf("IsMounted after the lazy unmount = %v, %v", ok, err)
	}
}

func TestUnmountStopsWhenItsContextEnds(t *testing.T) {
	fs := busyMount(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := mounts.Unmount(ctx, fs.Dir); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("Unmount with a cancelled context = %v", err)
	}
	if ok, _ := mounts.IsMounted(fs.Dir); !ok {
		t.Fatal("a cancelled Unmount removed the mount")
	}
}
