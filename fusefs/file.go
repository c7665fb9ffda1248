package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// fileNode is a regular file: one object at the same key.
//
// Content lives in the store until a handle first writes (or truncates):
// then the object is copied into a staging file (lazily, pinned to the ETag
// the node holds), writes go to the staging file, and the whole file is
// committed through Guard.Put on flush (close), fsync and release. While a
// staging file exists every handle of the node reads from it, so all
// descriptors of one mount see one file. The staging file is dropped when
// the last handle is released.
//
// A node with open handles is never refreshed from the store: the version
// seen at open stays pinned until the last close (close-to-open
// consistency, as NFS).
//
// Locks, in the order they are taken (none is taken while one after it in
// this list is held): openMu (opens), nodeBase.opMu (the node's
// mutations: commits, metadata, unlink, rename; held across Guard calls),
// cmu (the staging file and its holes), fileHandle.mu (a handle's reader),
// nodeBase.mu (every field marked GUARDED_BY(mu), state included),
// streamUpload.mu (an upload's parts). A …Locked method names the locks it
// needs in its LOCKS_REQUIRED note.
type fileNode struct {
	fs.Inode
	nodeBase

	// openMu serializes opens: each decides the version its handle reads
	// against the handles already open (capture.go).
	openMu sync.Mutex
	// cmu guards the staging file: Lock to create, write or truncate it,
	// RLock to read it or to upload it (so a commit sees a stable body).
	cmu   sync.RWMutex
	stage *os.File // GUARDED_BY(cmu); nil while the content is only in the store
	// holes are the ranges of the staging file punched out once uploaded
	// by the node's stream (file_holes.go, streamfile.go). GUARDED_BY(cmu)
	holes holes

	// GUARDED_BY(mu) (nodeBase.mu):
	size     int64     // current size (of the staging file when there is one)
	pending  bool      // created by this mount and never committed: no object yet
	state    fileState // dirty, and how the next commit may be made (file_state.go)
	gen      uint64    // bumped by every local change; a commit clears dirty only if unchanged
	unlinked bool      // unlinked or replaced: commits are dropped
	// superseded: the version open handles read was replaced in the
	// bucket by another writer, or a retried open needed a node of its
	// own; the name moves to a new node (capture.go).
	superseded bool
	// supersededKey is the key of a superseded node, which may have left
	// the tree: an open reaching it with no handle open reads it.
	supersededKey string
	openCount     int
	keepETag      string        // ETag the kernel's page cache holds (FOPEN_KEEP_CACHE)
	up            *streamUpload // the staged content's upload in progress (stream.go); nil if none
	// unknownWID is the write id of the last commit whose outcome was
	// unknown (it may have landed), unknownGen the gen it stored: the next
	// commit asks the bucket first (commit.go).
	unknownWID string
	unknownGen uint64
	// stageErr is why the staged content cannot be stored: a write to the
	// staging file failed (a full cache disk: ENOSPC), or a change the
	// node cannot make any more (streamfile.go). It is not what the
	// application wrote, so it is never committed. Every commit reports stageErr
	// until the last handle is released, which discards the changes (the
	// file shows the store's version again), or a truncate to 0 makes the
	// content whole again.
	stageErr error
	// dirtySince is when the node became dirty (Unix nanoseconds; 0 while
	// clean), set with stDirty; atomic so the dirty-age gauge reads it
	// without n.mu.
	dirtySince atomic.Int64
}

var _ = (fs.InodeEmbedder)((*fileNode)(nil))

func newFileNode(fsys *filesystem, info objstore.ObjectInfo) *fileNode {
	n := &fileNode{}
	n.init(fsys, &n.Inode, kindFile, info)
	n.metaUpdate = n.updateMeta // kept with uncommitted content changes
	n.size = info.Size
	return n
}

// localStateLocked reports whether the node holds state the store does not
// have, or must not be refreshed because handles pin its version.
// LOCKS_REQUIRED(n.mu)
func (n *fileNode) localStateLocked() bool {
	return n.openCount > 0 || n.pending || n.state.has(stDirty) || n.unlinked
}

