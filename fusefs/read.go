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

// newStreamLocked starts a stream at off (rounded down to a chunk) to the
// end of the object, replacing the current one.
// LOCKS_REQUIRED(r.mu)
func (r *reader) newStreamLocked(key string, off int64) *stream {
	if r.st != nil {
		r.closeStreamLocked(r.st)
	}
	start := off - off%streamChunk
	ctx, stop := context.WithCancel(r.ctx)
	s := &stream{start: start, end: r.size, ctx: ctx, stop: stop, want: off, asked: true,
		filled: start, done: make(chan struct{}), wake: make(chan struct{}, 1)}
	r.st = s
	go r.produce(s, key)
	return s
}

// adopt makes body, the answer of a GET of the whole version sent at open
// with ctx (whose cancel is stop), the reader's stream from 0
// (file_capture.go). The reader then owns body.
func (r *reader) adopt(key string, body io.ReadCloser, ctx context.Context, stop context.CancelFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &stream{start: 0, end: r.size, ctx: ctx, stop: stop, body: body,
		done: make(chan struct{}), wake: make(chan struct{}, 1)}
	r.st = s
	go r.produce(s, key)
}

// closeStreamLocked stops s and drops its window; chunks still referenced
// by replies in flight return to the pool when those are written.
// LOCKS_REQUIRED(r.mu)
func (r *reader) closeStreamLocked(s *stream) {
	s.stop()
	if s.err == nil {
		s.err = errStreamClosed
	}
	s.notifyLocked()
	for i := range s.slots {
		if s.slots[i].c != nil {
			s.slots[i].c.release()
			s.slots[i].c = nil
		}
	}
	s.slots = nil
	if r.st == s {
		r.st = nil
	}
}

// produce is the stream's goroutine: one GET, read into the window as long
// as the window has room.
func (r *reader) produce(s *stream, key string) {
	defer close(s.done)
	fail := func(err error) {
		r.mu.Lock()
		if s.err == nil {
			s.err = err
		}
		s.notifyLocked()
		r.mu.Unlock()
	}
	rc := s.body
	if rc != nil {
		defer r.fsys.capturedGets.Add(-1)
		defer rc.Close()
	}
	if s.start >= s.end {
		return
	}
	if rc == nil {
		var err error
		rc, _, err = r.fsys.store.Get(s.ctx, key, objstore.GetOptions{
			Offset: s.start, Length: s.end - s.start, IfMatch: r.etag,
		})
		if err != nil {
			fail(fmt.Errorf("read %s [%d,%d) at %s: %w", key, s.start, s.end, r.etag, err))
			return
		}
		defer rc.Close()
	}
	for pos := s.start; pos < s.end; {
		r.mu.Lock()
		for s.err == nil && pos >= s.want+s.ahead() {
			r.mu.Unlock()
			select {
			case <-s.wake:
			case <-s.ctx.Done():
			}
			r.mu.Lock()
		}
		if s.err != nil { // closed
			r.mu.Unlock()
			return
		}
		c := getChunk(2) // the window's reference and ours while filling
		s.slots = append(s.slots, slot{c: c})
		r.mu.Unlock()

		n := min(int64(streamChunk), s.end-pos)
		var fill int64
		for fill < n {
			m, err := rc.Read(c.buf[fill:n])
			fill += int64(m)
			if m > 0 {
				r.mu.Lock()
				if s.err == nil {
					s.filled = pos + fill
					s.notifyLocked()
				}
				r.mu.Unlock()
			}
			if err == io.EOF && fill < n {
				// The object is shorter than the size we were told: it changed.
				err = fmt.Errorf("%w: %s is shorter than expected", objstore.ErrPrecondition, key)
			}
			if err != nil && fill < n {
				c.release()
				if s.ctx.Err() == nil {
					err = fmt.Errorf("read %s at %d: %w", key, pos+fill, err)
				}
				fail(err)
				return
			}
		}
		c.release()
		pos += n
	}
}

// serveLocked answers a read of [off, off+n) from the stream, waiting for
// the data when it has not arrived yet. It returns errNotInWindow when the
// range is no longer in the window; the caller then reads it directly.
// LOCKS_REQUIRED(r.mu); may release and retake it while waiting.
func (r *reader) serveLocked(ctx context.Context, s *stream, off, n int64) (*readResult, error) {
	end := off + n
	if end > s.want || !s.asked {
		s.asked = true
		s.want = max(s.want, end)
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	for s.filled < end && s.err == nil {
		w := &waiter{need: end, ch: make(chan struct{})}
		s.waiters = append(s.waiters, w)
		r.mu.Unlock()
		select {
		case <-w.ch:
			r.mu.Lock()
		case <-ctx.Done():
			r.mu.Lock()
			for i, x := range s.waiters {
				if x == w {
					s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
					break
				}
			}
			return nil, ctx.Err()
		}
	}
	if s.filled < end {
		// The stream stopped before end: replaced, closed or failed (its
		// body broke more often than the store retries, or the object
		// changed). The caller reads the range with its own GET, which
		// fails the same way (ESTALE) if the object changed; the next
		// sequential read starts a new stream.
		if r.closed {
			return nil, s.err
		}
		if r.st == s {
			if r.fsys.log != nil {
				r.fsys.log.Debug("readahead stream stopped", "etag", r.etag, "offset", s.filled, "err", s.err)
			}
			r.closeStreamLocked(s)
		}
		return nil, errNotInWindow
	}
	first := (off-s.start)/streamChunk - s.base
	last := (end-1-s.start)/streamChunk - s.base
	if first < 0 || last >= int64(len(s.slots)) {
		return nil, errNotInWindow
	}
	for i := first; i <= last; i++ {
		if s.slots[i].c == nil {
			return nil, errNotInWindow
		}
	}
	res := &readResult{}
	if last > first {
		res.vecs = make([][]byte, 0, last-first+1)
		res.refs = make([]*chunk, 0, last-first+1)
	} else {
		res.vecs, res.refs = res.one[:0:1], res.oneRef[:0:1]
	}
	for i := first; i <= last; i++ {
		sl := &s.slots[i]
		cStart := s.start + (s.base+i)*streamChunk
		from, to := max(off, cStart)-cStart, min(end-cStart, streamChunk)
		sl.c.refs.Add(1)
		res.vecs = append(res.vecs, sl.c.buf[from:to])
		res.refs = append(res.refs, sl.c)
		sl.served += to - from
	}
	s.dropBehindLocked()
	return res, nil
}
