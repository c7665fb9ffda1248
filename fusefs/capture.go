package fusefs

// Reads under churn: a mount that does not lead reads objects another
// writer may replace at any moment. A version the handle pinned at open
// can be gone by its first READ, and then the handle has nothing to read.
// So such a mount captures the version at open, with the GET that then
// serves the handle's reads: once a server has begun to answer a GET it
// sends that version to the end, even if the object is replaced meanwhile
// (the gateway streams from a file it opened; MinIO from the part files it
// opened). A sequential read (cat, cp, a backup's scan) is served by that
// GET from the first byte to the last: it returns one whole version and
// cannot fail for the object's change.
//
// The kernel's page cache is per inode, and every handle of a node reads
// through it, so all handles of a node read one version:
//
//   - no other handle open: the GET takes the current version, whatever it
//     is (no If-Match, so no conflict to lose the race on), and the node
//     moves to it; the kernel's cached pages are kept only when they are of
//     that version (FOPEN_KEEP_CACHE), its cached size is dropped otherwise.
//     A node whose version is fresh (younger than MetaCacheTTL) and whose
//     pages the kernel holds opens with no request, as before.
//   - other handles open: the GET is pinned to their version with If-Match.
//     When that version is gone the node is superseded: the open fails with
//     ESTALE, which makes the kernel look the name up again (LOOKUP_REVAL)
//     and retry the open once. The lookup gives the name a new node (a new
//     inode, with a page cache of its own), which the retried open moves to
//     the current version. The old handles keep reading the old version
//     from their own GETs, as readers of a file replaced by rename(2) do on
//     a local filesystem.
//
// What remains: a read outside the GET's window (a seek far ahead, or the
// GET broke) sends a ranged GET pinned with If-Match and fails with ESTALE
// if the version went since; so does a page the kernel evicted from a
// cache kept with FOPEN_KEEP_CACHE. Both come after bytes of the version
// were returned.
//
// A leading mount does not do this: no other fencefs writer can change the
// bucket while it leads, and its own commits move its nodes.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// maxCapturedGets bounds the GETs sent at open that serve their handles
// at once: each holds a connection to the store while its handle is open
// (a program keeping many files open, as tail -f does, holds as many).
// Opens beyond it read lazily, as a leading mount's do.
const maxCapturedGets = 256

// capturesReads reports whether read-only opens capture their version with
// a GET (not while leading).
func (fsys *filesystem) capturesReads() bool {
	return fsys.leaderSince().IsZero()
}

// errSuperseded: the node's version is gone while handles still read it;
// the name moves to a new node (fencing.ErrStale: ESTALE, which makes the
// kernel look the name up again and retry the open).
var errSuperseded = fmt.Errorf("%w: the file was replaced while open; its name moves to a new inode", fencing.ErrStale)

