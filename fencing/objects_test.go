package fencing

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
)

func TestFetchSpoolsLargeContentInTheSpoolDir(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	s := memstore.New()
	dir := filepath.Join(t.TempDir(), "cache")
	o := objects{store: s, spoolDir: dir}
	for _, tc := range []struct {
		name     string
		size     int
		wantFile bool
	}{
		{"small: in memory", 1 << 10, false},
		{"larger than fetchInMemory: a file in the spool dir", fetchInMemory + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info := rawPut(t, ctx, s, "k", strings.Repeat("x", tc.size))
			body, err := o.fetch(ctx, "k", objstore.NormalizeETag(info.ETag), info.Size)
			if err != nil {
				t.Fatal(err)
			}
			files, _ := filepath.Glob(filepath.Join(dir, "fencefs-spool-*"))
			if got := len(files) == 1; got != tc.wantFile {
				t.Fatalf("spool files %v, want one: %v", files, tc.wantFile)
			}
			b := make([]byte, 1)
			if _, err := body.ReadAt(b, info.Size-1); err != nil || b[0] != 'x' {
				t.Fatalf("ReadAt(last) = %q, %v", b, err)
			}
			if err := body.Close(); err != nil {
				t.Fatal(err)
			}
			if files, _ := filepath.Glob(filepath.Join(dir, "fencefs-spool-*")); len(files) != 0 {
				t.Fatalf("Close left %v", files)
			}
		})
	}
	info := rawPut(t, ctx, s, "k", "short")
	if _, err := o.fetch(ctx, "k", objstore.NormalizeETag(info.ETag), 99); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("fetch of another size = %v, want ErrPrecondition", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("a failed fetch left %d files", len(left))
	}
}

func TestForEachBoundsParallelismAndStopsAtTheFirstError(t *testing.T) {
	boom := errors.New("boom")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		n       int
		failAt  int // -1: none
		want    error
		wantAll bool // every index ran
	}{
		{"no work", context.Background(), 0, -1, nil, true},
		{"all succeed", context.Background(), 50, -1, nil, true},
		{"the first error is returned and the rest are not started", context.Background(), 1000, 3, boom, false},
		{"a done context runs nothing", cancelled, 10, -1, context.Canceled, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var running, peak, ran atomic.Int32
			err := forEach(tc.ctx, tc.n, func(ctx context.Context, i int) error {
				ran.Add(1)
				r := running.Add(1)
				defer running.Add(-1)
				for {
					p := peak.Load()
					if r <= p || peak.CompareAndSwap(p, r) {
						break
					}
				}
				if i == tc.failAt {
					return boom
				}
				if tc.failAt >= 0 {
					<-ctx.Done() // the others wait until the error cancels them
					return ctx.Err()
				}
				return nil
			})
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("forEach = %v, want %v", err, tc.want)
			}
			if p := peak.Load(); p > parallelism {
				t.Errorf("%d calls ran at once, more than %d", p, parallelism)
			}
			if all := int(ran.Load()) == tc.n; all != tc.wantAll {
				t.Errorf("%d of %d calls ran; want all: %v", ran.Load(), tc.n, tc.wantAll)
			}
		})
	}
}
