package s3_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/storetest"
)

// TestPlainCopyOfALargeSourceSpoolsInTheSpoolDir checks that a
// plain-shaped Copy of a source too large for memory keeps it in
// Config.SpoolDir (created on first use) and leaves nothing there.
func TestPlainCopyOfALargeSourceSpoolsInTheSpoolDir(t *testing.T) {
	gw := gateway.ForTest(t)
	cfg := config(t, gw)
	cfg.SpoolDir = filepath.Join(t.TempDir(), "cache")
	s := newStore(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	data := bytes.Repeat([]byte("0123456789abcdef"), (33<<20)/16) // above the 32 MiB kept in memory
	src := storetest.MustPut(t, ctx, s, "big", data, objstore.PutOptions{Shape: objstore.ShapePlain})
	out, err := s.Copy(ctx, "big", src.ETag, "big.copy", objstore.PutOptions{Shape: objstore.ShapePlain})
	if err != nil {
		t.Fatal(err)
	}
	if objstore.NormalizeETag(out.ETag) != objstore.NormalizeETag(src.ETag) {
		t.Errorf("the plain copy has ETag %s, the plain source %s: the content differs", out.ETag, src.ETag)
	}
	left, err := os.ReadDir(cfg.SpoolDir)
	if err != nil {
		t.Fatalf("the spool dir was not used: %v", err)
	}
	if len(left) != 0 {
		t.Errorf("the copy left %d files in the spool dir", len(left))
	}
}
