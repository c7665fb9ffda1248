package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
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

func TestEveryServerServesObjectsAndStops(t *testing.T) {
	ForEachServer(t, AllServers, func(t *testing.T, g *Gateway) {
		if g.Kind == MinIOErasure {
			for i := 1; i <= 4; i++ {
				if _, err := os.Stat(filepath.Join(g.Dir, fmt.Sprintf("d%d", i), ".minio.sys")); err != nil {
					t.Errorf("drive %d of the erasure set is not in use: %v", i, err)
				}
			}
		}
		bucket := NewBucket(t, g)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c := g.Client()
		body := []byte("hello " + string(g.Kind))
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
			t.Fatalf("%s still answering after Stop", g.Kind)
		}
	})
}
