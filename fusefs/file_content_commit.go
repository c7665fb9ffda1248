package fusefs

// Committing a file's content: its staged bytes (or, for metadata alone,
// the unchanged bytes) through the Guard, conditioned on the version the
// node came from. What close(2) and fsync(2) report is what commit returns.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
)

// commit stores the content's changes through the Guard: the staged bytes
// (or the unchanged object when only metadata changed) with the node's
// metadata, conditioned on the version the node came from (or on absence,
// for a file this mount created). Nothing to commit is nil. metaLeft
// reports that an upload while writing stored the metadata it was started
// with, and the node's own is a pending attribute change now (the caller
// stores it). when, if not nil, is asked under the body lock, before
// anything is taken of the content: false commits nothing (the last
// release's check that no handle opened since). LOCKS_REQUIRED(the owner's opMu)
func (c *fileContent) commit(ctx context.Context, when func() bool) (metaLeft bool, err error) {
	if done, err := c.resolveUnknown(ctx); done || err != nil {
		if done {
			c.dropSpent()
		}
		return false, err
	}
	metaLeft, err = c.commitStaged(ctx, when)
	if err != nil {
		if isFencedRefusal(err) {
			c.refused(ctx, err)
		}
		return false, err
	}
	c.dropSpent()
	return metaLeft, nil
}

// refused drops the content's changes after the Guard refused their commit
// for good (fenced, or made under a superseded binding): the call that
// committed reports EROFS once, and no later commit stores them.
func (c *fileContent) refused(ctx context.Context, err error) {
	c.body.Lock()
	defer c.body.Unlock()
	key, _ := c.owner.key()
	c.refusedLocked(ctx, key, err)
}

// commitStaged is commit of the staged content.
// LOCKS_REQUIRED(the owner's opMu)
func (c *fileContent) commitStaged(ctx context.Context, when func() bool) (metaLeft bool, err error) {
	c.body.RLock()
	defer c.body.RUnlock()
	if when != nil && !when() {
		return false, nil
	}
	p, err := c.snapshot()
	if p == nil || err != nil {
		return false, err
	}
	start := time.Now()
	// Stored only under the binding the changes were made under (held.go).
	info, err := c.store(heldCtx(ctx, p.bind), p)
	if p.pending && errors.Is(err, errExist) {
		// Another client created the name first: this file can never be
		// stored there. Like an unlinked file it stays readable through
		// its open handles, but the name now shows the other object, and
		// later writes are dropped.
		c.unlink()
		c.owner.forgetName()
		err = fmt.Errorf("%w: %v", fencing.ErrStale, err)
	}
	if wid := fencing.WriteIDOfUnknown(err); wid != "" {
		c.mu.Lock()
		c.unknownWID, c.unknownGen = wid, p.gen
		c.mu.Unlock()
	}
	if err != nil {
		return false, fmt.Errorf("commit %s: %w", p.key, err)
	}
	info = mergeInfo(info, p.key, p.size, p.meta)
	c.fsys.log.Debug("committed", "key", p.key, "size", p.size, "etag", info.ETag, "took", time.Since(start))
	attrs := attrsStored
	if p.metaLeft {
		attrs = attrsLeft
	}
	c.owner.stored(info, attrs)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state.set(stPending|stReplacing, false)
	c.state.set(stSpent, c.holes.any()) // the bucket holds what the staging file lost
	c.storedGen = max(c.storedGen, p.gen)
	if c.gen == p.gen {
		c.setCleanLocked()
		if c.stage == nil {
			c.fsys.untrack(c.owner)
		}
	}
	return p.metaLeft, nil
}

// resolveUnknown asks the bucket whether the content's last commit whose
// outcome was unknown landed after all (its write id is in the object's
// metadata). If it did, the node takes that version as committed, and
// done=true when nothing changed since; if it did not, the commit is
// simply made again. LOCKS_REQUIRED(the owner's opMu)
func (c *fileContent) resolveUnknown(ctx context.Context) (done bool, err error) {
	c.mu.Lock()
	wid, gen := c.unknownWID, c.unknownGen
	c.mu.Unlock()
	if wid == "" {
		return false, nil
	}
	key, err := c.owner.keyOrErr()
	if err != nil {
		return false, nil // the name is gone: the commit drops the changes
	}
	info, landed, err := c.fsys.guard.Landed(ctx, key, wid)
	if err != nil {
		return false, fmt.Errorf("commit %s: the outcome of the last attempt is still unknown: %w", key, err)
	}
	c.mu.Lock()
	c.unknownWID = ""
	unchanged := c.gen == gen
	c.mu.Unlock()
	if !landed {
		return false, nil
	}
	attrs := attrsKept // changed since: committed on top of what landed
	if unchanged {
		attrs = attrsStored
	}
	c.owner.stored(info, attrs)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.up != nil { // the upload that landed
		c.up.cancel()
		c.up = nil
	}
	c.state.set(stPending|stReplacing, false)
	c.state.set(stSpent, true) // if parts of the staging file were released
	if c.gen != gen {
		return false, nil
	}
	c.setCleanLocked()
	return true, nil
}