// refresh re-reads the object when the cached version is older than
// MetaCacheTTL and nothing local pins it. A vanished object is ENOENT.
func (n *fileNode) refresh(ctx context.Context) error {
	n.mu.Lock()
	need := !n.localStateLocked() && n.staleLocked()
	n.mu.Unlock()
	if !need {
		return nil
	}
	key, err := n.keyOrErr()
	if err != nil {
		return err
	}
	info, err := n.fsys.store.Stat(ctx, key)
	if err == nil && fencing.IsTombstone(info) {
		err = fmt.Errorf("%w: %s is a tombstone", objstore.ErrNotFound, key)
	}
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.localStateLocked() {
		return nil // a handle opened meanwhile: keep what it pinned
	}
	n.setInfoLocked(info)
	n.size = info.Size
	return nil
}

func (n *fileNode) fillAttr(out *fuse.Attr) {
	n.mu.Lock()
	a, size, unlinked := n.attr, n.size, n.unlinked
	n.mu.Unlock()
	nlink := uint32(1)
	if unlinked {
		nlink = 0
	}
	fillAttr(out, a, size, nlink)
}

var _ = (fs.NodeGetattrer)((*fileNode)(nil))

// Getattr returns the node's attributes, refreshed from the store when the
// metadata cache expired and no handle pins the node.
func (n *fileNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	return nodeGetattr(ctx, n, out)
}

var _ = (fs.NodeOpener)((*fileNode)(nil))

// Open opens the file. Opening for writing fails with EROFS when the mount
// cannot write (no token, fenced, read-only); O_TRUNC empties the staged
// content at once (committed on close).
func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ctx, cancel := n.fsys.opctx(ctx)
	defer cancel()
	key, _ := n.key()
	writing := flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0
	if writing {
		if err := n.fsys.checkWritable("open"); err != nil {
			return nil, 0, n.fsys.errno("open", key, err)
		}
	}
	n.openMu.Lock()
	if !writing && n.fsys.capturesReads() {
		h, fuseFlags, handled, err := n.openCaptured(ctx, key)
		if handled {
			n.openMu.Unlock()
			if err != nil {
				return nil, 0, n.fsys.errno("open", key, err)
			}
			return h, fuseFlags, 0
		}
	}
	h, fuseFlags, err := n.openLazily(ctx, key, flags)
	n.openMu.Unlock()
	if err != nil && writing {
		return nil, 0, n.fsys.mutationErrno(ctx, "open", key, err)
	}
	if err != nil {
		return nil, 0, n.fsys.errno("open", key, err)
	}
	if flags&syscall.O_TRUNC != 0 {
		if err := n.truncateAt(ctx, 0, true); err != nil {
			n.releaseHandle(h)
			return nil, 0, n.fsys.mutationErrno(ctx, "open", key, err)
		}
	}
	return h, fuseFlags, 0
}

// openLazily opens a handle on the node's version (refreshed if stale),
// whose first read sends the GET. LOCKS_REQUIRED(n.openMu)
func (n *fileNode) openLazily(ctx context.Context, key string, flags uint32) (*fileHandle, uint32, error) {
	if err := n.refresh(ctx); err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			// Deleted elsewhere while the kernel kept the name: ESTALE
			// below makes it look again (an O_CREAT then creates).
			n.markUnlinked()
		} else {
			return nil, 0, err
		}
	}
	n.mu.Lock()
	if n.superseded {
		n.mu.Unlock()
		n.fsys.refused.note(ctx, key)
		return nil, 0, fmt.Errorf("open %s: %w", key, errSuperseded)
	}
	if n.unlinked && n.openCount == 0 {
		// The kernel still has a name for a node whose object is gone
		// or was never stored (a refused create): ESTALE makes it look
		// the name up again (LOOKUP_REVAL) and open or create what the
		// store has, instead of writing into a node no commit stores.
		n.mu.Unlock()
		return nil, 0, fmt.Errorf("%w: %s: the name no longer refers to this file", fencing.ErrStale, key)
	}
	n.openCount++
	etag := n.info.ETag
	var fuseFlags uint32
	if n.keepETag != "" && n.keepETag == etag && flags&syscall.O_TRUNC == 0 {
		fuseFlags |= fuse.FOPEN_KEEP_CACHE
	}
	n.keepETag = etag
	n.mu.Unlock()
	h := &fileHandle{node: n, appending: flags&syscall.O_APPEND != 0, keepCache: fuseFlags&fuse.FOPEN_KEEP_CACHE != 0,
		writable: flags&syscall.O_ACCMODE != syscall.O_RDONLY, key: key}
	return h, fuseFlags, nil
}

