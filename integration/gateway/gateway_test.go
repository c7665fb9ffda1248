package gateway

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

func TestBucketNameIsValidS3Name(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$`)
	for _, name := range []string{
		"TestX", "TestA/sub_test#01", strings.Repeat("VeryLong", 20), "___", "Test--Double",
	} {
		got := bucketName(name, 7)
		if !valid.MatchString(got) || strings.Contains(got, "--") {
			t.Errorf("bucketName(%q) = %q: not a valid bucket name", name, got)
		}
	}
}

func TestGatewayServesObjectsAndStops(t *testing.T) {
	g := ForTest(t)
	bucket := NewBucket(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := g.Client()
	body := []byte("hello gateway")
	if _, err := c.PutObject(ctx, bucket, "k", bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		t.Fatalf("put: %v", err)
	}
	o, err := c.GetObject(ctx, bucket, "k", minio.GetObjectOptions{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	got, err := io.ReadAll(o)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read back %q, %v; want %q", got, err, body)
	}
	if err := g.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := c.StatObject(ctx, bucket, "k", minio.StatObjectOptions{}); err == nil {
		t.Fatalf("gateway still answering after Stop")
	}
}
