package fusefs

import (
	"bytes"
	"context"
	"math/rand"
	"syscall"
	"testing"

	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
)

func putMem(t *testing.T, s *memstore.Store, key string, body []byte) objstore.ObjectInfo {
	t.Helper()
	info, err := s.Put(context.Background(), key, bytes.NewReader(body), int64(len(body)), objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestReaderServesSequentialAndRandomReadsOfOneVersion drives the read path
// (blocks with readahead, direct ranged reads) against the in-memory store.
func TestReaderServesSequentialAndRandomReadsOfOneVersion(t *testing.T) {
	store := memstore.New()
	fsys := newFilesystem(Options{Store: store, Logger: nil}, t.TempDir())
	data := pattern(7, 3*readBlockSize+12345)
	info := putMem(t, store, "obj", data)
	r := newReader(fsys, info.ETag, int64(len(data)))
	defer r.close()
	ctx := context.Background()

	// Sequential, in kernel-sized requests.
	var got []byte
	buf := make([]byte, 128<<10)
	for off := 0; off < len(data); off += len(buf) {
		n := min(len(buf), len(data)-off)
		m, err := r.readAt(ctx, "obj", buf[:n], int64(off))
		if err != nil || m != n {
			t.Fatalf("sequential readAt(%d): %d, %v", off, m, err)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("sequential reads differ from the object")
	}
	r.mu.Lock()
	cached := len(r.blocks)
	r.mu.Unlock()
	if cached > 2+readaheadBlocks {
		t.Fatalf("reader holds %d blocks after a sequential pass, want at most %d", cached, 2+readaheadBlocks)
	}

	// Random reads, crossing block boundaries.
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 50; i++ {
		off := rng.Intn(len(data))
		n := 1 + rng.Intn(min(1<<20, len(data)-off))
		b := make([]byte, n)
		m, err := r.readAt(ctx, "obj", b, int64(off))
		if err != nil || m != n || !bytes.Equal(b, data[off:off+n]) {
			t.Fatalf("readAt(%d, %d) = %d, %v (equal %v)", off, n, m, err, bytes.Equal(b[:m], data[off:off+m]))
		}
	}

	// Another version of the object: a read pinned to the first is ESTALE.
	putMem(t, store, "obj", pattern(8, len(data)))
	r2 := newReader(fsys, info.ETag, int64(len(data)))
	defer r2.close()
	_, err := r2.readAt(ctx, "obj", make([]byte, 4096), int64(len(data)/2))
	if toErrno(err) != syscall.ESTALE {
		t.Fatalf("read of a replaced version: %v (%v), want ESTALE", err, toErrno(err))
	}
}
