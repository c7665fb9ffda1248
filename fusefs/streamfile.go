package fusefs

// A file whose early parts have left the local disk.
//
// A streamed file keeps at most Options.StreamStaging bytes in its staging
// file, or less on a small cache disk (stream.go, streamplan.go); beyond
// that the parts already uploaded are released.
// Their bytes then exist only in the bucket's incomplete multipart upload,
// which S3 can neither read back nor rewrite in place, so some things a
// staged file allows cannot be done any more. The rules, decided here:
//
//   - A write or truncate below the upload frontier (into a part already
//     sent, or below it), except inside the first part, which stays local
//     until the commit: refused with ESPIPE ("Illegal seek": the file
//     accepts sequential writes only now), and the file's changes can no
//     longer be stored: every later close and fsync of it report ESPIPE,
//     the upload is aborted, the bucket keeps the previous version, and the
//     last close discards the changes, as after a full cache disk. A
//     truncate to 0 makes the content whole again. One WARN log line says
//     why.
//   - A read of a released range before the commit: ESPIPE, with a log
//     line; the file is not harmed (after the commit it reads from the
//     bucket). Ranges still on local disk read as before.
//   - A metadata change while writing (fchmod, fchown: tar and cp -p do it
//     before close): the upload is published with the metadata it was
//     started with, then the new metadata is stored by a self-copy, both
//     before close returns (two commits instead of one).
//   - A commit refused because an older epoch changed the object (a
//     whole-file replacement, fencing/replace.go): the same upload is published on
//     the current version.
//   - A commit whose outcome is unknown (EIO): the upload is kept, and the
//     next commit (a later close or fsync, or the last release) first asks
//     the bucket whether the earlier attempt landed (its write id), then
//     publishes the same upload again with the same write id.
//   - A part that cannot be uploaded, a token changed while writing, or an
//     upload aborted behind the mount's back: the file cannot be stored;
//     the error (EIO, or EROFS when fenced) is reported at the next write,
//     close and fsync, and the bucket keeps the previous version.
//   - fsync commits the whole file; the staging file is then dropped and
//     writing on reads the object back into staging (a file larger than
//     the cache disk then fails with ENOSPC).
//
// Never is a staging file with released ranges uploaded as the content.

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
)

// errNotSequential: an access to a range of a streamed file that has left
// the local disk (see the rules above). ESPIPE.
var errNotSequential = errors.New("illegal seek: this part of the file was uploaded and released from the staging file while it is written front to back; it can be read once the file is closed, and written only by rewriting the file from its start")

// errStreamLost: the streamed upload of a file whose early parts have left
// the local disk cannot be published. EIO unless the cause says otherwise.
var errStreamLost = errors.New("the file's streamed upload cannot be published and its early parts are no longer on local disk")

// streamWriteLocked keeps the node's stream in step with a change of the
// staged content at [off, end), which moved the staged size from prev to
// size: a change below the parts sent drops the stream (and no new one
// starts before the next commit); a sequential append that takes the
// content past the threshold the cache disk allows starts one; full parts are
// dispatched and uploaded parts released (waiting for uploads when the
// writer is ahead). LOCKS_REQUIRED(n.cmu write); LOCKS_EXCLUDED(n.mu)
func (n *fileNode) streamWriteLocked(ctx context.Context, key string, off, end, prev, size int64) {
	if n.fsys.guard == nil || key == "" {
		return
	}
	n.mu.Lock()
	u := n.up
	if u != nil && u.touches(off, end) {
		n.up = nil
		n.state.set(stNoStream, true) // nothing released: checkStreamChangeLocked let it through
		n.mu.Unlock()
		u.drop()
		return
	}
	if u == nil {
		appended := !n.state.has(stNoStream) && !n.unlinked && off == prev && end == size
		n.mu.Unlock()
		if !appended {
			return
		}
		if u = n.startStreamLocked(key, size); u == nil {
			return
		}
		off = 0 // everything below the append is the content so far
	} else {
		n.mu.Unlock()
	}
	u.wrote(off, end)
	n.advanceLocked(ctx, u, size, u.plan.bound)
}

