package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Streaming readahead. A sequential reader is served by one GET from its
// position to the end of the object, pinned with If-Match to the handle's
// ETag. A goroutine reads the body into reusable chunks ahead of the reader
// (a bounded window that grows while the reader stays sequential) and the
// kernel's READ requests are answered with slices of those chunks, written
// to /dev/fuse with writev(2) without another copy.
const (
	// streamChunk is the unit of the window. It equals the largest READ
	// the kernel sends, so that a request spans at most two chunks.
	streamChunk = maxIO
	// streamAheadMin and streamAheadMax bound how far the stream reads
	// ahead of the furthest byte asked: it starts at the minimum and
	// grows with the bytes read sequentially.
	streamAheadMin = 2 << 20
	streamAheadMax = 16 << 20
	// streamJoinGap: a read starting at most this far past the data that
	// has arrived waits for the stream instead of sending its own GET. The
	// kernel sends the READs of its readahead window in parallel and
	// go-fuse serves them in any order, so this is several times the
	// kernel's readahead. A first read this close to the start of the
	// object starts the stream at 0.
	streamJoinGap = 8 << 20
	// streamKeepBehind: chunks ending this far behind the furthest byte
	// asked are dropped even when not every byte of them was served (the
	// kernel asks each byte once; this bounds what a skipping reader
	// leaves behind).
	streamKeepBehind = 8 << 20
	// streamKeepServed: chunks whose every byte was served stay this far
	// behind the furthest byte asked. The kernel asks a page again when
	// it dropped it from its cache after the READ (seen under churn, with
	// two handles reading one inode): the stream still has it, instead of
	// a ranged GET of a version that may be gone.
	streamKeepServed = 4 << 20
)

// chunkPool recycles the window's chunks across streams and handles.
var chunkPool = sync.Pool{New: func() any { return &chunk{buf: make([]byte, streamChunk)} }}

// chunk is one streamChunk-sized buffer of a stream's window. It is back in
// chunkPool once no one holds a reference: the window while the chunk is in
// it, the producer while it fills it, and every readResult pointing into
// it until go-fuse has written the reply.
type chunk struct {
	buf  []byte
	refs atomic.Int32
}

func getChunk(refs int32) *chunk {
	c := chunkPool.Get().(*chunk)
	c.refs.Store(refs)
	return c
}

func (c *chunk) release() {
	switch n := c.refs.Add(-1); {
	case n == 0:
		chunkPool.Put(c)
	case n < 0:
		panic("fusefs: chunk released more often than referenced")
	}
}

// slot is one chunk of a stream's window; c is nil once dropped.
type slot struct {
	c      *chunk
	served int64 // bytes of the chunk handed out to reads
}

// waiter is a read waiting for the stream to reach need.
type waiter struct {
	need int64
	ch   chan struct{} // closed when filled >= need or the stream failed
}

// stream is one streaming GET of [start, end) of the reader's version. Its
// mutable state is guarded by the owning reader's mu.
type stream struct {
	// Constant after construction.
	start, end int64
	ctx        context.Context // cancelled by close: stops the GET
	stop       context.CancelFunc
	// body, when not nil, is the answer of a GET sent at open (file_capture.go),
	// which produce reads instead of sending its own.
	body io.ReadCloser
	done chan struct{} // closed when the producer goroutine has returned
	wake chan struct{} // (cap 1) want moved or the stream closed

	base   int64  // GUARDED_BY(reader.mu): index of slots[0]; slot i covers start+(base+i)*streamChunk
	slots  []slot // GUARDED_BY(reader.mu)
	filled int64  // GUARDED_BY(reader.mu): bytes before filled have arrived
	want   int64  // GUARDED_BY(reader.mu): end of the furthest read served or waiting
	// asked: a read was served or waits. A stream started at open reads
	// nothing ahead before that (an open that never reads, or reads
	// elsewhere, as tail -f does, holds no buffer).
	asked   bool      // GUARDED_BY(reader.mu)
	err     error     // GUARDED_BY(reader.mu): why the stream stopped before end (sticky)
	waiters []*waiter // GUARDED_BY(reader.mu)
}

