package fusefs

// A file whose early parts have left the local disk: what the content
// (fileContent) can still do once an upload while writing (partUpload,
// file_upload.go) released parts of its staging file.
//
// A streamed file keeps at most Options.StreamStaging bytes in its staging
// file, or less on a small cache disk (file_upload.go, file_upload_plan.go); beyond
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
	"fmt"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
)

// uploadWriteLocked keeps the content's upload in step with a change of
// the staged content at [off, end), which moved the staged size from prev
// to size: a change below the parts sent drops the upload (and no new one
// starts before the next commit); a sequential append that takes the
// content past the threshold the cache disk allows starts one; full parts
// are dispatched and uploaded parts released (waiting for uploads when the
// writer is ahead). LOCKS_REQUIRED(c.body write); LOCKS_EXCLUDED(c.mu)
func (c *fileContent) uploadWriteLocked(ctx context.Context, key string, off, end, prev, size int64) {
	if c.fsys.guard == nil || key == "" {
		return
	}
	c.mu.Lock()
	u := c.up
	if u != nil && u.touches(off, end) {
		c.dropUploadLocked(true) // nothing released: checkChangeLocked let it through
		c.mu.Unlock()
		return
	}
	if u == nil {
		appended := !c.state.any(stNoUpload|stUnlinked) && off == prev && end == size
		c.mu.Unlock()
		if !appended {
			return
		}
		if u = c.startUploadLocked(key, size); u == nil {
			return
		}
		off = 0 // everything below the append is the content so far
	} else {
		c.mu.Unlock()
	}
	u.wrote(off, end)
	c.advanceLocked(ctx, u, size, u.plan.bound)
}

// startUploadLocked starts the content's upload once an append took the
// staged content to size, past the threshold of the plan the cache disk
// allows (file_upload_plan.go); it returns nil when none starts yet.
// LOCKS_REQUIRED(c.body write); LOCKS_EXCLUDED(c.mu)
func (c *fileContent) startUploadLocked(key string, size int64) *partUpload {
	z := objstore.SizingOf(c.fsys.store)
	if size <= min(z.MultipartThreshold, minUploadStart) {
		return nil // no plan starts this early: spare the fstatfs
	}
	plan := planUpload(z, c.fsys.opts.StreamStaging, cacheRoom(c.stage))
	if size <= plan.start {
		return nil
	}
	if plan.part < z.PartSize {
		c.fsys.log.Debug("streaming in parts smaller than the store's: the cache disk has little room",
			"key", key, "part", plan.part, "store_part", z.PartSize, "bound", plan.bound)
	}
	o := c.owner.origin(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.up != nil || c.state.any(stNoUpload|stUnlinked) {
		return nil
	}
	c.up = newPartUpload(c.fsys, key, c.stage, plan, c.baseLocked(o), uploadMeta(o.meta))
	return c.up
}

// baseLocked is the version the content's next commit is conditioned on:
// absent for a file not yet created in the bucket, else the version o it
// was read at. LOCKS_REQUIRED(c.mu)
func (c *fileContent) baseLocked(o origin) fencing.Version {
	if c.state.has(stPending) {
		return fencing.Version{}
	}
	return o.version
}

// advanceLocked runs u.advance and takes in its result: the bytes released,
// or the upload's failure. It reports whether anything was released.
// LOCKS_REQUIRED(c.body write)
func (c *fileContent) advanceLocked(ctx context.Context, u *partUpload, size, limit int64) bool {
	freed, err := u.advance(ctx, size, limit)
	if freed > 0 {
		c.holes.bytes += freed
		c.fsys.stagingBytes.Add(-freed)
		c.holes.lo, c.holes.hi = u.hull()
	}
	if err == nil {
		return freed > 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.up == u {
		c.up = nil
		c.state.set(stNoUpload, true)
	}
	u.drop()
	if c.holes.any() {
		c.failLocked(fmt.Errorf("%w: %w", errUploadLost, err))
	}
	return freed > 0
}

// makeRoomLocked releases uploaded parts (waiting for uploads when the
// writer is ahead) so that the staged content, grown to size by the write
// about to be made, stays within the upload's bound.
// LOCKS_REQUIRED(c.body write)
func (c *fileContent) makeRoomLocked(ctx context.Context, size int64) {
	c.mu.Lock()
	u := c.up
	c.mu.Unlock()
	if u != nil {
		c.advanceLocked(ctx, u, size, u.plan.bound)
	}
}

// reclaimLocked is called when a staging write found the cache disk full:
// it waits for the part uploads and releases every uploaded part. It
// reports whether space was given back (the write may be tried again).
// LOCKS_REQUIRED(c.body write)
func (c *fileContent) reclaimLocked(ctx context.Context, off, end, size int64) bool {
	c.mu.Lock()
	u := c.up
	c.mu.Unlock()
	if u == nil {
		return false
	}
	u.wrote(off, end)
	return c.advanceLocked(ctx, u, size, 0)
}

// checkChangeLocked refuses a change of the staged bytes in [off, end) (a
// truncate: off == end == the new size) that the content can no longer
// make because a part of the file has left the local disk (the rules
// above), and fails the file. LOCKS_REQUIRED(c.body write)
func (c *fileContent) checkChangeLocked(key string, off, end int64, truncate bool) error {
	if !c.holes.any() || (truncate && off == 0) {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stageErr != nil {
		return fmt.Errorf("not stored: %w", c.stageErr)
	}
	u := c.up
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
	limit := c.fsys.opts.StreamStaging
	if u != nil {
		limit = u.plan.bound
	}
	c.fsys.log.Warn("refused a change of a file being streamed below the part already uploaded and released from the staging file; the file's changes will not be stored",
		"key", key, "offset", off, "limit", limit)
	c.failLocked(err)
	c.dropUploadLocked(false)
	return err
}

// checkReadLocked refuses a read of [off, end) that reaches a range
// released from the staging file. LOCKS_REQUIRED(c.body read)
func (c *fileContent) checkReadLocked(off, end int64) error {
	if !c.holes.overlaps(off, end) {
		return nil
	}
	return fmt.Errorf("%w (a read at offset %d)", errNotSequential, off)
}

// resetHolesLocked forgets the released ranges of a staging file that was
// truncated to 0 or dropped. LOCKS_REQUIRED(c.body write)
func (c *fileContent) resetHolesLocked() {
	c.fsys.stagingBytes.Add(c.holes.bytes)
	c.holes = holes{}
}
