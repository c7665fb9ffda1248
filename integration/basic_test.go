package integration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
)

func TestFileWrittenThroughMountIsReadableWithPlainS3Client(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	fs := harness.Mount(t, gw, bucket, "--token", "17")

	body := bytes.Repeat([]byte("fencefs end-to-end\n"), 1000)
	if err := os.WriteFile(fs.Path("hello.txt"), body, 0o644); err != nil {
		t.Fatalf("write through mount: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o, err := gw.Client().GetObject(ctx, bucket, "hello.txt", minio.GetObjectOptions{})
	if err != nil {
		t.Fatalf("get object: %v", err)
	}
	got, err := io.ReadAll(o)
	if err != nil {
		t.Fatalf("read object: %v", err)
	}
	if !bytes.Equal(got, body) {
		t.Fatalf("object holds %d bytes, want the %d written through the mount", len(got), len(body))
	}
	st, err := o.Stat()
	if err != nil {
		t.Fatalf("stat: %v", err)
	}
	if e := st.UserMetadata["Fencefs-Epoch"]; e != "17" {
		t.Errorf("object stamped with epoch %q, want 17 (metadata %v)", e, st.UserMetadata)
	}

	// And the other way: an object put by a plain client reads through the mount.
	other := []byte("written by a plain S3 client")
	if _, err := gw.Client().PutObject(ctx, bucket, "dir/plain.txt", bytes.NewReader(other), int64(len(other)), minio.PutObjectOptions{}); err != nil {
		t.Fatalf("put: %v", err)
	}
	got, err = os.ReadFile(fs.Path("dir", "plain.txt"))
	if err != nil || !bytes.Equal(got, other) {
		t.Fatalf("read through mount = %q, %v; want %q", got, err, other)
	}
}

func TestStaleMountIsRefusedAfterNewerTokenBinds(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	a := harness.Mount(t, gw, bucket, "--token", "17", "--holder", "A")
	if err := os.WriteFile(a.Path("leader.txt"), []byte("A was here"), 0o644); err != nil {
		t.Fatalf("A writes while leader: %v", err)
	}
	b := harness.Mount(t, gw, bucket, "--token", "18", "--holder", "B")
	if err := os.WriteFile(b.Path("leader.txt"), []byte("B is leader"), 0o644); err != nil {
		t.Fatalf("B writes: %v", err)
	}
	err := os.WriteFile(a.Path("leader.txt"), []byte("stale A"), 0o644)
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("stale A's write: err = %v, want EROFS", err)
	}
	got, err := os.ReadFile(b.Path("leader.txt"))
	if err != nil || string(got) != "B is leader" {
		t.Fatalf("B's data = %q, %v; want intact", got, err)
	}
	// Readers are never fenced.
	if got, err := os.ReadFile(a.Path("leader.txt")); err != nil || len(got) == 0 {
		t.Fatalf("stale A can no longer read: %q, %v", got, err)
	}
}
