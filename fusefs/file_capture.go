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
// The kernel retries a refused open once, after that lookup, and the
// retry must not meet other handles again: under a writer rewriting the
// file in a loop, two readers refused on one superseded node both look the
// name up and retry; if both reached the same new node, the first would
// capture the version current then and the second be pinned to it, refused
// again (before a byte) if the next version landed in between. So a
// refused open is remembered, for refusalWindow, by the thread that made it
// (the kernel's retry runs in the same task). A lookup of that key by that
// thread that finds any node at the name other than the one it was given
// since supersedes it (retryOnOwnNode), so the name gets a new node of the
// thread's own, which its retried open captures at the current version with
// no other handle to agree with: that open cannot be refused for the
// object's change. Whoever holds the node it left keeps it: handles open
// there read on, and an open that had already reached it and finds no
// handle open captures the current version as any open with no other
// handle does (a superseded node is refused only to an open that would
// share its page cache with handles on a gone version). A retry inside the
// open cannot do this: the open's inode is fixed, and its page cache
// belongs to the handles of the gone version.
//
// What remains: a read outside the GET's window (a seek far ahead, or the
// GET broke) sends a ranged GET pinned with If-Match and fails with ESTALE
// if the version went since; so does a page the kernel evicted from a
// cache kept with FOPEN_KEEP_CACHE (such an open sends no GET of its own).
// Both come after bytes of the version were returned, unless the page
// evicted was the first.
//
// A leading mount does not do this: no other fencefs writer can change the
// bucket while it leads, and its own commits move its nodes.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fs"
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
	defer func() {
		if handled && err == nil {
			n.fsys.refused.forget(ctx, key) // the retry, if it was one, is done
		}
	}()
	n.mu.Lock()
	if n.superseded {
		if n.openCount > 0 {
			n.mu.Unlock()
			n.fsys.refused.note(ctx, key)
			return nil, 0, true, fmt.Errorf("open %s: %w", key, errSuperseded)
		}
		// No handle to agree with: the open captures the current
		// version, under the key the node had (it may have left the
		// tree since).
		key = n.supersededKey
	}
	if n.c.local() || n.attrPending {
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
	body, info, sctx, sstop, err := n.captureGet(ctx, key, opts)
	if err != nil {
		return n.openUncaptured(ctx, key, others, err)
	}
	h, fuseFlags = n.adoptCaptured(key, others, info, body, sctx, sstop)
	return h, fuseFlags, true, nil
}

// captureGet sends the GET of an open that captures its version. The GET
// outlives the open (it serves the reads until release): its context sctx
// is the stream's (sstop ends it), cancelled by the open's only while
// waiting for the answer. It is part of the open's operation, so that while
// the storage is known down it fails as fast as any call. On an error
// sctx is stopped and there is no body.
func (n *fileNode) captureGet(ctx context.Context, key string, opts objstore.GetOptions) (body io.ReadCloser, info objstore.ObjectInfo, sctx context.Context, sstop context.CancelFunc, err error) {
	sctx, sstop = context.WithCancel(n.fsys.ctx)
	start, ok := objstore.OperationStart(ctx)
	if !ok {
		start = time.Now()
	}
	sctx = objstore.WithOperationSince(sctx, start)
	unwatch := context.AfterFunc(ctx, sstop)
	body, info, err = n.fsys.store.Get(sctx, key, opts)
	if !unwatch() && err == nil {
		body.Close()
		err = ctx.Err()
	}
	if err == nil && fencing.IsTombstone(info) {
		body.Close()
		err = fmt.Errorf("%w: %s is a tombstone", objstore.ErrNotFound, key)
	}
	if err != nil {
		sstop()
		return nil, objstore.ObjectInfo{}, nil, nil, err
	}
	return body, info, sctx, sstop, nil
}