// ensureStageLocked makes sure the node has a staging file holding its current
// content, downloading the object (pinned to the node's ETag) unless
// truncateTo is 0. LOCKS_REQUIRED(n.cmu) (write).
func (n *fileNode) ensureStageLocked(ctx context.Context, truncateTo int64) error {
	if n.stage != nil {
		return nil
	}
	n.mu.Lock()
	etag, size, pending := n.info.ETag, n.size, n.pending
	n.mu.Unlock()
	f, err := n.fsys.stageFile()
	if err != nil {
		return err
	}
	if !pending && size > 0 && truncateTo != 0 {
		if err := n.download(ctx, f, etag, size); err != nil {
			f.Close()
			return err
		}
	}
	n.stage = f
	if !pending && truncateTo == 0 {
		n.mu.Lock()
		n.state.set(stReplacing, true)
		n.mu.Unlock()
	}
	n.fsys.stagingBytes.Add(size)
	n.fsys.track(n)
	return nil
}

// download copies the object version etag into f.
func (n *fileNode) download(ctx context.Context, f *os.File, etag string, size int64) error {
	key, err := n.keyOrErr()
	if err != nil {
		return err
	}
	rc, _, err := n.fsys.store.Get(ctx, key, objstore.GetOptions{Length: -1, IfMatch: etag})
	if err != nil {
		return fmt.Errorf("stage %s: %w", key, err)
	}
	defer rc.Close()
	got, err := io.Copy(f, rc)
	if err != nil {
		return fmt.Errorf("stage %s: %w", key, err)
	}
	if got != size {
		return fmt.Errorf("%w: stage %s: got %d bytes, want %d", fencing.ErrStale, key, got, size)
	}
	return nil
}

// markDirtyLocked records a local change. No intent is written for it: the
// commit names its base in the journal when it is sent (fencing, DESIGN §7).
// LOCKS_REQUIRED(n.mu)
func (n *fileNode) markDirtyLocked() {
	defer n.checkInvariantsLocked()
	n.gen++
	n.state.set(stOpenChangeOnly, false)
	if n.state.has(stDirty) {
		return
	}
	n.state.set(stDirty, true)
	n.dirtySince.Store(time.Now().UnixNano())
	n.fsys.dirtyFiles.Add(1)
	n.fsys.track(n)
}

// markCreated records a file created by this mount and not yet in the
// bucket: its open is its only change. O_CREAT|O_TRUNC (trunc) replaces
// whatever is there: if an older epoch created the name unseen, the commit
// replaces it (fencing.Guard.Replace).
func (n *fileNode) markCreated(trunc bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pending = true
	n.markDirtyLocked()
	n.state.set(stOpenChangeOnly, true)
	n.state.set(stReplacing, trunc)
}

// baseLocked is the version the node's next commit is conditioned on: absent
// for a file not yet created in the bucket, else the version it was read at.
// LOCKS_REQUIRED(n.mu)
func (n *fileNode) baseLocked() fencing.Version {
	if n.pending {
		return fencing.Version{}
	}
	return fencing.VersionOf(n.info)
}

