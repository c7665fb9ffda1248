package fencing

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
	s3store "github.com/fencefs/fencefs/objstore/s3"
)

// eachStore runs f against the in-memory store and against a real Versity
// gateway (skipped without the binary locally, failed in CI). newStore
// returns a store on a fresh, empty bucket each time it is called.
func eachStore(t *testing.T, f func(t *testing.T, newStore func() objstore.Store, real bool)) {
	t.Run("memstore", func(t *testing.T) {
		t.Parallel()
		f(t, func() objstore.Store { return memstore.New() }, false)
	})
	t.Run("gateway", func(t *testing.T) {
		gw := gateway.ForTest(t)
		f(t, func() objstore.Store { return gatewayStore(t, gw, gateway.NewBucket(t, gw)) }, true)
	})
}

// gatewayStore returns an S3 store on bucket of gw.
func gatewayStore(t testing.TB, gw *gateway.Gateway, bucket string) objstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := s3store.New(ctx, s3store.Config{Endpoint: gw.Endpoint, Bucket: bucket, Region: gw.Region,
		AccessKey: gw.AccessKey, SecretKey: gw.SecretKey, PathStyle: true})
	if err != nil {
		t.Fatalf("s3 store: %v", err)
	}
	return s
}

// testCtx is a bounded context for one test.
func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newGuard creates a Guard for tests and closes it at cleanup.
func newGuard(t testing.TB, store objstore.Store, cfg Config) *Guard {
	t.Helper()
	if cfg.IntentLinger == 0 {
		cfg.IntentLinger = time.Hour // keep intents until Close: sweeps always see them
	}
	g, err := New(store, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	return g
}

func bind(t testing.TB, ctx context.Context, g *Guard, token uint64) uint64 {
	t.Helper()
	n, err := g.Bind(ctx, token)
	if err != nil {
		t.Fatalf("Bind(%d) as %s: %v", token, g.Holder(), err)
	}
	return n
}

// rawPut writes key directly (unfenced), as pre-existing data.
func rawPut(t testing.TB, ctx context.Context, s objstore.Store, key, body string) objstore.ObjectInfo {
	t.Helper()
	info, err := s.Put(ctx, key, strings.NewReader(body), int64(len(body)), objstore.PutOptions{})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return info
}

// read returns key's content and info; exists=false when absent.
func read(t testing.TB, ctx context.Context, s objstore.Store, key string) (string, objstore.ObjectInfo, bool) {
	t.Helper()
	c, info, ok, err := readE(ctx, s, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return c, info, ok
}

// readE is read for goroutines other than the test's.
func readE(ctx context.Context, s objstore.Store, key string) (string, objstore.ObjectInfo, bool, error) {
	rc, info, err := s.Get(ctx, key, objstore.GetOptions{})
	if errors.Is(err, objstore.ErrNotFound) {
		return "", objstore.ObjectInfo{}, false, nil
	}
	if err != nil {
		return "", objstore.ObjectInfo{}, false, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return "", objstore.ObjectInfo{}, false, err
	}
	return string(b), info, true, nil
}

func body(s string) (io.ReaderAt, int64) { return bytes.NewReader([]byte(s)), int64(len(s)) }

// gput is Guard.Put of a string.
func gput(ctx context.Context, g *Guard, key, content string, base Version) (objstore.ObjectInfo, error) {
	r, n := body(content)
	return g.Put(ctx, key, r, n, base, Meta{"mode": "33188"})
}

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}
