package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"
)

// fsyncPath opens path read-only and fsyncs it: what stores a pending
// chmod/chown/utimens (mount.attr_writeback) at once.
func fsyncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeClose opens path with flags, writes data and closes it, returning the
// first error (close(2) reports a failed commit).
func writeClose(path string, flags int, data []byte) error {
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	return cerr
}

// objectState is what a plain S3 client sees at a key. A fencefs tombstone
// (a deleted key, see docs/DESIGN.md §9) counts as absent.
type objectState struct {
	exists    bool
	tombstone bool
	body      []byte
	epoch     string
	holder    string
}

func readObject(t *testing.T, gw *gateway.Gateway, bucket, key string) objectState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o, err := gw.Client().GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer o.Close()
	st, err := o.Stat()
	if minio.ToErrorResponse(err).Code == "NoSuchKey" {
		return objectState{}
	}
	if err != nil {
		t.Fatalf("stat %s: %v", key, err)
	}
	if st.UserMetadata["Fencefs-Tombstone"] == "1" {
		return objectState{tombstone: true, epoch: st.UserMetadata["Fencefs-Epoch"]}
	}
	body, err := io.ReadAll(o)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return objectState{exists: true, body: body,
		epoch: st.UserMetadata["Fencefs-Epoch"], holder: st.UserMetadata["Fencefs-Holder"]}
}

// TestStaleLeaderEveryMutationFailsWithEROFS is the stale-leader story: A
// (token 17) writes; B binds 18; every mutating operation of A fails with
// EROFS, B's data stays intact, and A can still read.
func TestStaleLeaderEveryMutationFailsWithEROFS(t *testing.T) {
	gateway.ForEachServer(t, gateway.ErasureCodedServers, testStaleLeaderEveryMutationFailsWithEROFS)
}

func testStaleLeaderEveryMutationFailsWithEROFS(t *testing.T, gw *gateway.Gateway) {
	bucket := gateway.NewBucket(t, gw)
	a := harness.Mount(t, gw, bucket, "--token", "17", "--holder", "A")

	// A sets up the tree while it is the leader.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(a.Path("file"), []byte("A's file"), 0o644))
	must(os.WriteFile(a.Path("victim"), []byte("to be unlinked"), 0o644))
	must(os.Mkdir(a.Path("emptydir"), 0o755))
	must(os.Mkdir(a.Path("dir"), 0o755))
	must(os.WriteFile(a.Path("dir", "x"), []byte("x"), 0o644))

	b := harness.Mount(t, gw, bucket, "--token", "18", "--holder", "B")
	must(os.WriteFile(b.Path("file"), []byte("B's file"), 0o644))

	ops := []struct {
		name string
		op   func() error
	}{
		{"overwrite and close", func() error { return writeClose(a.Path("file"), os.O_WRONLY|os.O_TRUNC, []byte("stale")) }},
		{"append and close", func() error { return writeClose(a.Path("file"), os.O_WRONLY|os.O_APPEND, []byte("stale")) }},
		{"create", func() error { return writeClose(a.Path("new"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, []byte("stale")) }},
		{"truncate", func() error { return os.Truncate(a.Path("file"), 1) }},
		{"unlink", func() error { return os.Remove(a.Path("victim")) }},
		{"rename", func() error { return os.Rename(a.Path("victim"), a.Path("renamed")) }},
		{"mkdir", func() error { return os.Mkdir(a.Path("newdir"), 0o755) }},
		{"rmdir", func() error { return unix.Rmdir(a.Path("emptydir")) }},
		{"chmod", func() error { return os.Chmod(a.Path("file"), 0o600) }},
		{"chown", func() error { return os.Chown(a.Path("file"), 1234, 1234) }},
		{"utimes", func() error { return os.Chtimes(a.Path("file"), time.Unix(1, 0), time.Unix(1, 0)) }},
		{"setxattr", func() error { return unix.Setxattr(a.Path("file"), "user.color", []byte("red"), 0) }},
		{"symlink", func() error { return os.Symlink("file", a.Path("link")) }},
	}
	for _, tc := range ops {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.op(); !errors.Is(err, syscall.EROFS) {
				t.Fatalf("stale mount: %s: err = %v, want EROFS", tc.name, err)
			}
		})
	}

	if got := readObject(t, gw, bucket, "file"); string(got.body) != "B's file" || got.epoch != "18" {
		t.Errorf("B's file = %q stamped %q, want B's content stamped 18", got.body, got.epoch)
	}
	for _, key := range []string{"victim", "dir/x", "emptydir/"} {
		if !readObject(t, gw, bucket, key).exists {
			t.Errorf("%s was removed by the stale mount", key)
		}
	}
	for _, key := range []string{"new", "renamed", "newdir/", "link"} {
		if readObject(t, gw, bucket, key).exists {
			t.Errorf("%s was created by the stale mount", key)
		}
	}
	if got, err := os.ReadFile(a.Path("file")); err != nil || string(got) != "B's file" {
		t.Errorf("stale A reads %q, %v; want B's current content (readers are never fenced)", got, err)
	}
	state, err := xattr(a.Dir, "user.fencefs.state")
	if err != nil || state != "fenced" {
		t.Errorf("A's user.fencefs.state = %q, %v; want fenced", state, err)
	}
}