// startStreamLocked starts the node's stream once an append took the staged
// content to size, past the threshold of the plan the cache disk allows
// (streamplan.go); it returns nil when none starts yet.
// LOCKS_REQUIRED(n.cmu write); LOCKS_EXCLUDED(n.mu)
func (n *fileNode) startStreamLocked(key string, size int64) *streamUpload {
	z := objstore.SizingOf(n.fsys.store)
	if size <= min(z.MultipartThreshold, minStreamStart) {
		return nil // no plan starts this early: spare the fstatfs
	}
	plan := planStream(z, n.fsys.opts.StreamStaging, cacheRoom(n.stage))
	if size <= plan.start {
		return nil
	}
	if plan.part < z.PartSize {
		n.fsys.log.Debug("streaming in parts smaller than the store's: the cache disk has little room",
			"key", key, "part", plan.part, "store_part", z.PartSize, "bound", plan.bound)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.up != nil || n.state.has(stNoStream) || n.unlinked {
		return nil
	}
	meta := streamMeta(encodeAttr(n.attr, contentMeta(n.info.Meta)))
	n.up = newStreamUpload(n.fsys, key, n.stage, plan, n.baseLocked(), meta)
	return n.up
}

// advanceLocked runs u.advance and takes in its result: the bytes released,
// or the stream's failure. It reports whether anything was released.
// LOCKS_REQUIRED(n.cmu write)
func (n *fileNode) advanceLocked(ctx context.Context, u *streamUpload, size, limit int64) bool {
	freed, err := u.advance(ctx, size, limit)
	if freed > 0 {
		n.holes.bytes += freed
		n.fsys.stagingBytes.Add(-freed)
		n.holes.lo, n.holes.hi = u.hull()
	}
	if err == nil {
		return freed > 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.up == u {
		n.up = nil
		n.state.set(stNoStream, true)
	}
	u.drop()
	if n.holes.any() {
		n.failLocked(fmt.Errorf("%w: %w", errStreamLost, err))
	}
	return freed > 0
}

// makeRoomLocked releases uploaded parts of the node's stream (waiting for
// uploads when the writer is ahead) so that the staged content, grown to
// size by the write about to be made, stays within the stream's bound.
// LOCKS_REQUIRED(n.cmu write)
func (n *fileNode) makeRoomLocked(ctx context.Context, size int64) {
	n.mu.Lock()
	u := n.up
	n.mu.Unlock()
	if u != nil {
		n.advanceLocked(ctx, u, size, u.plan.bound)
	}
}

// reclaimLocked is called when a staging write found the cache disk full:
// it waits for the node's part uploads and releases every uploaded part.
// It reports whether space was given back (the write may be tried again).
// LOCKS_REQUIRED(n.cmu write)
func (n *fileNode) reclaimLocked(ctx context.Context, off, end, size int64) bool {
	n.mu.Lock()
	u := n.up
	n.mu.Unlock()
	if u == nil {
		return false
	}
	u.wrote(off, end)
	return n.advanceLocked(ctx, u, size, 0)
}

// checkStreamChangeLocked refuses a change of the staged bytes in
// [off, end) (a truncate: off == end == the new size) that the node can no
// longer make because a part of the file has left the local disk (the
// rules above), and fails the file. LOCKS_REQUIRED(n.cmu write)
func (n *fileNode) checkStreamChangeLocked(key string, off, end int64, truncate bool) error {
	if !n.holes.any() || (truncate && off == 0) {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stageErr != nil {
		return fmt.Errorf("not stored: %w", n.stageErr)
	}
	u := n.up
	if u != nil {
		if truncate && !u.below(off) || !truncate && !u.touches(off, end) {
			return nil
		}
	}
	what := "a write at"
	if truncate {
		what = "a truncate to"
	}
	err := fmt.Errorf("%w (%s offset %d)", errNotSequential, what, off)
	limit := n.fsys.opts.StreamStaging
	if u != nil {
		limit = u.plan.bound
	}
	n.fsys.log.Warn("refused a change of a file being streamed below the part already uploaded and released from the staging file; the file's changes will not be stored",
		"key", key, "offset", off, "limit", limit)
	n.failLocked(err)
	if u != nil {
		n.up = nil
		u.drop()
	}
	return err
}

// checkStreamReadLocked refuses a read of [off, end) that reaches a range
// released from the staging file. LOCKS_REQUIRED(n.cmu read)
func (n *fileNode) checkStreamReadLocked(off, end int64) error {
	if !n.holes.overlaps(off, end) {
		return nil
	}
	return fmt.Errorf("%w (a read at offset %d)", errNotSequential, off)
}

// resetStreamHolesLocked forgets the released ranges of a staging file that
// was truncated to 0 or dropped. LOCKS_REQUIRED(n.cmu write)
func (n *fileNode) resetStreamHolesLocked() {
	n.fsys.stagingBytes.Add(n.holes.bytes)
	n.holes = holes{}
}

// commitStream tries to commit c through the node's stream. It reports
// handled=false when the caller must commit with Put instead (no stream,
// or a stream that cannot be used while the staging file is whole; it is
// dropped then). On success c.meta is what was stored, and c.metaLeft says
// that the node's metadata differs from it (a self-copy must follow).
// LOCKS_REQUIRED(n.opMu, n.cmu read)
func (n *fileNode) commitStream(ctx context.Context, c *pendingCommit) (info objstore.ObjectInfo, handled bool, err error) {
	n.mu.Lock()
	u := n.up
	n.up = nil
	n.mu.Unlock()
	if u == nil {
		return objstore.ObjectInfo{}, false, nil
	}
	gone := n.holes.any()
	parts, err := u.finish(ctx, c.size)
	metaChanged := err == nil && !maps.Equal(streamMeta(c.meta), u.meta)
	if err == nil && metaChanged && !gone {
		err = fmt.Errorf("%w: the metadata changed while writing", fencing.ErrStreamChanged)
	}
	if err == nil {
		if gone && c.replacing {
			info, err = n.fsys.guard.CommitReplacement(ctx, u.st, parts, u.meta)
		} else {
			info, err = n.fsys.guard.CommitStream(ctx, u.st, parts, u.meta)
		}
	}
	switch {
	case err == nil:
		u.cancel()
		n.fsys.metrics.streamed.WithLabelValues("committed").Inc()
		c.meta, c.metaLeft = maps.Clone(u.meta), metaChanged
		return info, true, nil
	case fencing.WriteIDOfUnknown(err) != "":
		// Kept for the next commit, which first asks whether this one
		// landed, then publishes the same upload again.
		n.mu.Lock()
		if n.up == nil && !n.unlinked {
			n.up = u
		} else {
			u.drop()
		}
		n.mu.Unlock()
		n.fsys.metrics.streamed.WithLabelValues("failed").Inc()
		return objstore.ObjectInfo{}, true, err
	case !gone && (errors.Is(err, fencing.ErrStreamChanged) || c.replacing && isConflict(err) || !isCommitErr(err)):
		u.drop()
		n.fsys.metrics.streamed.WithLabelValues("fallback").Inc()
		n.fsys.log.Debug("streamed upload unusable; uploading the whole file", "key", c.key, "reason", err)
		return objstore.ObjectInfo{}, false, nil
	}
	u.drop()
	n.fsys.metrics.streamed.WithLabelValues("failed").Inc()
	if gone && !isCommitErr(err) || errors.Is(err, fencing.ErrStreamChanged) {
		err = fmt.Errorf("%w: %w", errStreamLost, err)
	}
	return objstore.ObjectInfo{}, true, err
}

// isCommitErr reports an error that CommitStream returned, as opposed to
// one of finish (a failed part, a changed content).
func isCommitErr(err error) bool {
	return err != nil && !errors.Is(err, errStreamUnusable)
}
