package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
)

// opResult runs op in a goroutine and returns its error, failing the test if
// it takes longer than limit: the kernel must never see a hang.
func opResult(t *testing.T, limit time.Duration, op func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("operation still blocked after %v", limit)
		return nil
	}
}

// TestPartitionedLeaderFailsClosedThenIsFenced puts a TCP fault proxy between
// A and the gateway. While A is cut off, its mutations fail with EIO (it
// cannot verify its epoch) and are not committed; B takes over; after the
// partition heals, A is fenced (EROFS) and B's data is intact.
func TestPartitionedLeaderFailsClosedThenIsFenced(t *testing.T) {
	gateway.ForEachServer(t, gateway.ErasureCodedServers, testPartitionedLeaderFailsClosedThenIsFenced)
}

func testPartitionedLeaderFailsClosedThenIsFenced(t *testing.T, gw *gateway.Gateway) {
	bucket := gateway.NewBucket(t, gw)
	proxy := harness.NewProxy(t, gw.Addr)
	a := harness.Mount(t, gw, bucket, "--endpoint", proxy.Endpoint(), "--token", "17", "--holder", "A",
		"--s3-timeout", "2s", "--meta-ttl", "0s", "--attr-ttl", "0s", "--entry-ttl", "0s")
	if err := os.WriteFile(a.Path("f"), []byte("A before the partition"), 0o644); err != nil {
		t.Fatal(err)
	}

	proxy.Cut(t)
	err := opResult(t, 90*time.Second, func() error {
		return writeClose(a.Path("f"), os.O_WRONLY|os.O_TRUNC, []byte("A during the partition"))
	})
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("write during the partition: err = %v, want EIO (fail closed)", err)
	}
	if got := readObject(t, gw, bucket, "f"); string(got.body) != "A before the partition" {
		t.Fatalf("object changed during the partition: %q", got.body)
	}

	b := harness.Mount(t, gw, bucket, "--token", "18", "--holder", "B")
	if err := os.WriteFile(b.Path("f"), []byte("B's"), 0o644); err != nil {
		t.Fatal(err)
	}

	proxy.Heal(t)
	err = opResult(t, 90*time.Second, func() error {
		return writeClose(a.Path("f"), os.O_WRONLY|os.O_TRUNC, []byte("A after healing"))
	})
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write after healing: err = %v, want EROFS", err)
	}
	if got := readObject(t, gw, bucket, "f"); string(got.body) != "B's" || got.epoch != "18" {
		t.Fatalf("f = %q stamped %q; want B's data stamped 18", got.body, got.epoch)
	}
}

// writeThenClose opens path for writing (with flag's extra bits), writes
// body and closes the file in a goroutine, whose close error the returned
// channel delivers: the commit of a large file, which may block, runs while
// the test goes on.
func writeThenClose(t *testing.T, path string, flag int, body []byte) chan error {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|flag, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(body); err != nil {
		f.Close()
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- f.Close() }()
	return closed
}

// uploadIDs lists the multipart uploads in progress of key.
func uploadIDs(ctx context.Context, t *testing.T, gw *gateway.Gateway, bucket, key string) []string {
	t.Helper()
	var ids []string
	for u := range gw.Client().ListIncompleteUploads(ctx, bucket, key, false) {
		if u.Err != nil {
			t.Fatalf("list uploads: %v", u.Err)
		}
		if u.Key == key {
			ids = append(ids, u.UploadID)
		}
	}
	return ids
}

// TestKillDuringMultipartUploadLeavesNoPartialObject kills A (-9) in the
// middle of a multipart upload: its close is held by a failpoint after the
// parts went out (they are uploaded while the file is written) and right
// before CompleteMultipartUpload. The key keeps its old content, the
// killed upload stays behind, a restarted mount with the same token and
// holder writes again, and `fencefs gc` aborts the leftover upload.
func TestKillDuringMultipartUploadLeavesNoPartialObject(t *testing.T) {
	gateway.ForEachServer(t, gateway.ErasureCodedServers, testKillDuringMultipartUploadLeavesNoPartialObject)
}

