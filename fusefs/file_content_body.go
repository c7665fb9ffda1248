package fusefs

// The staged bytes of a file's content: staging the stored version,
// writing, truncating, reading through, and dropping the staging file.

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
)

// ensureStageLocked makes sure the content has a staging file holding its
// current bytes, downloading the version the node holds unless truncateTo
// is 0. LOCKS_REQUIRED(c.body write)
func (c *fileContent) ensureStageLocked(ctx context.Context, truncateTo int64) error {
	if c.stage != nil {
		return nil
	}
	o := c.owner.origin(false)
	c.mu.Lock()
	size, pending := c.size, c.state.has(stPending)
	c.mu.Unlock()
	f, err := c.fsys.stageFile()
	if err != nil {
		return err
	}
	if !pending && size > 0 && truncateTo != 0 {
		if err := c.download(ctx, f, o, size); err != nil {
			f.Close()
			return err
		}
	}
	c.stage = f
	if !pending && truncateTo == 0 {
		c.mu.Lock()
		c.state.set(stReplacing, true)
		c.mu.Unlock()
	}
	c.fsys.stagingBytes.Add(size)
	c.fsys.track(c.owner)
	return nil
}

// download copies the version o into f.
func (c *fileContent) download(ctx context.Context, f *os.File, o origin, size int64) error {
	if o.key == "" {
		return fmt.Errorf("%w: node was unlinked", objstore.ErrNotFound)
	}
	rc, _, err := c.fsys.store.Get(ctx, o.key, objstore.GetOptions{Length: -1, IfMatch: o.etag})
	if err != nil {
		return fmt.Errorf("stage %s: %w", o.key, err)
	}
	defer rc.Close()
	got, err := io.Copy(f, rc)
	if err != nil {
		return fmt.Errorf("stage %s: %w", o.key, err)
	}
	if got != size {
		return fmt.Errorf("%w: stage %s: got %d bytes, want %d", fencing.ErrStale, o.key, got, size)
	}
	return nil
}

// write stores data at off in the staging file (staging the stored version
// first); off < 0 appends at the end of the staged content. key names the
// file in log lines.
func (c *fileContent) write(ctx context.Context, key string, data []byte, off int64) (int, error) {
	c.body.Lock()
	defer c.body.Unlock()
	c.dropSpentLocked()
	if err := c.refuseSupersededLocked(ctx, key, "write"); err != nil {
		return 0, err
	}
	if err := c.ensureStageLocked(ctx, -1); err != nil {
		return 0, err
	}
	prev := c.sizeNow()
	if off < 0 {
		off = prev
	}
	if err := c.checkChangeLocked(key, off, off+int64(len(data)), false); err != nil {
		return 0, err
	}
	c.makeRoomLocked(ctx, max(prev, off+int64(len(data))))
	w, err := c.stage.WriteAt(data, off)
	for isNoSpace(err) && c.reclaimLocked(ctx, off, off+int64(w), max(prev, off+int64(w))) {
		// Uploaded parts gave their space back.
		more, werr := c.stage.WriteAt(data[w:], off+int64(w))
		w, err = w+more, werr
	}
	if w > 0 {
		c.owner.touch()
	}
	c.mu.Lock()
	if end := off + int64(w); end > c.size {
		c.fsys.stagingBytes.Add(end - c.size)
		c.size = end
	}
	if w > 0 {
		c.markDirtyLocked()
		c.noteWriterLocked(ctx)
	}
	if err != nil {
		c.failStageLocked(key, err)
	}
	size := c.size
	c.mu.Unlock()
	if w > 0 || err != nil {
		c.uploadWriteLocked(ctx, key, off, off+int64(w), prev, size)
	}
	if err != nil {
		return w, fmt.Errorf("write staging file: %w", err)
	}
	return w, nil
}

// truncate sets the size of the staged content (staging the stored version
// first when it keeps any of it); atOpen says it is an open's O_TRUNC,
// which is an open-time change (stOpenChangeOnly) when nothing else was
// uncommitted.
func (c *fileContent) truncate(ctx context.Context, key string, size int64, atOpen bool) error {
	c.body.Lock()
	defer c.body.Unlock()
	c.dropSpentLocked()
	if err := c.refuseSupersededLocked(ctx, key, "truncate"); err != nil {
		return err
	}
	if err := c.ensureStageLocked(ctx, size); err != nil {
		return err
	}
	if err := c.checkChangeLocked(key, size, size, true); err != nil {
		return err
	}
	if err := c.stage.Truncate(size); err != nil {
		c.mu.Lock()
		c.failStageLocked(key, err)
		c.mu.Unlock()
		return fmt.Errorf("truncate staging file: %w", err)
	}
	if size == 0 {
		c.resetHolesLocked()
	}
	c.owner.touch()
	c.mu.Lock()
	defer c.mu.Unlock()
	if size == 0 {
		c.stageErr = nil // nothing of the failed content is left
		c.state.set(stReplacing, !c.state.has(stPending))
	}
	if c.up != nil && c.up.below(size) {
		c.dropUploadLocked(true)
	}
	c.fsys.stagingBytes.Add(size - c.size)
	c.size = size
	wasDirty := c.state.has(stDirty)
	c.markDirtyLocked()
	c.noteWriterLocked(ctx)
	c.state.set(stOpenChangeOnly, atOpen && !wasDirty)
	return nil
}

