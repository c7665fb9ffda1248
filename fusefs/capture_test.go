package fusefs

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// countingBody counts the bytes read from a GET's body.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// TestAStreamAdoptedAtOpenServesTheVersionItCaptured: a GET sent at open
// (capture.go) serves the handle's sequential reads of that version to the
// end, even when the object is replaced before the first read; it reads
// nothing before the first read, and its end frees its slot.
func TestAStreamAdoptedAtOpenServesTheVersionItCaptured(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		var read atomic.Int64
		cs := &countingStore{Store: store}
		cs.body = func(_ context.Context, rc io.ReadCloser) io.ReadCloser { return countingBody{rc, &read} }
		fsys := newFilesystem(Options{Store: cs}, t.TempDir())
		old := pattern(51, 9<<20+17)
		putObj(t, store, "obj", old)

		ctx, stop := context.WithCancel(fsys.ctx)
		body, info, err := cs.Get(ctx, "obj", objstore.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := newReader(fsys, info.ETag, info.Size)
		fsys.capturedGets.Add(1)
		r.adopt("obj", body, ctx, stop)
		putObj(t, store, "obj", pattern(52, 3<<20)) // replaced before the first read

		time.Sleep(50 * time.Millisecond)
		if n := read.Load(); n != 0 {
			t.Fatalf("the stream read %d bytes before any read asked", n)
		}
		for off := 0; off < len(old); off += 128 << 10 {
			if err := kernelRead(t, r, "obj", old, off, min(128<<10, len(old)-off)); err != nil {
				t.Fatalf("read after the object was replaced: %v", err)
			}
		}
		if n := cs.gets.Load(); n != 1 {
			t.Fatalf("%d GETs, want the one sent at open", n)
		}
		r.close()
		deadline := time.Now().Add(10 * time.Second)
		for fsys.capturedGets.Load() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d captured GETs still counted after the reader closed", fsys.capturedGets.Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}