// openUncaptured decides an open whose GET brought no body (err): the
// kernel's pages are current (not modified), the version is gone, or the
// store failed (handled=false: the caller opens lazily, unless the node's
// version is stale). LOCKS_REQUIRED(n.openMu)
func (n *fileNode) openUncaptured(ctx context.Context, key string, others bool, err error) (*fileHandle, uint32, bool, error) {
	switch {
	case errors.Is(err, objstore.ErrNotModified):
		n.mu.Lock()
		n.fetched = time.Now()
		n.openCount++
		n.mu.Unlock()
		return &fileHandle{node: n, keepCache: true, key: key}, fuse.FOPEN_KEEP_CACHE, true, nil
	case errors.Is(err, objstore.ErrPrecondition) || errors.Is(err, objstore.ErrNotFound):
		if !others {
			// Deleted elsewhere: ESTALE makes the kernel look again.
			n.markUnlinked()
			return nil, 0, true, fmt.Errorf("%w: %s: %v", fencing.ErrStale, key, err)
		}
		n.supersede(key)
		n.fsys.refused.note(ctx, key)
		return nil, 0, true, fmt.Errorf("open %s: %w", key, errSuperseded)
	}
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

// adoptCaptured opens the handle that reads the captured version info from
// body (its GET's context sctx, ended by sstop). With no other handle open
// the node takes that version. LOCKS_REQUIRED(n.openMu)
func (n *fileNode) adoptCaptured(key string, others bool, info objstore.ObjectInfo, body io.ReadCloser, sctx context.Context, sstop context.CancelFunc) (*fileHandle, uint32) {
	n.mu.Lock()
	changed := n.info.ETag != info.ETag
	keep := n.keepETag == info.ETag
	if !others {
		n.setInfoLocked(info)
		n.c.setStoredSize(info.Size)
		n.keepETag = info.ETag
	}
	n.openCount++
	n.mu.Unlock()
	if changed {
		// The kernel's size of the file may be the old version's: drop
		// its cached attributes (no page is locked by this).
		n.NotifyContent(-1, 0)
	}
	h := &fileHandle{node: n, keepCache: keep, key: key, rd: newReader(n.fsys, info.ETag, info.Size)}
	n.fsys.capturedGets.Add(1) // until the stream's producer returns
	h.rd.adopt(key, body, sctx, sstop)
	var fuseFlags uint32
	if keep {
		fuseFlags = fuse.FOPEN_KEEP_CACHE
	}
	return h, fuseFlags
}

// supersede marks the node as holding a version that is gone while
// handles still read it: the next lookup of its name makes a new node
// (gone), and the kernel's entry for the name is dropped.
func (n *fileNode) supersede(key string) {
	if n.markSuperseded(key) {
		n.forgetName()
	}
}

// markSuperseded marks the node superseded and reports whether it was not
// already.
func (n *fileNode) markSuperseded(key string) bool {
	n.mu.Lock()
	already := n.superseded
	n.superseded = true
	n.supersededKey = key
	n.mu.Unlock()
	if !already {
		n.fsys.metrics.superseded.Inc()
		n.fsys.log.Debug("file replaced in the bucket while open here: its name moves to a new inode", "key", key)
	}
	return !already
}

// retryOnOwnNode is called by a lookup of key, whose node is ch: when the
// calling thread's open of key was refused a moment ago (this lookup is the
// kernel's before it retries the open) and ch is not a node this lookup's
// thread was given for it already, ch is superseded, so that the lookup
// gives the name a new node of the thread's own (gaveOwnNode records it)
// and the retried open meets no other handle there (see the top of this
// file). Whoever holds ch keeps it: a handle open on it reads on, an open
// reaching it with none open captures the current version.
func (fsys *filesystem) retryOnOwnNode(ctx context.Context, key string, ch *fs.Inode) {
	n, ok := ch.Operations().(*fileNode)
	if !ok || !fsys.capturesReads() || !fsys.refused.needsOwnNode(ctx, key, ch) {
		return
	}
	n.mu.Lock()
	// A node already superseded gives way by itself; one with local
	// changes keeps its name.
	keep := n.superseded || n.c.local() || n.attrPending
	n.mu.Unlock()
	if !keep {
		fsys.log.Debug("an open refused as superseded is retried on a node of its own", "key", key)
		n.markSuperseded(key)
	}
}

// gaveOwnNode records ch as the node a lookup of key answered the calling
// thread, if its open of key was refused a moment ago (retryOnOwnNode): the
// kernel may look the name up twice before it retries the open.
func (fsys *filesystem) gaveOwnNode(ctx context.Context, key string, ch *fs.Inode) {
	fsys.refused.gave(ctx, key, ch)
}