// openCaptured opens a read-only handle whose version is captured by a GET
// (see the top of this file). handled is false when it does not apply (the
// node has local state, or maxCapturedGets are open) or the GET failed for
// a reason other than the object's state (the storage is unreachable) while
// the node's version is fresh: the caller then opens as before, with no
// request, reading lazily. With a stale version that failure is the open's.
// LOCKS_REQUIRED(n.openMu)
func (n *fileNode) openCaptured(ctx context.Context, key string) (h *fileHandle, fuseFlags uint32, handled bool, err error) {
	n.mu.Lock()
	if n.superseded {
		n.mu.Unlock()
		return nil, 0, true, fmt.Errorf("open %s: %w", key, errSuperseded)
	}
	if n.unlinked || n.dirty || n.pending || n.attrPending {
		n.mu.Unlock()
		return nil, 0, false, nil
	}
	others := n.openCount > 0
	pinned := n.info.ETag
	cached := n.keepETag != "" && n.keepETag == pinned
	if n.fsys.capturedGets.Load() >= maxCapturedGets {
		n.mu.Unlock()
		return nil, 0, false, nil
	}
	if cached && !others && !n.staleLocked() {
		// The kernel holds this version's pages and it is fresh: no
		// request. (With other handles open it may hold only the pages
		// they have read so far: the rest must come from a GET of this
		// version, captured now.)
		n.openCount++
		n.mu.Unlock()
		return &fileHandle{node: n, keepCache: true, key: key}, fuse.FOPEN_KEEP_CACHE, true, nil
	}
	n.mu.Unlock()

	opts := objstore.GetOptions{}
	switch {
	case others:
		opts.IfMatch = pinned
	case cached:
		opts.IfNoneMatch = pinned
	}
	// The GET outlives the open (it serves the reads until release): its
	// context is the stream's, cancelled by the open's only while waiting
	// for the answer. It is part of the open's operation, so that while
	// the storage is known down it fails as fast as any call.
	sctx, sstop := context.WithCancel(n.fsys.ctx)
	start, ok := objstore.OperationStart(ctx)
	if !ok {
		start = time.Now()
	}
	sctx = objstore.WithOperationSince(sctx, start)
	unwatch := context.AfterFunc(ctx, sstop)
	body, info, err := n.fsys.store.Get(sctx, key, opts)
	if !unwatch() && err == nil {
		body.Close()
		err = ctx.Err()
	}
	if err == nil && fencing.IsTombstone(info) {
		body.Close()
		err = fmt.Errorf("%w: %s is a tombstone", objstore.ErrNotFound, key)
	}
	switch {
	case err == nil:
	case errors.Is(err, objstore.ErrNotModified):
		sstop()
		n.mu.Lock()
		n.fetched = time.Now()
		n.openCount++
		n.mu.Unlock()
		return &fileHandle{node: n, keepCache: true, key: key}, fuse.FOPEN_KEEP_CACHE, true, nil
	case errors.Is(err, objstore.ErrPrecondition) || errors.Is(err, objstore.ErrNotFound):
		sstop()
		if !others {
			// Deleted elsewhere: ESTALE makes the kernel look again.
			n.markUnlinked()
			return nil, 0, true, fmt.Errorf("%w: %s: %v", fencing.ErrStale, key, err)
		}
		n.supersede(key)
		return nil, 0, true, fmt.Errorf("open %s: %w", key, errSuperseded)
	default:
		sstop()
		n.mu.Lock()
		stale := n.staleLocked()
		n.mu.Unlock()
		if stale {
			// Opening lazily would ask the store again (a HEAD) and wait
			// as long for the same outage: this open fails now.
			return nil, 0, true, err
		}
		n.fsys.log.Debug("open could not capture the version; reading it lazily", "key", key, "err", err)
		return nil, 0, false, nil
	}

	n.mu.Lock()
	changed := n.info.ETag != info.ETag
	keep := n.keepETag == info.ETag
	if !others {
		n.setInfoLocked(info)
		n.size = info.Size
		n.keepETag = info.ETag
	}
	n.openCount++
	n.mu.Unlock()
	if changed {
		// The kernel's size of the file may be the old version's: drop
		// its cached attributes (no page is locked by this).
		n.NotifyContent(-1, 0)
	}
	h = &fileHandle{node: n, keepCache: keep, key: key, rd: newReader(n.fsys, info.ETag, info.Size)}
	n.fsys.capturedGets.Add(1) // until the stream's producer returns
	h.rd.adopt(key, body, sctx, sstop)
	if keep {
		fuseFlags = fuse.FOPEN_KEEP_CACHE
	}
	return h, fuseFlags, true, nil
}

// supersede marks the node as holding a version that is gone while
// handles still read it: the next lookup of its name makes a new node
// (gone), and the kernel's entry for the name is dropped.
func (n *fileNode) supersede(key string) {
	n.mu.Lock()
	already := n.superseded
	n.superseded = true
	n.mu.Unlock()
	if !already {
		n.fsys.metrics.superseded.Inc()
		n.fsys.log.Debug("file replaced in the bucket while open here: its name moves to a new inode", "key", key)
		n.forgetName()
	}
}
