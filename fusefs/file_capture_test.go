package fusefs

import (
	"context"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
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
// (file_capture.go) serves the handle's sequential reads of that version to the
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

// TestARefusedOpenGivesItsThreadsLookupsANodeOfItsOwn: after a refused
// open, the same thread's lookups of the key need a node of their own until
// one was given (and then only for another node), the open succeeded, or
// refusalWindow passed; other threads' and other keys' lookups never do
// (file_capture.go).
func TestARefusedOpenGivesItsThreadsLookupsANodeOfItsOwn(t *testing.T) {
	caller := func(tid uint32) context.Context {
		return fuse.NewContext(context.Background(), &fuse.Caller{Pid: tid})
	}
	a, b := &fs.Inode{}, &fs.Inode{}
	cases := []struct {
		name    string
		lookups func(r *openRefusals) []bool // needsOwnNode's answers, after a refusal of "k" by thread 7
		want    []bool
	}{
		{"the same thread's lookups, until it was given a node", func(r *openRefusals) []bool {
			first := r.needsOwnNode(caller(7), "k", a)
			r.gave(caller(7), "k", b)
			return []bool{first, r.needsOwnNode(caller(7), "k", b), r.needsOwnNode(caller(7), "k", a)}
		}, []bool{true, false, true}},
		{"not once its open succeeded", func(r *openRefusals) []bool {
			r.forget(caller(7), "k")
			return []bool{r.needsOwnNode(caller(7), "k", a)}
		}, []bool{false}},
		{"not another thread's", func(r *openRefusals) []bool {
			return []bool{r.needsOwnNode(caller(8), "k", a), r.needsOwnNode(caller(7), "k", a)}
		}, []bool{false, true}},
		{"not a lookup of another key", func(r *openRefusals) []bool {
			return []bool{r.needsOwnNode(caller(7), "other", a)}
		}, []bool{false}},
		{"not a request without a caller", func(r *openRefusals) []bool {
			return []bool{r.needsOwnNode(context.Background(), "k", a)}
		}, []bool{false}},
		{"not after the window", func(r *openRefusals) []bool {
			r.at[refusal{key: "k", tid: 7}] = refusalState{at: time.Now().Add(-refusalWindow)}
			return []bool{r.needsOwnNode(caller(7), "k", a), len(r.at) > 0}
		}, []bool{false, false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r openRefusals
			r.note(caller(7), "k")
			if got := c.lookups(&r); !slices.Equal(got, c.want) {
				t.Errorf("answers: %v, want %v", got, c.want)
			}
		})
	}
}

// TestRefusedOpensRememberedAtOnceAreBounded: beyond maxRefusals remembered
// at once, a refusal is forgotten rather than the memory grown; expired
// ones make room.
func TestRefusedOpensRememberedAtOnceAreBounded(t *testing.T) {
	var r openRefusals
	for tid := uint32(1); tid <= maxRefusals+10; tid++ {
		r.note(fuse.NewContext(context.Background(), &fuse.Caller{Pid: tid}), "k")
	}
	if len(r.at) != maxRefusals {
		t.Fatalf("%d refusals remembered, want the bound %d", len(r.at), maxRefusals)
	}
	for k := range r.at {
		r.at[k] = refusalState{at: time.Now().Add(-refusalWindow)}
	}
	r.note(fuse.NewContext(context.Background(), &fuse.Caller{Pid: 1 << 20}), "k")
	if len(r.at) != 1 {
		t.Fatalf("%d refusals remembered after the others expired, want 1", len(r.at))
	}
}
