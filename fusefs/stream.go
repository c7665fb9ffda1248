package fusefs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"sync"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
)

// streamUpload uploads the staged content of a large file while it is being
// written: once the staged size passes the store's multipart threshold,
// every full part (the store's part size) is sent in the background as soon
// as the writer has moved past it, so close(2) only sends the tail and the
// Complete instead of the whole file. The commit is
// Guard.CommitStream: the same intent, validation and conditional Complete
// as Put. Anything that would make the published object differ from a Put
// of the staged content — a write or truncate into a part already sent, a
// metadata change, a failed part, a changed token — drops the stream, and
// the commit falls back to Put of the staging file, which still holds
// everything. Streaming is only ever an optimisation.
//
// Streamed objects carry no mtime/ctime/atime metadata (they are fixed
// before the writer finishes): their times are the object's Last-Modified,
// the time of the Complete, with S3's one-second resolution.
//
// Locking: the fileNode's cmu (write) is held by the callers of note and
// cut, so the frontier moves in step with the staging file; part uploads
// read the staging file below the frontier without any node lock (those
// bytes no longer change, or the stream is dropped first).
type streamUpload struct {
	// Constant after newStreamUpload.
	fsys     *filesystem
	key      string
	stage    *os.File
	partSize int64
	ctx      context.Context // part uploads; cancelled with the mount, or when the stream is done
	cancel   context.CancelFunc
	started  chan struct{} // closed once st or err is set by start

	st  *fencing.Stream // set before started is closed; nil on failure
	err error           // start's error, set before started is closed

	mu       sync.Mutex
	next     int64             // GUARDED_BY(mu): end of the parts dispatched so far
	parts    []objstore.Part   // GUARDED_BY(mu): by part number - 1
	failed   error             // GUARDED_BY(mu): first part failure
	dropped  bool              // GUARDED_BY(mu)
	inflight sync.WaitGroup    // part uploads
	meta     map[string]string // the metadata the stream was started with
}

// streamMeta is the metadata a streamed commit stores: the node's, minus
// the times (see streamUpload).
func streamMeta(meta map[string]string) map[string]string {
	out := maps.Clone(meta)
	delete(out, metaMtime)
	delete(out, metaCtime)
	delete(out, metaAtime)
	return out
}

// newStreamUpload starts the upload of key's staged content in the
// background; base is the version the commit will be conditioned on.
func newStreamUpload(fsys *filesystem, key string, stage *os.File, base fencing.Version, meta map[string]string) *streamUpload {
	ctx, cancel := context.WithCancel(fsys.ctx)
	u := &streamUpload{
		fsys: fsys, key: key, stage: stage,
		partSize: objstore.SizingOf(fsys.store).PartSize,
		ctx:      ctx, cancel: cancel, started: make(chan struct{}),
		meta: meta,
	}
	go func() {
		defer close(u.started)
		// Not ctx: a drop must not cancel a CreateUpload in flight, whose
		// upload would then exist without anyone knowing to abort it.
		sctx, scancel := context.WithTimeout(fsys.ctx, 2*time.Minute)
		defer scancel()
		u.st, u.err = fsys.guard.StartStream(sctx, key, base, meta)
		if u.err != nil {
			fsys.log.Debug("streamed upload not started; the commit uploads the whole file", "key", key, "err", u.err)
		}
	}()
	return u
}

// note is called after the staged content grew to size: it dispatches
// every full part below size. LOCKS_REQUIRED(node cmu, write)
func (u *streamUpload) note(size int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for !u.dropped && u.failed == nil && size-u.next >= u.partSize && len(u.parts) < objstore.MaxParts-1 {
		u.dispatchLocked(u.next, u.partSize)
	}
}

// touches reports whether a change of the staged bytes from off on would
// alter a part already dispatched. LOCKS_REQUIRED(node cmu, write)
func (u *streamUpload) touches(off int64) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return off < u.next
}

// dispatchLocked sends [off, off+n) as the next part. LOCKS_REQUIRED(u.mu)
func (u *streamUpload) dispatchLocked(off, n int64) {
	number := len(u.parts) + 1
	u.parts = append(u.parts, objstore.Part{})
	u.next = off + n
	u.inflight.Add(1)
	go func() {
		defer u.inflight.Done()
		<-u.started
		if u.st == nil {
			u.fail(u.err)
			return
		}
		u.fsys.uploadSlots <- struct{}{}
		defer func() { <-u.fsys.uploadSlots }()
		u.mu.Lock()
		dropped := u.dropped
		u.mu.Unlock()
		if dropped || u.ctx.Err() != nil {
			u.fail(errors.New("dropped"))
			return
		}
		p, err := u.st.UploadPart(u.ctx, number, u.stage, off, n)
		if err != nil {
			u.fail(fmt.Errorf("part %d: %w", number, err))
			return
		}
		u.mu.Lock()
		u.parts[number-1] = p
		u.mu.Unlock()
	}()
}