// errNotInWindow: the range is not (or no longer) in the stream's window.
var errNotInWindow = errors.New("range not in the readahead window")

// errStreamClosed is the error of a stream that was replaced or closed.
var errStreamClosed = fmt.Errorf("readahead stream closed: %w", context.Canceled)

// coversLocked reports whether a read at off is served by the stream:
// it is in the window, or close enough ahead to wait for.
// LOCKS_REQUIRED(r.mu)
func (s *stream) coversLocked(off int64) bool {
	return s.err == nil && off >= s.start+s.base*streamChunk && off <= s.filled+streamJoinGap
}

// ahead is how far the producer may run past want.
// LOCKS_REQUIRED(r.mu)
func (s *stream) ahead() int64 {
	if !s.asked {
		return 0
	}
	return min(max(s.want-s.start, streamAheadMin), streamAheadMax)
}

// notifyLocked wakes the waiters whose data arrived (all, once the stream
// failed).
// LOCKS_REQUIRED(r.mu)
func (s *stream) notifyLocked() {
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		if s.filled >= w.need || s.err != nil {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	clear(s.waiters[len(kept):])
	s.waiters = kept
}

// dropBehindLocked drops the chunks far behind want (served ones once
// streamKeepServed behind, others once streamKeepBehind behind) and the
// dropped chunks at the front of the window.
// LOCKS_REQUIRED(r.mu)
func (s *stream) dropBehindLocked() {
	for i := range s.slots {
		cStart := s.start + (s.base+int64(i))*streamChunk
		cEnd := cStart + streamChunk
		if cEnd > s.want-streamKeepServed {
			break
		}
		sl := &s.slots[i]
		served := sl.served >= min(cEnd, s.end)-cStart
		if sl.c != nil && (served || cEnd <= s.want-streamKeepBehind) {
			sl.c.release()
			sl.c = nil
		}
	}
	k := 0
	for k < len(s.slots) && s.slots[k].c == nil && s.start+(s.base+int64(k)+1)*streamChunk <= s.filled {
		k++
	}
	if k > 0 {
		clear(s.slots[:k])
		s.slots = s.slots[k:]
		s.base += int64(k)
	}
}

// readResult is a READ reply: slices of stream chunks (or of the request's
// own buffer), written with writev(2). go-fuse calls Slices (its vectored
// write path) or Bytes, then Done once the reply is written; the chunks
// stay referenced until Done. A reply go-fuse drops without Done (an
// interrupted request) only keeps its chunks from being reused: they are
// then left to the garbage collector.
type readResult struct {
	vecs     [][]byte
	refs     []*chunk
	released atomic.Bool
	one      [1][]byte
	oneRef   [1]*chunk
}

var _ fuse.ReadResult = (*readResult)(nil)

// sliceResult is the interface go-fuse's writev path takes.
var _ interface {
	Slices() ([][]byte, fuse.Status)
} = (*readResult)(nil)

// bufResult is a reply of data in the request's own buffer.
func bufResult(b []byte) *readResult {
	r := &readResult{}
	r.one[0] = b
	r.vecs = r.one[:]
	return r
}

// Size implements fuse.ReadResult.
func (r *readResult) Size() int {
	n := 0
	for _, v := range r.vecs {
		n += len(v)
	}
	return n
}

// Bytes implements fuse.ReadResult: it copies into buf, because go-fuse may
// call Done before it writes what Bytes returned.
func (r *readResult) Bytes(buf []byte) ([]byte, fuse.Status) {
	if n := r.Size(); cap(buf) < n {
		buf = make([]byte, 0, n)
	}
	buf = buf[:0]
	for _, v := range r.vecs {
		buf = append(buf, v...)
	}
	return buf, fuse.OK
}

// Slices returns the reply's data in place, for go-fuse's writev path.
func (r *readResult) Slices() ([][]byte, fuse.Status) { return r.vecs, fuse.OK }

// Done implements fuse.ReadResult: the reply is written, the chunks may be
// reused. Calls after the first do nothing.
func (r *readResult) Done() {
	if !r.released.CompareAndSwap(false, true) {
		return
	}
	for _, c := range r.refs {
		c.release()
	}
}