func testKillDuringMultipartUploadLeavesNoPartialObject(t *testing.T, gw *gateway.Gateway) {
	bucket := gateway.NewBucket(t, gw)
	pause := filepath.Join(t.TempDir(), "pause")
	a := harness.MountWith(t, gw, bucket, harness.Options{Failpoints: true,
		Env: []string{"FENCEFS_FAILPOINTS=after-validate@big=pause-file:" + pause}},
		"--token", "17", "--holder", "A")
	old := []byte("the old version")
	if err := os.WriteFile(a.Path("big"), old, 0o644); err != nil { // no pause file yet: not held
		t.Fatal(err)
	}
	if err := os.WriteFile(pause, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), (96<<20)/16)
	closed := writeThenClose(t, a.Path("big"), os.O_TRUNC, big)
	waitPaused(t, pause, closed)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	killed := uploadIDs(ctx, t, gw, bucket, "big")
	if len(killed) != 1 {
		t.Fatalf("uploads of big in progress at the failpoint: %v, want the one being committed", killed)
	}
	a.Kill()
	select {
	case err := <-closed:
		if err == nil {
			t.Fatal("close on a killed mount succeeded")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("close still blocked 30 s after the mount was killed")
	}
	if got := readObject(t, gw, bucket, "big"); !bytes.Equal(got.body, old) {
		t.Fatalf("after kill -9 mid-upload the object holds %d bytes (%.20q), want the old version", len(got.body), got.body)
	}
	_ = a.Unmount() // the dead mount

	a2 := harness.Mount(t, gw, bucket, "--token", "17", "--holder", "A")
	if err := os.WriteFile(a2.Path("big"), big, 0o644); err != nil {
		t.Fatalf("restarted mount cannot write: %v", err)
	}
	if got := readObject(t, gw, bucket, "big"); !bytes.Equal(got.body, big) {
		t.Fatalf("after restart the object holds %d bytes, want %d", len(got.body), len(big))
	}
	if left := uploadIDs(ctx, t, gw, bucket, "big"); !slices.Equal(left, killed) {
		t.Fatalf("uploads of big before gc: %v, want only the killed one %v", left, killed)
	}
	gcLeavesNoUploads(ctx, t, gw, bucket, "big")
}

// gcLeavesNoUploads runs `fencefs gc --upload-age 0s` on bucket and fails
// the test if an upload of any of keys is left after it.
func gcLeavesNoUploads(ctx context.Context, t *testing.T, gw *gateway.Gateway, bucket string, keys ...string) {
	t.Helper()
	out, err := harness.Run(ctx, t, gw, nil, "gc", bucket, "--endpoint", gw.Endpoint, "--upload-age", "0s")
	if err != nil {
		t.Fatalf("fencefs gc: %v\n%s", err, out)
	}
	for _, k := range keys {
		if left := uploadIDs(ctx, t, gw, bucket, k); len(left) != 0 {
			t.Fatalf("uploads of %s after fencefs gc: %v\n%s", k, left, out)
		}
	}
}

// TestKillDuringSweepThenNewerEpochCompletesIt leaves intents of epoch 17
// behind (A frozen with 40 closes in flight, held by the after-validate
// failpoint after their intents were written), kills the binder of 18 in
// the middle of its sweep, then binds 19: A's writes never land, and no
// intent of an older epoch is left.
func TestKillDuringSweepThenNewerEpochCompletesIt(t *testing.T) {
	gateway.ForEachServer(t, gateway.ErasureCodedServers, testKillDuringSweepThenNewerEpochCompletesIt)
}