func (u *streamUpload) fail(err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.failed == nil {
		u.failed = err
	}
}

// finish sends the tail [next, size) as the last part, waits for every
// part and returns them, or an error when the stream cannot be committed.
// LOCKS_REQUIRED(node cmu, read or write): the staged content is stable.
func (u *streamUpload) finish(ctx context.Context, size int64) ([]objstore.Part, error) {
	u.mu.Lock()
	switch {
	case u.dropped:
		u.mu.Unlock()
		return nil, errors.New("dropped")
	case size < u.next:
		u.mu.Unlock()
		return nil, errors.New("the content shrank below the parts sent")
	case size > u.next:
		if size-u.next > objstore.MaxPartSize {
			u.mu.Unlock()
			return nil, errors.New("tail larger than a part may be")
		}
		u.dispatchLocked(u.next, size-u.next)
	}
	u.mu.Unlock()
	done := make(chan struct{})
	go func() { u.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.failed != nil {
		return nil, u.failed
	}
	if len(u.parts) == 0 {
		return nil, errors.New("no parts")
	}
	return append([]objstore.Part(nil), u.parts...), nil
}

// drop abandons the stream: parts not yet sent are skipped, and once the
// parts in flight have finished the upload is aborted, in the background.
// (Parts in flight are not cancelled: the gateway keeps writing a part
// whose request was cancelled, and one finishing after the abort revives
// the upload.) Safe to call more than once.
func (u *streamUpload) drop() {
	u.mu.Lock()
	if u.dropped {
		u.mu.Unlock()
		return
	}
	u.dropped = true
	u.mu.Unlock()
	go func() {
		defer u.cancel()
		<-u.started
		u.inflight.Wait()
		if u.st != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			u.st.Abort(ctx)
			cancel()
		}
	}()
}

// commitStream tries to commit the node's content through its stream. It
// reports handled=false when the caller must commit with Put instead (no
// stream, or the stream could not be used; it is dropped then).
// LOCKS_REQUIRED(n.opMu, n.cmu read)
func (n *fileNode) commitStream(ctx context.Context, key string, size int64, meta map[string]string) (info objstore.ObjectInfo, handled bool, err error) {
	n.mu.Lock()
	u := n.up
	n.up = nil
	n.mu.Unlock()
	if u == nil {
		return objstore.ObjectInfo{}, false, nil
	}
	sm := streamMeta(meta)
	parts, err := u.finish(ctx, size)
	if err == nil && !maps.Equal(sm, u.meta) {
		// CommitStream would refuse it too; checked here to spare the
		// intent and the register read.
		err = errors.New("the metadata changed while writing")
	}
	sent := err == nil
	if sent {
		info, err = n.fsys.guard.CommitStream(ctx, u.st, parts, sm)
	}
	switch {
	case !sent || errors.Is(err, fencing.ErrStreamChanged):
		u.drop()
		n.fsys.metrics.streamed.WithLabelValues("fallback").Inc()
		n.fsys.log.Debug("streamed upload unusable; uploading the whole file", "key", key, "reason", err)
		return objstore.ObjectInfo{}, false, nil
	case err != nil:
		u.cancel()
		n.fsys.metrics.streamed.WithLabelValues("failed").Inc()
		return objstore.ObjectInfo{}, true, err
	}
	u.cancel()
	n.fsys.metrics.streamed.WithLabelValues("committed").Inc()
	return info, true, nil
}

// streamWriteLocked keeps the node's stream in step with a change of the
// staged content at [off, end), which moved the staged size from prev to
// size: a change below the parts sent drops the stream (and no new one
// starts before the next commit); a sequential append that takes the
// content past the multipart threshold starts one; full parts are
// dispatched. LOCKS_REQUIRED(n.cmu write); LOCKS_EXCLUDED(n.mu)
func (n *fileNode) streamWriteLocked(key string, off, end, prev, size int64) {
	if n.fsys.guard == nil || key == "" {
		return
	}
	n.mu.Lock()
	u := n.up
	if u != nil && u.touches(off) {
		n.up, n.noStream = nil, true
		n.mu.Unlock()
		u.drop()
		return
	}
	if u == nil {
		if n.noStream || n.unlinked || off != prev || end != size ||
			size <= objstore.SizingOf(n.fsys.store).MultipartThreshold {
			n.mu.Unlock()
			return
		}
		meta := streamMeta(encodeAttr(n.attr, contentMeta(n.info.Meta)))
		u = newStreamUpload(n.fsys, key, n.stage, n.baseLocked(), meta)
		n.up = u
	}
	n.mu.Unlock()
	u.note(size)
}

// dropStreamLocked abandons the node's stream, if any, and keeps a new
// one from starting before the next commit. LOCKS_REQUIRED(n.mu)
func (n *fileNode) dropStreamLocked() {
	if n.up != nil {
		n.up.drop()
		n.up = nil
	}
	n.noStream = true
}