func xattr(path, name string) (string, error) {
	buf := make([]byte, 256)
	n, err := unix.Getxattr(path, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// TestFrozenLeaderCannotLandWritesAfterTakeover freezes A (SIGSTOP) with a
// dirty handle open and, separately, in the middle of a large multipart
// upload; B binds 18 and writes the same files; after SIGCONT, A's close
// reports failure and no byte of A's is in the bucket.
func TestFrozenLeaderCannotLandWritesAfterTakeover(t *testing.T) {
	gateway.ForEachServer(t, gateway.ErasureCodedServers, testFrozenLeaderCannotLandWritesAfterTakeover)
}

func testFrozenLeaderCannotLandWritesAfterTakeover(t *testing.T, gw *gateway.Gateway) {
	bucket := gateway.NewBucket(t, gw)
	// A streams large files with a 16 MiB staging bound: parts of the big
	// file have left its local disk when it is frozen.
	a := harness.Mount(t, gw, bucket, "--token", "17", "--holder", "A", "--stream-staging-mib", "16")
	// B is mounted now, read-only, and takes over later through the root
	// xattr: starting a process while A is frozen would hang, since exec
	// closes the test's inherited descriptors on A's mount (a FUSE flush).
	b := harness.Mount(t, gw, bucket, "--holder", "B")

	// A dirty handle: written, not yet closed.
	dirty, err := os.OpenFile(a.Path("dirty"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dirty.Write([]byte("A's unflushed bytes")); err != nil {
		t.Fatal(err)
	}

	// A large file: its multipart upload starts while it is written and
	// completes at close.
	big := bytes.Repeat([]byte("A-big-"), (96<<20)/6)
	closed := writeThenClose(t, a.Path("big"), os.O_CREATE|os.O_TRUNC, big)

	// Freeze A as soon as its upload is under way (or its close returned).
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	uploading := false
	for !uploading {
		select {
		case err := <-closed:
			closed <- err
			uploading = true // upload finished before we caught it: still freeze
		default:
		}
		for u := range gw.Client().ListIncompleteUploads(ctx, bucket, "big", false) {
			if u.Err == nil && u.Key == "big" {
				uploading = true
			}
		}
		if ctx.Err() != nil {
			t.Fatal("A's upload never started")
		}
		if !uploading {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := a.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := true
	defer func() {
		if frozen {
			_ = a.Signal(syscall.SIGCONT)
		}
	}()
	bigBefore := readObject(t, gw, bucket, "big")

	if err := unix.Setxattr(b.Dir, "user.fencefs.token", []byte("18"), 0); err != nil {
		t.Fatalf("B binds 18: %v", err)
	}
	if err := os.WriteFile(b.Path("dirty"), []byte("B's bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.Path("other"), []byte("B's other"), 0o644); err != nil {
		t.Fatal(err)
	}

	if err := a.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	frozen = false
	if err := dirty.Close(); !errors.Is(err, syscall.EROFS) {
		t.Errorf("A's close of the dirty handle after takeover: err = %v, want EROFS", err)
	}
	bigErr := <-closed

	if got := readObject(t, gw, bucket, "dirty"); string(got.body) != "B's bytes" || got.epoch != "18" {
		t.Errorf("dirty = %q stamped %q, want B's bytes stamped 18", got.body, got.epoch)
	}
	if got := readObject(t, gw, bucket, "other"); string(got.body) != "B's other" {
		t.Errorf("other = %q, want B's", got.body)
	}
	bigAfter := readObject(t, gw, bucket, "big")
	switch {
	case bigBefore.exists:
		// A's upload completed before the freeze: it is ordered before B.
		if bigErr != nil {
			t.Errorf("big committed before the freeze but close reported %v", bigErr)
		}
		// Its content must not change. Its stamp may: when A's intent
		// for it was still lingering, B's takeover sweep rewrote it in
		// place (same bytes, new ETag), stamped 18 (docs/DECISIONS.md,
		// "Sweeps re-stamp").
		if !bytes.Equal(bigAfter.body, bigBefore.body) || !bytes.Equal(bigAfter.body, big) {
			t.Errorf("big changed after the freeze: %d bytes stamped %q → %d bytes stamped %q", len(bigBefore.body), bigBefore.epoch, len(bigAfter.body), bigAfter.epoch)
		}
		if bigAfter.epoch != bigBefore.epoch && bigAfter.epoch != "18" {
			t.Errorf("big re-stamped %q → %q; only B's sweep (18) may re-stamp it", bigBefore.epoch, bigAfter.epoch)
		}
	case bigAfter.exists && bigAfter.epoch == "18" && bytes.Equal(bigAfter.body, big):
		// A's Complete was already at the gateway when A froze (the key
		// was read absent while the gateway was still assembling it): it
		// landed before B's sweep reached the key, and the sweep re-stamped
		// it in place — ordered before B became active. Had it arrived
		// after the sweep, the sweep's tombstone would have refused it, and
		// only a sweep writes A's bytes with B's epoch.
		if bigErr != nil {
			t.Logf("A's big landed before the takeover; its close reported %v", bigErr)
		}
	case bigAfter.exists:
		t.Errorf("A's big file (%d bytes, epoch %s) landed after B became active", len(bigAfter.body), bigAfter.epoch)
	default:
		if !errors.Is(bigErr, syscall.EROFS) {
			t.Errorf("A's close of the big file after takeover: err = %v, want EROFS", bigErr)
		}
	}
	// Every object in the bucket is B's, or A's from before the freeze.
	for o := range gw.Client().ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if len(o.Key) > 8 && o.Key[:8] == ".fencefs" {
			continue
		}
		st := readObject(t, gw, bucket, o.Key)
		if e, _ := strconv.Atoi(st.epoch); st.exists && e != 18 && !(o.Key == "big" && bigBefore.exists) {
			t.Errorf("object %s stamped epoch %q after B's takeover: %s", o.Key, st.epoch, fmt.Sprintf("%.40q", st.body))
		}
	}
}

// TestAppendAfterAnotherMountsAppendKeepsBoth: A's kernel caches the file's
// size, B appends, then A appends with O_APPEND. A's record must go after
// B's (the kernel's offset for the append comes from its stale cached size;
// the mount appends at the end of the version it pinned at open instead).
func TestAppendAfterAnotherMountsAppendKeepsBoth(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	a := harness.Mount(t, gw, bucket, "--token", "1", "--holder", "A",
		"--attr-ttl", "30s", "--entry-ttl", "30s", "--meta-ttl", "0s")
	b := harness.Mount(t, gw, bucket, "--holder", "B", "--meta-ttl", "0s", "--attr-ttl", "0s", "--entry-ttl", "0s")
	if err := os.WriteFile(a.Path("log"), []byte("first\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.Path("log")); err != nil { // A's kernel caches size 6
		t.Fatal(err)
	}
	if err := unix.Setxattr(b.Dir, "user.fencefs.token", []byte("auto"), 0); err != nil {
		t.Fatal(err)
	}
	if err := writeClose(b.Path("log"), os.O_WRONLY|os.O_APPEND, []byte("from B\n")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(a.Dir, "user.fencefs.token", []byte("auto"), 0); err != nil {
		t.Fatal(err)
	}
	if err := writeClose(a.Path("log"), os.O_WRONLY|os.O_APPEND, []byte("from A\n")); err != nil {
		t.Fatal(err)
	}
	if got := readObject(t, gw, bucket, "log"); string(got.body) != "first\nfrom B\nfrom A\n" {
		t.Fatalf("log = %q, want both appends in order", got.body)
	}
}
