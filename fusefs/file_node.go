package fusefs

// fileNode's side of the node interface (node.go): what lookups, listings,
// removals, renames and a takeover's cache drop ask of a regular file.

import (
	"context"
	"fmt"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
)

var _ node = (*fileNode)(nil)

// goneLocked: unlinked here, or superseded (its name moves to a new node,
// file_capture.go). LOCKS_REQUIRED(n.mu)
func (n *fileNode) goneLocked() bool { return n.superseded || n.c.flags().has(stUnlinked) }

// pinnedLocked is localStateLocked. LOCKS_REQUIRED(n.mu)
func (n *fileNode) pinnedLocked() bool { return n.localStateLocked() }

// localOnlyLocked: created here and not committed yet. LOCKS_REQUIRED(n.mu)
func (n *fileNode) localOnlyLocked() bool {
	f := n.c.flags()
	return f.has(stPending) && !f.has(stUnlinked)
}

// adoptLocked takes info and its size. LOCKS_REQUIRED(n.mu)
func (n *fileNode) adoptLocked(info objstore.ObjectInfo) {
	n.setInfoLocked(info)
	n.c.setStoredSize(info.Size)
}

// movedLocked takes the version a directory rename copied, which the
// kernel's page cache holds too. LOCKS_REQUIRED(n.mu)
func (n *fileNode) movedLocked(info objstore.ObjectInfo) {
	n.nodeBase.movedLocked(info)
	n.keepETag = info.ETag
}

// forgetCached marks the cached version stale unless local state pins it,
// and stops trusting the kernel's page cache (FOPEN_KEEP_CACHE).
func (n *fileNode) forgetCached() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.localStateLocked() {
		n.fetched = time.Time{}
	}
	n.keepETag = ""
}

// removeObject deletes the object (none for a file never committed), keeping the
// content readable for open handles first. LOCKS_EXCLUDED(n.opMu)
func (n *fileNode) removeObject(ctx context.Context, key string, del deleteFunc) error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	n.mu.Lock()
	f, base := n.c.flags(), fencing.VersionOf(n.info)
	pending, unlinked := f.has(stPending), f.has(stUnlinked)
	n.mu.Unlock()
	if unlinked {
		return fmt.Errorf("%w: %s", objstore.ErrNotFound, key)
	}
	if !pending {
		if err := n.preserveForReadersLocked(ctx); err != nil {
			return err
		}
		if err := del(ctx, key, base); err != nil {
			return err
		}
	}
	n.markUnlinked()
	return nil
}

// selfCopiedLocked keeps the kernel's pages: the new version has the
// content they hold. LOCKS_REQUIRED(n.mu)
func (n *fileNode) selfCopiedLocked() { n.keepETag = n.info.ETag }
