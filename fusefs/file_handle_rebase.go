package fusefs

// Moving to the current version of an object instead of failing with ESTALE,
// where nothing can be inconsistent (a whole-file replacement's commit is
// moved by the Guard: fencing/replace.go):
//
//   - a read handle that has returned no byte yet has nothing to be
//     inconsistent with: a read refused because the object changed since the
//     open takes the current version (maxReadRebase times at most), unless
//     the kernel may already hold pages of the old version (FOPEN_KEEP_CACHE,
//     or another handle open on the node).

import (
	"context"

	"github.com/fencefs/fencefs/fencing"
)

// maxReadRebase bounds how often one READ moves to a newer version (a writer
// replacing the object in a loop could otherwise keep a reader chasing it).
const maxReadRebase = 3

// rebase moves a read handle that has delivered nothing from rd, whose
// version is gone, to the object's current version, and returns the reader
// to retry with. ok is false when the handle must report ESTALE.
func (h *fileHandle) rebase(ctx context.Context, rd *reader, key string) (*reader, bool) {
	n := h.node
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.delivered > 0 || h.keepCache {
		return nil, false
	}
	if h.rd != rd && h.rd != nil {
		return h.rd, true // a concurrent READ of this handle moved it already
	}
	n.mu.Lock()
	alone := n.openCount == 1 && !n.c.local()
	n.mu.Unlock()
	if !alone {
		return nil, false
	}
	cur, err := n.fsys.store.Stat(ctx, key)
	if err != nil || fencing.IsTombstone(cur) {
		return nil, false
	}
	n.mu.Lock()
	if n.openCount != 1 || n.c.flags().has(stDirty) {
		n.mu.Unlock()
		return nil, false
	}
	n.setInfoLocked(cur)
	n.c.setStoredSize(cur.Size)
	n.keepETag = cur.ETag
	n.mu.Unlock()
	if h.rd != nil {
		h.rd.close()
	}
	h.rd = newReader(n.fsys, cur.ETag, cur.Size)
	// The kernel's size of the file is the old version's: drop its cached
	// attributes (only those: no page is locked by this) so that a read
	// past it asks for the new size.
	n.NotifyContent(-1, 0)
	n.fsys.metrics.readRebases.Inc()
	n.fsys.log.Debug("read moved to the current version", "key", key, "etag", cur.ETag)
	return h.rd, true
}
