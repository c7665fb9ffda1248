package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"golang.org/x/sys/unix"
)

// smallDisk mounts a tmpfs of size bytes for the test (a cache directory
// that fills up) and unmounts it in cleanup. It needs root.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		gateway.SkipOrFail(t, "mounting a small tmpfs as the cache directory needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		gateway.SkipOrFail(t, "mounting a tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting the small disk: %v", err)
		}
	})
	return dir
}

// usedBytes is what the files below dir occupy.
func usedBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// TestFullCacheDiskFailsTheWriteAndLosesNothing fills the cache directory
// (the staging area of files being written) while writing: the writer gets
// ENOSPC (from write(2) or close(2)), the bucket keeps the previous
// version whole and gets no partial object, the staging space is given
// back, and the mount goes on working.
func TestFullCacheDiskFailsTheWriteAndLosesNothing(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	cache := smallDisk(t, "2m")
	fs := harness.Mount(t, gw, bucket, "--token", "1", "--cache-dir", cache)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	old := bytes.Repeat([]byte("old version\n"), 100)
	if err := writeClose(fs.Path("keep.txt"), os.O_CREATE|os.O_WRONLY, old); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB, 8× the disk
	for _, tc := range []struct {
		name, file string
		flags      int
	}{
		{"overwrite of an existing file", "keep.txt", os.O_WRONLY | os.O_TRUNC},
		{"new file", "new.bin", os.O_CREATE | os.O_WRONLY},
		{"append to an existing file", "keep.txt", os.O_WRONLY | os.O_APPEND},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := writeClose(fs.Path(tc.file), tc.flags, big)
			if !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("writing 16 MiB with a 2 MiB cache disk: %v; want ENOSPC", err)
			}
			if got := objectBody(ctx, t, gw, bucket, "keep.txt"); !bytes.Equal(got, old) {
				t.Errorf("keep.txt in the bucket has %d bytes, want the previous version (%d bytes)", len(got), len(old))
			}
			if keys := listKeys(ctx, t, gw, bucket, "new.bin"); len(keys) != 0 {
				t.Errorf("a partial object exists: %v", keys)
			}
		})
	}
	// An application that truncates and writes again on the same
	// descriptor (after freeing space) stores its new content.
	t.Run("truncate to 0 and write again", func(t *testing.T) {
		f, err := os.OpenFile(fs.Path("retry.txt"), os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(big); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("write: %v; want ENOSPC", err)
		}
		if err := f.Truncate(0); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("second try"), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatalf("close after the rewrite: %v", err)
		}
		if got := objectBody(ctx, t, gw, bucket, "retry.txt"); string(got) != "second try" {
			t.Errorf("retry.txt in the bucket = %q", got)
		}
	})
	// The failed writes gave their staging space back…
	deadline := time.Now().Add(10 * time.Second)
	for usedBytes(t, cache) > 256<<10 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if used := usedBytes(t, cache); used > 256<<10 {
		entries, _ := filepath.Glob(filepath.Join(cache, "*", "*"))
		t.Errorf("the cache disk still holds %d bytes after the failed writes: %v", used, entries)
	}
	// A file that was never stored does not exist once closed (the kernel
	// may show its entry until entry_ttl).
	for {
		_, err := os.Stat(fs.Path("new.bin"))
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Errorf("new.bin after its failed write: %v; want ENOENT", err)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// … and the mount still works, for files that fit and for reads.
	if err := writeClose(fs.Path("small.txt"), os.O_CREATE|os.O_WRONLY, []byte("fits")); err != nil {
		t.Errorf("a small write after the full disk: %v", err)
	}
	if got := objectBody(ctx, t, gw, bucket, "small.txt"); string(got) != "fits" {
		t.Errorf("small.txt in the bucket = %q", got)
	}
	if got, err := os.ReadFile(fs.Path("keep.txt")); err != nil || !bytes.Equal(got, old) {
		t.Errorf("reading keep.txt through the mount: %d bytes, %v; want the previous version", len(got), err)
	}
}
