package s3

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/objstore"
	"github.com/minio/minio-go/v7"
)

// The emulated conditional copy relies on the gateway honouring
// x-amz-copy-source-if-match on UploadPartCopy (Copy's pinned HEAD alone
// would leave a window): prove it on the real server, below Copy.
func TestUploadPartCopyHonoursSourceIfMatch(t *testing.T) {
	gw := gateway.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := New(ctx, Config{Endpoint: gw.Endpoint, Bucket: gateway.NewBucket(t, gw), Region: gw.Region,
		AccessKey: gw.AccessKey, SecretKey: gw.SecretKey, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	v1, err := s.Put(ctx, "src", bytes.NewReader([]byte("version one")), 11, objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "src", bytes.NewReader([]byte("version two")), 11, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	id, err := s.core.NewMultipartUpload(ctx, s.cfg.Bucket, "dst", minio.PutObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.AbortUpload(context.WithoutCancel(ctx), "dst", id)
	_, err = s.copyPart(ctx, "src", v1.ETag, "dst", id, 1, 0, 11)
	if !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("UploadPartCopy pinned to a replaced source version: %v", err)
	}
	v2, err := s.Stat(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	cp, err := s.copyPart(ctx, "src", v2.ETag, "dst", id, 1, 0, 11)
	if err != nil {
		t.Fatalf("UploadPartCopy pinned to the current version: %v", err)
	}
	if cp.ETag != v2.ETag {
		t.Fatalf("a whole-object part's ETag %s is not the MD5 %s", cp.ETag, v2.ETag)
	}
}
