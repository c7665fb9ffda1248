package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/fencefs/fencefs/objstore"
)

// reader serves reads of one version (etag) of an object for one handle.
// It is safe for concurrent use (the kernel issues reads in parallel).
//
// A sequential reader (one starting near 0, or continuing where its last
// read ended) is served from a stream: one GET from its position to the
// end, read ahead into a bounded window (readahead.go). Reads near the
// stream's position wait for it; other reads are random and fetch exactly
// the range asked with one ranged GET. Every GET is pinned to etag with
// If-Match, so a handle never mixes two versions: an object that changed
// (or is shorter than the size the handle saw) fails with
// objstore.ErrPrecondition.
type reader struct {
	// Constant after construction.
	fsys *filesystem
	etag string
	size int64
	ctx  context.Context // cancelled by close: stops the stream
	stop context.CancelFunc

	mu sync.Mutex
	st *stream // GUARDED_BY(mu): the readahead stream, nil before the first sequential read
	// lastDirectEnd is the end of the last read not served by the stream
	// (-1 at first): a read starting there starts a new stream.
	lastDirectEnd int64 // GUARDED_BY(mu)
	closed        bool  // GUARDED_BY(mu)
}

func newReader(fsys *filesystem, etag string, size int64) *reader {
	ctx, stop := context.WithCancel(fsys.ctx)
	return &reader{fsys: fsys, etag: etag, size: size, ctx: ctx, stop: stop, lastDirectEnd: -1}
}

// close stops the stream; replies in flight keep their data until written.
func (r *reader) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.st != nil {
		r.closeStreamLocked(r.st)
	}
	r.stop()
}

// read reads n bytes at off of key (the range is within the object's size)
// and returns them as a reply for go-fuse. dest (at least n bytes) is the
// request's buffer, used by random reads.
func (r *reader) read(ctx context.Context, key string, dest []byte, off int64) (*readResult, error) {
	n := int64(len(dest))
	if n == 0 {
		return bufResult(dest), nil
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, fmt.Errorf("read %s: %w", key, context.Canceled)
	}
	s := r.st
	switch {
	case s != nil && s.coversLocked(off):
	case s == nil && off < streamJoinGap:
		// The first read near the start: the kernel's first readahead
		// requests arrive in any order; the stream serves them all.
		s = r.newStreamLocked(key, 0)
	case off == r.lastDirectEnd:
		// A random reader turned sequential.
		s = r.newStreamLocked(key, off)
	default:
		s = nil
	}
	if s != nil {
		res, err := r.serveLocked(ctx, s, off, n)
		if !errors.Is(err, errNotInWindow) {
			r.mu.Unlock()
			return res, err
		}
	}
	r.lastDirectEnd = off + n
	r.mu.Unlock()
	got, err := r.fetch(ctx, key, dest, off)
	if err != nil {
		return nil, err
	}
	return bufResult(dest[:got]), nil
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
