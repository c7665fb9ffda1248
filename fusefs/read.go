package fusefs

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/fencefs/fencefs/objstore"
)

// Read path tuning. A sequential reader is served from blocks fetched with
// ranged GETs and kept for a short while; the next readaheadBlocks blocks
// are fetched in the background, and blocks behind the reader are dropped,
// so a reader holds at most a few blocks. Random reads fetch exactly the
// range asked.
const (
	readBlockSize   = 4 << 20
	readaheadBlocks = 3
)

// reader serves reads of one version (etag) of an object for one handle.
// It is safe for concurrent use (the kernel issues reads in parallel).
type reader struct {
	// Constant after construction.
	fsys *filesystem
	etag string
	size int64
	ctx  context.Context // cancelled by close: stops the prefetches
	stop context.CancelFunc

	mu     sync.Mutex
	blocks map[int64]*block // GUARDED_BY(mu)
	last   int64            // GUARDED_BY(mu): index of the last block read, -1 at first
}

// block is one readBlockSize-aligned range, being fetched or fetched.
type block struct {
	done chan struct{} // closed when data/err are set
	data []byte
	err  error
}

func newReader(fsys *filesystem, etag string, size int64) *reader {
	ctx, stop := context.WithCancel(fsys.ctx)
	return &reader{fsys: fsys, etag: etag, size: size, ctx: ctx, stop: stop,
		blocks: map[int64]*block{}, last: -1}
}

func (r *reader) close() { r.stop() }

// readAt fills dest (already clipped to the object's size) from offset off
// of key.
func (r *reader) readAt(ctx context.Context, key string, dest []byte, off int64) (int, error) {
	if len(dest) == 0 {
		return 0, nil
	}
	first := off / readBlockSize
	lastB := (off + int64(len(dest)) - 1) / readBlockSize

	r.mu.Lock()
	_, cached := r.blocks[first]
	sequential := cached || off == 0 || (r.last >= 0 && (first == r.last || first == r.last+1))
	if !sequential {
		r.mu.Unlock()
		return r.direct(ctx, key, dest, off)
	}
	var need []*block
	for b := first; b <= lastB; b++ {
		need = append(need, r.blockLocked(key, b))
	}
	for b := lastB + 1; b <= lastB+readaheadBlocks && b*readBlockSize < r.size; b++ {
		r.blockLocked(key, b)
	}
	r.last = lastB
	for b := range r.blocks {
		if b < first-1 || b > lastB+readaheadBlocks {
			delete(r.blocks, b)
		}
	}
	r.mu.Unlock()

	n := 0
	for i, blk := range need {
		select {
		case <-blk.done:
		case <-ctx.Done():
			return n, ctx.Err()
		}
		if blk.err != nil {
			r.mu.Lock()
			if r.blocks[first+int64(i)] == blk {
				delete(r.blocks, first+int64(i))
			}
			r.mu.Unlock()
			return n, blk.err
		}
		bOff := (first + int64(i)) * readBlockSize
		from := off + int64(n) - bOff
		if from >= int64(len(blk.data)) {
			break
		}
		n += copy(dest[n:], blk.data[from:])
	}
	return n, nil
}

// blockLocked returns block b, starting its fetch when needed.
// LOCKS_REQUIRED(r.mu)
func (r *reader) blockLocked(key string, b int64) *block {
	if blk, ok := r.blocks[b]; ok {
		return blk
	}
	blk := &block{done: make(chan struct{})}
	r.blocks[b] = blk
	off := b * readBlockSize
	n := int64(readBlockSize)
	if off+n > r.size {
		n = r.size - off
	}
	go func() {
		defer close(blk.done)
		buf := make([]byte, n)
		got, err := r.fetch(r.ctx, key, buf, off)
		blk.data, blk.err = buf[:got], err
	}()
	return blk
}

// direct serves a random read with one ranged GET of exactly the range.
func (r *reader) direct(ctx context.Context, key string, dest []byte, off int64) (int, error) {
	return r.fetch(ctx, key, dest, off)
}

// fetch reads len(dest) bytes at off of the pinned version.
func (r *reader) fetch(ctx context.Context, key string, dest []byte, off int64) (int, error) {
	rc, _, err := r.fsys.store.Get(ctx, key, objstore.GetOptions{
		Offset: off, Length: int64(len(dest)), IfMatch: r.etag,
	})
	if err != nil {
		return 0, fmt.Errorf("read %s [%d,+%d) at %s: %w", key, off, len(dest), r.etag, err)
	}
	defer rc.Close()
	n, err := io.ReadFull(rc, dest)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		// The object is shorter than the size we were told: it changed.
		return n, fmt.Errorf("%w: %s is shorter than expected", objstore.ErrPrecondition, key)
	}
	if err != nil {
		return n, fmt.Errorf("read %s: %w", key, err)
	}
	return n, nil
}