// setCleanLocked records that the node holds no change the bucket lacks
// (committed, or dropped). LOCKS_REQUIRED(n.mu)
func (n *fileNode) setCleanLocked() {
	defer n.checkInvariantsLocked()
	n.state.set(stNoStream, false)
	n.state.set(stOpenChangeOnly, false)
	n.stageErr = nil
	if n.state.has(stDirty) {
		n.state.set(stDirty, false)
		n.dirtySince.Store(0)
		n.fsys.dirtyFiles.Add(-1)
	}
}

// failStageLocked records a failed write to the staging file (see
// stageErr); the node is dirty from then on, so that a commit reports it.
// LOCKS_REQUIRED(n.mu)
func (n *fileNode) failStageLocked(err error) {
	if n.stageErr == nil {
		key, _ := n.key()
		n.fsys.log.Warn("writing the staging file failed; the file's changes will not be stored",
			"key", key, "cache_dir", n.fsys.opts.CacheDir, "err", err)
	}
	n.failLocked(fmt.Errorf("a write to the staging file failed (%w)", err))
}

// failLocked records that the staged content cannot be stored (stageErr),
// for the reason err. LOCKS_REQUIRED(n.mu)
func (n *fileNode) failLocked(err error) {
	if n.stageErr == nil {
		n.stageErr = err
	}
	n.markDirtyLocked()
}

// write stores data at off in the staging file; off < 0 appends at the end
// of the staged content.
func (n *fileNode) write(ctx context.Context, data []byte, off int64) (uint32, error) {
	if err := n.fsys.checkWritable("write"); err != nil {
		return 0, err
	}
	key, _ := n.key()
	n.cmu.Lock()
	defer n.cmu.Unlock()
	n.dropSpentStageLocked()
	if err := n.ensureStageLocked(ctx, -1); err != nil {
		return 0, err
	}
	n.mu.Lock()
	prev := n.size
	n.mu.Unlock()
	if off < 0 {
		off = prev
	}
	if err := n.checkStreamChangeLocked(key, off, off+int64(len(data)), false); err != nil {
		return 0, err
	}
	n.makeRoomLocked(ctx, max(prev, off+int64(len(data))))
	w, err := n.stage.WriteAt(data, off)
	for isNoSpace(err) && n.reclaimLocked(ctx, off, off+int64(w), max(prev, off+int64(w))) {
		// Uploaded parts of a streamed file gave their space back.
		more, werr := n.stage.WriteAt(data[w:], off+int64(w))
		w, err = w+more, werr
	}
	n.mu.Lock()
	if end := off + int64(w); end > n.size {
		n.fsys.stagingBytes.Add(end - n.size)
		n.size = end
	}
	if w > 0 {
		now := time.Now()
		n.attr.Mtime, n.attr.Ctime = now, now
		n.markDirtyLocked()
	}
	size := n.size
	n.mu.Unlock()
	if err != nil {
		n.mu.Lock()
		n.failStageLocked(err)
		n.mu.Unlock()
	}
	if w > 0 || err != nil {
		n.streamWriteLocked(ctx, key, off, off+int64(w), prev, size)
	}
	if err != nil {
		return uint32(w), fmt.Errorf("write staging file: %w", err)
	}
	return uint32(w), nil
}

// truncate sets the size of the staged content (downloading the object
// first when it keeps any of it).
func (n *fileNode) truncate(ctx context.Context, size int64) error {
	return n.truncateAt(ctx, size, false)
}

