package gateway

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// InCI reports whether the CI environment variable is set: then a missing
// prerequisite (gateway binary, /dev/fuse, fusermount3) fails a test instead
// of skipping it.
func InCI() bool { return os.Getenv("CI") != "" }

// SkipOrFail skips the test with a message naming the missing prerequisite,
// or fails it when running in CI.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("%s (CI is set: a missing prerequisite is a failure, not a skip)", msg)
	}
	t.Skipf("%s (skipping; this fails when CI is set)", msg)
}

// ForTest starts a gateway for the test and stops it in t.Cleanup. Without a
// gateway binary it skips (fails in CI). Starting one takes ~0.2 s, so every
// test gets its own server and data directory: no state leaks between tests.
func ForTest(t testing.TB) *Gateway {
	t.Helper()
	bin, err := FindBinary()
	if err != nil {
		SkipOrFail(t, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := Start(ctx, Options{Bin: bin, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("start gateway: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Stop(); err != nil {
			t.Errorf("stop gateway: %v", err)
		}
	})
	return g
}

var bucketSeq atomic.Int64

// NewBucket creates a bucket with a fresh name derived from the test's name
// and returns the name.
func NewBucket(t testing.TB, g *Gateway) string {
	t.Helper()
	name := bucketName(t.Name(), bucketSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.CreateBucket(ctx, name); err != nil {
		t.Fatalf("create bucket %q: %v", name, err)
	}
	return name
}

// bucketName makes a valid S3 bucket name (3-63 chars of a-z0-9-) from a
// test name and a sequence number.
func bucketName(test string, seq int64) string {
	var b strings.Builder
	for _, r := range strings.ToLower(test) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	for strings.Contains(s, "--") {
		s = strings.ReplaceAll(s, "--", "-")
	}
	suffix := fmt.Sprintf("-%d", seq)
	if max := 63 - len(suffix); len(s) > max {
		s = strings.TrimRight(s[:max], "-")
	}
	if s == "" {
		s = "b"
	}
	return s + suffix
}