// readAt reads the staged bytes at off into dest. staged is false when
// the content is not staged (or the staging file is spent: the bucket
// holds it): the caller reads the stored version.
func (c *fileContent) readAt(dest []byte, off int64) (n int, staged bool, err error) {
	c.body.RLock()
	defer c.body.RUnlock()
	if c.stage == nil || c.flags().has(stSpent) {
		return 0, false, nil
	}
	if err := c.checkReadLocked(off, off+int64(len(dest))); err != nil {
		return 0, true, err
	}
	n, err = c.stage.ReadAt(dest, off)
	if err == io.EOF {
		err = nil
	}
	return n, true, err
}

// preserve stages the content for open handles before the object is
// deleted or replaced (unlink, rename over): an open file keeps its data,
// as POSIX requires.
func (c *fileContent) preserve(ctx context.Context) error {
	c.body.Lock()
	defer c.body.Unlock()
	c.dropSpentLocked()
	return c.ensureStageLocked(ctx, -1)
}

// dropLocked removes the staging file and forgets uncommitted changes;
// the caller checked that no handle needs them (the last release), and
// storedSize is the size of the version the node holds, which the file
// shows again. It reports whether uncommitted changes were lost, and
// lostName when the file was never stored (its name must not keep pointing
// at the node). LOCKS_REQUIRED(c.body write, the node's opMu)
func (c *fileContent) dropLocked(storedSize int64) (lost, lostName bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state.has(stDirty) && !c.state.has(stUnlinked) {
		lost = true
		if c.state.has(stPending) {
			c.state.set(stUnlinked, true)
			lostName = true
		}
	}
	c.state.set(stReplacing|stSpent, false)
	c.setCleanLocked()
	c.dropUploadLocked(false)
	if c.stage != nil {
		c.stage.Close()
		c.stage = nil
		c.resetHolesLocked()
		c.fsys.stagingBytes.Add(-c.size)
	}
	c.unknownWID = ""
	c.refusal, c.refusalFor = nil, nil
	c.fsys.untrack(c.owner)
	if !c.state.any(stPending | stUnlinked) {
		c.size = storedSize
	}
	return lost, lostName
}

// dropSpent drops the staging file of a content whose commit succeeded
// while parts of it had been released: it no longer holds the content, the
// bucket does (handles read from there; a write stages the object again).
// Writers and truncates call dropSpentLocked first thing, as they may come
// in between the commit and this.
func (c *fileContent) dropSpent() {
	c.body.Lock()
	defer c.body.Unlock()
	c.dropSpentLocked()
}

// LOCKS_REQUIRED(c.body write)
func (c *fileContent) dropSpentLocked() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.state.has(stSpent) {
		return
	}
	c.state.set(stSpent, false)
	if !c.holes.any() || c.stage == nil || c.state.has(stDirty) {
		return
	}
	c.stage.Close()
	c.stage = nil
	c.resetHolesLocked()
	c.fsys.stagingBytes.Add(-c.size)
	c.fsys.untrack(c.owner)
}

// refuseSupersededLocked refuses the changes the content holds when they
// were made under a binding another holder's epoch has superseded since
// (held.go): they are dropped, the file shows its stored version again,
// and op, the first call to meet them, reports EROFS for them; the next
// change starts from the stored version under the current binding.
// LOCKS_REQUIRED(c.body write)
func (c *fileContent) refuseSupersededLocked(ctx context.Context, key, op string) error {
	c.mu.Lock()
	b, dirty := c.bind, c.state.has(stDirty) && !c.state.has(stUnlinked)
	c.mu.Unlock()
	if !dirty || !c.fsys.superseded(b) {
		return nil
	}
	err := fmt.Errorf("%s %s: %w: %w: the changes made under token %d were dropped (another holder's epoch was active since)",
		op, key, fencing.ErrFenced, fencing.ErrSuperseded, b.Token)
	c.refusedLocked(ctx, key, err)
	if taken := c.takeRefusal(ctx); taken != nil {
		return taken
	}
	// Another process's changes: they are refused at its own close; this
	// change starts from the stored version.
	return nil
}

// refusedLocked drops every change the content holds because the Guard
// refused them for good (err: fenced, or superseded): the staging file, the
// upload, an unknown outcome. Handles may still be open: they read the
// stored version from now on, and what they write next starts from it.
// LOCKS_REQUIRED(c.body write)
func (c *fileContent) refusedLocked(ctx context.Context, key string, err error) {
	c.mu.Lock()
	writers, full := c.writers, c.writersFull
	c.mu.Unlock()
	lost, lostName := c.dropLocked(c.owner.storedSize())
	if !lost {
		return
	}
	c.mu.Lock()
	c.writers, c.writersFull = writers, full
	c.holdRefusalLocked(err)
	c.writers, c.writersFull = nil, false
	c.mu.Unlock()
	if lostName {
		c.mu.Lock()
		c.size = 0 // never stored: its handles read an empty file
		c.mu.Unlock()
	}
	c.fsys.metrics.refusedDrops.Inc()
	c.fsys.log.Warn("changes refused by the fence are dropped; the file shows its stored version again",
		"key", key, "err", err)
	c.owner.reverted(ctx, lostName)
}