// snapshot returns what the content's commit must store, nil when there
// is nothing to store (clean, or the name is gone), or the error a commit
// reports without trying (a failed staging write).
// LOCKS_REQUIRED(c.body read)
func (c *fileContent) snapshot() (*pendingCommit, error) {
	if !c.flags().has(stDirty) {
		return nil, nil
	}
	o := c.owner.origin(true)
	c.mu.Lock()
	if !c.state.has(stDirty) {
		c.mu.Unlock()
		return nil, nil
	}
	if c.state.has(stUnlinked) || o.key == "" {
		c.unlinkLocked()
		c.mu.Unlock()
		return nil, nil
	}
	if err := c.stageErr; err != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("commit %s: not stored: %w; the file keeps its stored version once every descriptor is closed", o.key, err)
	}
	p := &pendingCommit{key: o.key, gen: c.gen, bind: c.bind, size: c.size, pending: c.state.has(stPending),
		replacing: c.state.has(stReplacing), base: c.baseLocked(o), meta: o.meta, body: bytes.NewReader(nil)}
	c.mu.Unlock()
	if c.stage != nil {
		p.body = c.stage
	} else if p.size != 0 {
		return nil, fmt.Errorf("commit %s: %d bytes but no staged content", o.key, p.size)
	}
	return p, nil
}

// store writes p through the Guard: through the content's upload when one
// is in progress, else as a create (pending) or a Put on the base; a
// whole-file replacement is the Guard's Replace, which may move it to the
// current version (fencing/replace.go). p.meta becomes what was stored. A
// staging file with released ranges is never Put.
// LOCKS_REQUIRED(the owner's opMu, c.body read)
func (c *fileContent) store(ctx context.Context, p *pendingCommit) (objstore.ObjectInfo, error) {
	if p.pending {
		// A file made where unlink acknowledged a delete is stored
		// after that delete, whatever its outcome (deletewb.go).
		if err := c.fsys.deletes.wait(ctx, p.key); ctx.Err() != nil {
			return objstore.ObjectInfo{}, err
		}
	}
	if c.stage != nil && p.size > 0 {
		info, uploaded, err := c.commitUpload(ctx, p)
		if uploaded && p.pending && errors.Is(err, fencing.ErrStale) {
			err = fmt.Errorf("%w: %s was created concurrently (%v)", errExist, p.key, err)
		}
		if uploaded {
			return info, err
		}
	}
	g := c.fsys.guard
	switch {
	case c.holes.any():
		return objstore.ObjectInfo{}, fmt.Errorf("%w: nothing stored", errUploadLost)
	case p.replacing: // p.base is absent when pending: a create
		return existErr(g.Replace(ctx, p.key, p.body, p.size, p.base, p.meta))
	case p.pending:
		return c.fsys.create(ctx, p.key, p.body, p.size, p.meta)
	}
	return g.Put(ctx, p.key, p.body, p.size, p.base, p.meta)
}

// commitUpload tries to commit p through the content's upload. It reports
// handled=false when the caller must commit with Put instead (no upload,
// or one that cannot be used while the staging file is whole; it is
// dropped then). On success p.meta is what was stored, and p.metaLeft says
// that the node's metadata differs from it (a self-copy must follow).
// LOCKS_REQUIRED(the node's opMu, c.body read)
func (c *fileContent) commitUpload(ctx context.Context, p *pendingCommit) (info objstore.ObjectInfo, handled bool, err error) {
	c.mu.Lock()
	u := c.up
	c.up = nil
	c.mu.Unlock()
	if u == nil {
		return objstore.ObjectInfo{}, false, nil
	}
	gone := c.holes.any()
	parts, err := u.finish(ctx, p.size)
	metaChanged := err == nil && !maps.Equal(uploadMeta(p.meta), u.meta)
	if err == nil && metaChanged && !gone {
		err = fmt.Errorf("%w: the metadata changed while writing", fencing.ErrStreamChanged)
	}
	if err == nil {
		if gone && p.replacing {
			info, err = c.fsys.guard.CommitReplacement(ctx, u.st, parts, u.meta)
		} else {
			info, err = c.fsys.guard.CommitStream(ctx, u.st, parts, u.meta)
		}
	}
	switch {
	case err == nil:
		u.cancel()
		c.fsys.metrics.streamed.WithLabelValues("committed").Inc()
		p.meta, p.metaLeft = maps.Clone(u.meta), metaChanged
		return info, true, nil
	case fencing.WriteIDOfUnknown(err) != "":
		// Kept for the next commit, which first asks whether this one
		// landed, then publishes the same upload again.
		c.mu.Lock()
		if c.up == nil && !c.state.has(stUnlinked) {
			c.up = u
		} else {
			u.drop()
		}
		c.mu.Unlock()
		c.fsys.metrics.streamed.WithLabelValues("failed").Inc()
		return objstore.ObjectInfo{}, true, err
	case !gone && (errors.Is(err, fencing.ErrStreamChanged) || p.replacing && isConflict(err) || !isCommitErr(err)):
		u.drop()
		c.fsys.metrics.streamed.WithLabelValues("fallback").Inc()
		c.fsys.log.Debug("streamed upload unusable; uploading the whole file", "key", p.key, "reason", err)
		return objstore.ObjectInfo{}, false, nil
	}
	u.drop()
	c.fsys.metrics.streamed.WithLabelValues("failed").Inc()
	if gone && !isCommitErr(err) || errors.Is(err, fencing.ErrStreamChanged) {
		err = fmt.Errorf("%w: %w", errUploadLost, err)
	}
	return objstore.ObjectInfo{}, true, err
}

// isCommitErr reports an error that CommitStream returned, as opposed to
// one of finish (a failed part, a changed content).
func isCommitErr(err error) bool {
	return err != nil && !errors.Is(err, errUploadUnusable)
}