// truncateAt is truncate; atOpen says it is an open's O_TRUNC, which is an
// open-time change (stOpenChangeOnly) when nothing else was uncommitted.
func (n *fileNode) truncateAt(ctx context.Context, size int64, atOpen bool) error {
	if err := n.fsys.checkWritable("truncate"); err != nil {
		return err
	}
	key, _ := n.key()
	n.cmu.Lock()
	defer n.cmu.Unlock()
	n.dropSpentStageLocked()
	if err := n.ensureStageLocked(ctx, size); err != nil {
		return err
	}
	if err := n.checkStreamChangeLocked(key, size, size, true); err != nil {
		return err
	}
	if err := n.stage.Truncate(size); err != nil {
		n.mu.Lock()
		n.failStageLocked(err)
		n.mu.Unlock()
		return fmt.Errorf("truncate staging file: %w", err)
	}
	if size == 0 {
		n.resetStreamHolesLocked()
	}
	n.mu.Lock()
	if size == 0 {
		n.stageErr = nil // nothing of the failed content is left
		n.state.set(stReplacing, !n.pending)
	}
	if n.up != nil && n.up.below(size) {
		n.up.drop()
		n.up = nil
		n.state.set(stNoStream, true)
	}
	n.fsys.stagingBytes.Add(size - n.size)
	n.size = size
	now := time.Now()
	n.attr.Mtime, n.attr.Ctime = now, now
	wasDirty := n.state.has(stDirty)
	n.markDirtyLocked()
	n.state.set(stOpenChangeOnly, atOpen && !wasDirty)
	n.mu.Unlock()
	return nil
}

// releaseHandle drops a handle. The last one commits what is still dirty
// (a flush that failed, or writes through a shared mapping) and drops the
// staging file.
func (n *fileNode) releaseHandle(h *fileHandle) {
	h.closeReader()
	n.mu.Lock()
	n.openCount--
	last := n.openCount == 0
	dirty := n.state.has(stDirty) && !n.unlinked
	n.mu.Unlock()
	if !last {
		return
	}
	key, _ := n.key()
	if dirty {
		// Release cannot report an error: this is the last chance. Nobody
		// waits for it: while the storage is known down it fails at once
		// rather than hold the node (and the journal) for a check.
		if err := n.commit(objstore.Unwaited(n.fsys.ctx)); err != nil {
			n.fsys.log.Error("file released with uncommitted changes; they are lost",
				"key", key, "err", err)
		}
	}
	n.dropStage()
}

// dropStage removes the staging file, and forgets uncommitted changes, once
// no handle needs them any more.
func (n *fileNode) dropStage() {
	forget := false
	defer func() {
		if forget {
			n.forgetName()
		}
	}()
	n.opMu.Lock()
	defer n.opMu.Unlock()
	n.cmu.Lock()
	defer n.cmu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.openCount > 0 {
		return
	}
	if n.state.has(stDirty) && !n.unlinked {
		// Failed commit: the data is lost (logged by the caller). Show
		// the store's version again; a file that was never committed
		// does not exist.
		n.fetched = time.Time{}
		n.keepETag = ""
		if n.pending {
			// Never stored: the name must not keep pointing here.
			n.unlinked = true
			forget = true
		}
	}
	n.state.set(stReplacing, false)
	n.setCleanLocked()
	if n.up != nil {
		n.up.drop()
		n.up = nil
	}
	if n.stage != nil {
		n.stage.Close()
		n.stage = nil
		n.resetStreamHolesLocked()
		n.fsys.stagingBytes.Add(-n.size)
	}
	n.unknownWID = ""
	n.state.set(stSpent, false)
	n.fsys.untrack(n)
	if !n.pending && !n.unlinked {
		n.size = n.info.Size
	}
}

// preserveForReadersLocked keeps the content readable for open handles before
// the object is deleted or replaced (unlink, rename over): an open file
// keeps its data, as POSIX requires. LOCKS_REQUIRED(n.opMu)
func (n *fileNode) preserveForReadersLocked(ctx context.Context) error {
	n.mu.Lock()
	open := n.openCount > 0
	n.mu.Unlock()
	if !open {
		return nil
	}
	n.cmu.Lock()
	defer n.cmu.Unlock()
	n.dropSpentStageLocked()
	return n.ensureStageLocked(ctx, -1)
}

// markUnlinked records that the node's name is gone: later commits are
// dropped and fstat shows nlink 0.
func (n *fileNode) markUnlinked() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.unlinked = true
	n.setCleanLocked()
	if n.up != nil { // its content can no longer be committed
		n.up.drop()
		n.up = nil
	}
}