func testKillDuringSweepThenNewerEpochCompletesIt(t *testing.T, gw *gateway.Gateway) {
	bucket := gateway.NewBucket(t, gw)
	pause := filepath.Join(t.TempDir(), "pause")
	a := harness.MountWith(t, gw, bucket, harness.Options{Failpoints: true,
		Env: []string{"FENCEFS_FAILPOINTS=after-validate=pause-file:" + pause}}, "--token", "17", "--holder", "A")
	const n = 40
	var paths []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("f%02d", i)
		if i%2 == 0 { // half exist before, half are creates
			if err := os.WriteFile(a.Path(name), []byte("A's first "+name), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		paths = append(paths, a.Path(name))
	}
	// The dirty handles live in another process: see holder. Their closes
	// write the intents, then stop at the failpoint.
	h := startHolder(t, paths)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := os.WriteFile(pause, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	closed := make(chan []syscall.Errno, 1)
	go func() { closed <- h.closeAll(t, n) }()
	// Wait until A's intents are written, then freeze A.
	for intentKeyCount(ctx, t, gw, bucket) < n {
		if ctx.Err() != nil {
			t.Fatalf("A's intents never appeared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := a.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}

	// Start raising to 18 and kill the raiser as soon as the register moved.
	raise := harness.Command(t, gw, "epoch", "raise", bucket, "18", "--endpoint", gw.Endpoint, "--holder", "B")
	if err := raise.Start(); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(string(objectBody(ctx, t, gw, bucket, ".fencefs/epoch")), `"epoch":18`) {
		if ctx.Err() != nil {
			t.Fatalf("register never reached 18")
		}
		time.Sleep(time.Millisecond)
	}
	_ = raise.Process.Kill()
	_ = raise.Wait()

	out, err := harness.Run(ctx, t, gw, nil, "epoch", "raise", bucket, "19", "--endpoint", gw.Endpoint, "--holder", "C")
	if err != nil {
		t.Fatalf("raise 19: %v\n%s", err, out)
	}
	for _, k := range listKeys(ctx, t, gw, bucket, ".fencefs/intents/") {
		if !strings.HasPrefix(k, ".fencefs/intents/00000000000000000019/") {
			t.Errorf("intent of an older epoch left after epoch 19 became active: %s", k)
		}
	}
	_ = a.Signal(syscall.SIGCONT)
	if err := os.Remove(pause); err != nil {
		t.Fatal(err)
	}
	for i, errno := range <-closed {
		if errno != syscall.EROFS {
			t.Errorf("A's close of f%02d after the takeover: %v, want EROFS", i, errno)
		}
	}
	for i := 0; i < n; i++ {
		got := readObject(t, gw, bucket, fmt.Sprintf("f%02d", i))
		if strings.HasPrefix(string(got.body), "A's stale") {
			t.Errorf("f%02d: A's stale write landed (stamp %s)", i, got.epoch)
		}
	}
	// A, resumed, may write fresh intents for its (refused) commits; gc
	// clears what a fenced writer leaves behind.
	if out, err := harness.Run(ctx, t, gw, nil, "gc", bucket, "--endpoint", gw.Endpoint); err != nil {
		t.Fatalf("fencefs gc: %v\n%s", err, out)
	}
	for _, k := range listKeys(ctx, t, gw, bucket, ".fencefs/intents/") {
		if !strings.HasPrefix(k, ".fencefs/intents/00000000000000000019/") {
			t.Errorf("intent of an older epoch left after gc: %s", k)
		}
	}
}

// intentKeyCount counts the keys named by the bucket's intent objects (a
// strict mount keeps its intents in one journal object).
func intentKeyCount(ctx context.Context, t *testing.T, gw *gateway.Gateway, bucket string) int {
	t.Helper()
	n := 0
	for _, k := range listKeys(ctx, t, gw, bucket, ".fencefs/intents/") {
		var doc struct {
			Keys []struct{} `json:"keys"`
		}
		if json.Unmarshal(objectBody(ctx, t, gw, bucket, k), &doc) == nil {
			n += len(doc.Keys)
		}
	}
	return n
}

func listKeys(ctx context.Context, t *testing.T, gw *gateway.Gateway, bucket, prefix string) []string {
	t.Helper()
	var keys []string
	for o := range gw.Client().ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("list %s: %v", prefix, o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

func objectBody(ctx context.Context, t *testing.T, gw *gateway.Gateway, bucket, key string) []byte {
	t.Helper()
	o, err := gw.Client().GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil
	}
	defer o.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(o); err != nil {
		return nil
	}
	return buf.Bytes()
}
