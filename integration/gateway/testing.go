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

// Kind names an S3 server the tests run against.
type Kind string

const (
	// Versity is the Versity S3 gateway (posix backend).
	Versity Kind = "versitygw"
	// MinIO is a single MinIO server with one drive.
	MinIO Kind = "minio"
	// MinIOErasure is a single MinIO server with 4 drives: one erasure set,
	// every object split into data and parity shards.
	MinIOErasure Kind = "minio-4drives"
)

// Server kinds for ForEachServer. AllServers: every server and MinIO
// shape (cheap tests: the probe, the store's conformance suite).
// ErasureCodedServers: the gateway and MinIO's production shape, for the
// fencing table and the failover tests. SingleDriveServers: the gateway and
// the smallest MinIO, for what does not depend on how MinIO stores an
// object (gc, the operation table, real programs, the listing's
// metadata). Each MinIO subtest adds its server's start (about a second)
// and the test's own time to `make test`.
var (
	AllServers          = []Kind{Versity, MinIO, MinIOErasure}
	ErasureCodedServers = []Kind{Versity, MinIOErasure}
	SingleDriveServers  = []Kind{Versity, MinIO}
)

// DeleteIgnoresIfMatch reports whether the server deletes an object even
// when a DELETE's If-Match names another ETag — what MinIO's last
// community release does (docs/DESIGN.md §6; fencefs's probe detects it
// and writes deletes as tombstones there). Tests use it to expect the
// probe's finding, never to skip a check.
func (g *Gateway) DeleteIgnoresIfMatch() bool { return g.Kind != Versity }

// StartKind starts a server of kind with its data under dir (a new
// temporary directory, removed by Stop, when empty).
func StartKind(ctx context.Context, kind Kind, dir string) (*Gateway, error) {
	switch kind {
	case Versity:
		return Start(ctx, Options{Dir: dir})
	case MinIO:
		return StartMinIO(ctx, MinIOOptions{Dir: dir})
	case MinIOErasure:
		return StartMinIO(ctx, MinIOOptions{Dir: dir, Drives: 4})
	}
	return nil, fmt.Errorf("unknown server kind %q", kind)
}

// ForTest starts a Versity gateway for the test and stops it in t.Cleanup;
// see ForKind.
func ForTest(t testing.TB) *Gateway {
	t.Helper()
	return ForKind(t, Versity)
}

// ForKind starts a server of kind for the test and stops it in t.Cleanup.
// Without its binary it skips (fails in CI). Every test gets its own server
// and data directory, so no state leaks between tests: a gateway starts in
// ~0.2 s, a MinIO server in about a second.
func ForKind(t testing.TB, kind Kind) *Gateway {
	t.Helper()
	find := FindBinary
	if kind != Versity {
		find = FindMinIO
	}
	if _, err := find(); err != nil {
		SkipOrFail(t, "%v", err)
	}
	// A hang guard, not a speed bound: while another test writes a GiB to
	// disk on a loaded 2-core machine, a gateway took over 30 s to answer.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	g, err := StartKind(ctx, kind, t.TempDir())
	if err != nil {
		t.Fatalf("start %s: %v", kind, err)
	}
	t.Cleanup(func() {
		if err := g.Stop(); err != nil {
			t.Errorf("stop %s: %v", kind, err)
		}
	})
	return g
}

// ForEachServer runs f as a subtest named after each kind, each with a
// server of its own (ForKind): the same test, written once, holds on each.
func ForEachServer(t *testing.T, kinds []Kind, f func(t *testing.T, gw *Gateway)) {
	t.Helper()
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) { f(t, ForKind(t, kind)) })
	}
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
