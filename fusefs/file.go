package fusefs

import (
	"bytes"
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
	"golang.org/x/sys/unix"
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
type fileNode struct {
	fs.Inode
	nodeBase

	// cmu guards the staging file: Lock to create, write or truncate it,
	// RLock to read it or to upload it (so a commit sees a stable body).
	cmu   sync.RWMutex
	stage *os.File // GUARDED_BY(cmu); nil while the content is only in the store

	// GUARDED_BY(mu) (nodeBase.mu):
	size      int64  // current size (of the staging file when there is one)
	pending   bool   // created by this mount and never committed: no object yet
	dirty     bool   // local changes (content or metadata) not committed
	gen       uint64 // bumped by every local change; a commit clears dirty only if unchanged
	unlinked  bool   // unlinked or replaced: commits are dropped
	openCount int
	keepETag  string        // ETag the kernel's page cache holds (FOPEN_KEEP_CACHE)
	up        *streamUpload // the staged content's upload in progress (stream.go); nil if none
	noStream  bool          // a stream was dropped: none until the next commit
	// stageErr is why a write to the staging file failed (a full cache
	// disk: ENOSPC): the staged content is not what the application
	// wrote, so it is never committed. Every commit reports stageErr
	// until the last handle is released, which discards the changes (the
	// file shows the store's version again), or a truncate to 0 makes the
	// content whole again.
	stageErr error
	// openChangeOnly: the only uncommitted change is what an open made (a
	// new empty file, or an O_TRUNC to 0), with nothing written since. A
	// handle's first FLUSH then commits nothing (see fileHandle.Flush).
	openChangeOnly bool
	// replacing: the staged content was written from empty (O_TRUNC or a
	// truncate to 0) and uses nothing of the base version, so a commit
	// refused because an older epoch changed the object may be retried on
	// the current version (replace.go).
	replacing bool
	// dirtySince is when the node became dirty (Unix nanoseconds; 0 while
	// clean), set with dirty; atomic so the dirty-age gauge reads it
	// without n.mu.
	dirtySince atomic.Int64
}

var _ = (fs.InodeEmbedder)((*fileNode)(nil))

func newFileNode(fsys *filesystem, info objstore.ObjectInfo) *fileNode {
	n := &fileNode{}
	n.init(fsys, &n.Inode, kindFile, info)
	n.size = info.Size
	return n
}

// localStateLocked reports whether the node holds state the store does not
// have, or must not be refreshed because handles pin its version.
// LOCKS_REQUIRED(n.mu)
func (n *fileNode) localStateLocked() bool {
	return n.openCount > 0 || n.pending || n.dirty || n.unlinked
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

// update takes a version found by a lookup, unless local state pins the
// node.
func (n *fileNode) update(info objstore.ObjectInfo) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.localStateLocked() {
		return
	}
	n.setInfoLocked(info)
	n.size = info.Size
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
	ctx, cancel := n.fsys.opctx(ctx)
	defer cancel()
	if err := n.refresh(ctx); err != nil {
		k, _ := n.key()
		return n.fsys.errno("getattr", k, err)
	}
	n.fillAttr(&out.Attr)
	n.fsys.leaderAttrTimeout(out)
	return 0
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
		if err := n.fsys.checkWritable(); err != nil {
			return nil, 0, n.fsys.errno("open", key, err)
		}
	}
	if err := n.refresh(ctx); err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			// Deleted elsewhere while the kernel kept the name: ESTALE
			// below makes it look again (an O_CREAT then creates).
			n.markUnlinked()
		} else {
			return nil, 0, n.fsys.errno("open", key, err)
		}
	}
	n.mu.Lock()
	if n.unlinked && n.openCount == 0 {
		// The kernel still has a name for a node whose object is gone
		// or was never stored (a refused create): ESTALE makes it look
		// the name up again (LOOKUP_REVAL) and open or create what the
		// store has, instead of writing into a node no commit stores.
		n.mu.Unlock()
		return nil, 0, n.fsys.errno("open", key, fmt.Errorf("%w: %s: the name no longer refers to this file", fencing.ErrStale, key))
	}
	n.openCount++
	etag := n.info.ETag
	var fuseFlags uint32
	if n.keepETag != "" && n.keepETag == etag && flags&syscall.O_TRUNC == 0 {
		fuseFlags |= fuse.FOPEN_KEEP_CACHE
	}
	n.keepETag = etag
	n.mu.Unlock()
	h := &fileHandle{node: n, appending: flags&syscall.O_APPEND != 0, keepCache: fuseFlags&fuse.FOPEN_KEEP_CACHE != 0}
	if flags&syscall.O_TRUNC != 0 {
		if err := n.truncateAt(ctx, 0, true); err != nil {
			n.releaseHandle(h)
			return nil, 0, n.fsys.errno("open", key, err)
		}
	}
	return h, fuseFlags, 0
}

// ensureStage makes sure the node has a staging file holding its current
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
		n.replacing = true
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

// markDirty records a local change. It reports whether the node just became
// dirty: the caller then tells the Guard with prepare (outside the node's
// locks), which lets it write its intent ahead of the commit.
// LOCKS_REQUIRED(n.mu)
func (n *fileNode) markDirtyLocked() bool {
	defer n.checkInvariantsLocked()
	n.gen++
	n.openChangeOnly = false
	if n.dirty {
		return false
	}
	n.dirty = true
	n.dirtySince.Store(time.Now().UnixNano())
	n.fsys.dirtyFiles.Add(1)
	n.fsys.track(n)
	return !n.unlinked
}

// track adds n to the nodes Unmount must look at (dirty or staged).
func (fsys *filesystem) track(n *fileNode) {
	fsys.nodesMu.Lock()
	fsys.staged[n] = struct{}{}
	fsys.nodesMu.Unlock()
}

func (fsys *filesystem) untrack(n *fileNode) {
	fsys.nodesMu.Lock()
	delete(fsys.staged, n)
	fsys.nodesMu.Unlock()
}

// prepare passes the Guard the hint that key is about to be committed on
// base, so that the intent is written while the application still writes.
func (fsys *filesystem) prepare(key string, base fencing.Version) {
	if key != "" && fsys.guard != nil {
		fsys.guard.PrepareBase(key, base)
	}
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

// LOCKS_REQUIRED(n.mu)
func (n *fileNode) setCleanLocked() {
	defer n.checkInvariantsLocked()
	n.noStream = false
	n.openChangeOnly = false
	n.stageErr = nil
	if n.dirty {
		n.dirty = false
		n.dirtySince.Store(0)
		n.fsys.dirtyFiles.Add(-1)
	}
}

// failStageLocked records a failed write to the staging file (see
// stageErr); the node is dirty from then on, so that a commit reports it.
// LOCKS_REQUIRED(n.mu)
func (n *fileNode) failStageLocked(err error) {
	if n.stageErr == nil {
		n.stageErr = err
		key, _ := n.key()
		n.fsys.log.Warn("writing the staging file failed; the file's changes will not be stored",
			"key", key, "cache_dir", n.fsys.opts.CacheDir, "err", err)
	}
	n.markDirtyLocked()
}

// write stores data at off in the staging file; off < 0 appends at the end
// of the staged content.
func (n *fileNode) write(ctx context.Context, data []byte, off int64) (uint32, error) {
	if err := n.fsys.checkWritable(); err != nil {
		return 0, err
	}
	key, _ := n.key()
	n.cmu.Lock()
	defer n.cmu.Unlock()
	if err := n.ensureStageLocked(ctx, -1); err != nil {
		return 0, err
	}
	n.mu.Lock()
	prev := n.size
	n.mu.Unlock()
	if off < 0 {
		off = prev
	}
	w, err := n.stage.WriteAt(data, off)
	n.mu.Lock()
	if end := off + int64(w); end > n.size {
		n.fsys.stagingBytes.Add(end - n.size)
		n.size = end
	}
	prep := false
	if w > 0 {
		now := time.Now()
		n.attr.Mtime, n.attr.Ctime = now, now
		prep = n.markDirtyLocked()
	}
	base := n.baseLocked()
	size := n.size
	n.mu.Unlock()
	if prep {
		n.fsys.prepare(key, base)
	}
	if err != nil {
		n.mu.Lock()
		n.failStageLocked(err)
		n.mu.Unlock()
	}
	if w > 0 || err != nil {
		n.streamWriteLocked(key, off, off+int64(w), prev, size)
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
// open-time change (openChangeOnly) when nothing else was uncommitted.
func (n *fileNode) truncateAt(ctx context.Context, size int64, atOpen bool) error {
	if err := n.fsys.checkWritable(); err != nil {
		return err
	}
	key, _ := n.key()
	n.cmu.Lock()
	defer n.cmu.Unlock()
	if err := n.ensureStageLocked(ctx, size); err != nil {
		return err
	}
	if err := n.stage.Truncate(size); err != nil {
		n.mu.Lock()
		n.failStageLocked(err)
		n.mu.Unlock()
		return fmt.Errorf("truncate staging file: %w", err)
	}
	n.mu.Lock()
	if size == 0 {
		n.stageErr = nil // nothing of the failed content is left
		n.replacing = !n.pending
	}
	if n.up != nil && n.up.touches(size) {
		n.dropStreamLocked()
	}
	n.fsys.stagingBytes.Add(size - n.size)
	n.size = size
	now := time.Now()
	n.attr.Mtime, n.attr.Ctime = now, now
	wasDirty := n.dirty
	prep := n.markDirtyLocked()
	n.openChangeOnly = atOpen && !wasDirty
	base := n.baseLocked()
	n.mu.Unlock()
	if prep {
		n.fsys.prepare(key, base)
	}
	return nil
}

// commit writes the node's local changes through the Guard: the staged
// content (or the unchanged object content when only metadata changed) with
// the node's metadata, conditioned on the version the node came from (or on
// absence, for a file this mount created). It returns nil when there is
// nothing to commit. The error is what close(2) and fsync(2) report.
func (n *fileNode) commit(ctx context.Context) error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	return n.commitLocked(ctx)
}

// LOCKS_REQUIRED(n.opMu)
func (n *fileNode) commitLocked(ctx context.Context) error {
	n.cmu.RLock()
	defer n.cmu.RUnlock()
	n.mu.Lock()
	if !n.dirty {
		n.mu.Unlock()
		return nil
	}
	key, ok := n.key()
	if n.unlinked || !ok {
		n.unlinked = true
		n.setCleanLocked()
		n.mu.Unlock()
		return nil
	}
	if err := n.stageErr; err != nil {
		n.mu.Unlock()
		return fmt.Errorf("commit %s: not stored: a write to the staging file failed (%w); the file keeps its stored version once every descriptor is closed", key, err)
	}
	gen, size, pending, replacing := n.gen, n.size, n.pending, n.replacing
	base := n.baseLocked()
	meta := encodeAttr(n.attr, contentMeta(n.info.Meta))
	n.mu.Unlock()

	var body io.ReaderAt = bytes.NewReader(nil)
	if n.stage != nil {
		body = n.stage
	} else if size != 0 {
		return fmt.Errorf("commit %s: %d bytes but no staged content", key, size)
	}
	put := func(base fencing.Version) (objstore.ObjectInfo, error) {
		return n.fsys.guard.Put(ctx, key, body, size, base, meta)
	}
	var info objstore.ObjectInfo
	var err error
	start := time.Now()
	streamed := false
	if n.stage != nil && size > 0 {
		info, streamed, err = n.commitStream(ctx, key, size, meta)
		if streamed && err == nil {
			meta = streamMeta(meta)
		}
		if streamed && replacing && isConflict(err) {
			streamed, err = false, nil // retried below, as a Put
		}
		if streamed && pending && errors.Is(err, fencing.ErrStale) {
			err = fmt.Errorf("%w: %s was created concurrently (%v)", errExist, key, err)
		}
	}
	switch {
	case streamed:
	case pending:
		info, err = n.fsys.createRetry(ctx, key, put)
	default:
		info, err = put(base)
	}
	if err != nil && replacing && (isConflict(err) || errors.Is(err, errExist)) {
		if cur, ok := n.fsys.replacementBase(ctx, key); ok {
			info, err = put(cur)
		}
	}
	if pending && errors.Is(err, errExist) {
		// Another client created the name first: this file can never be
		// stored there. Like an unlinked file it stays readable through
		// its open handles, but the name now shows the other object, and
		// later writes are dropped.
		n.mu.Lock()
		n.unlinked = true
		n.setCleanLocked()
		n.mu.Unlock()
		n.forgetName()
		err = fmt.Errorf("%w: %v", fencing.ErrStale, err)
	}
	if err != nil {
		return fmt.Errorf("commit %s: %w", key, err)
	}
	info = mergeInfo(info, key, size, meta)
	n.fsys.log.Debug("committed", "key", key, "size", size, "etag", info.ETag, "took", time.Since(start))
	n.mu.Lock()
	defer n.mu.Unlock()
	n.info = info
	n.fetched = time.Now()
	n.pending = false
	n.replacing = false
	n.keepETag = info.ETag
	if n.gen == gen {
		n.setCleanLocked()
		if n.stage == nil {
			n.fsys.untrack(n)
		}
	}
	return nil
}

// forgetName asks the kernel to drop its cached directory entry of the
// node, so that the next lookup of the name asks us (and finds what the
// store holds). Sent from a goroutine: an entry notification waits for the
// directory's lock, which the request being served may hold.
func (n *fileNode) forgetName() {
	name, parent := n.Parent()
	if parent == nil {
		return
	}
	go func() {
		if errno := parent.NotifyEntry(name); errno != 0 && errno != syscall.ENOENT {
			n.fsys.log.Debug("cannot invalidate a kernel directory entry", "name", name, "errno", errno)
		}
	}()
}

// contentMeta is the metadata kept when the content is rewritten: everything
// but checksums of the old content that other tools store.
func contentMeta(m map[string]string) map[string]string {
	if _, ok := m["md5chksum"]; !ok {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if k != "md5chksum" {
			out[k] = v
		}
	}
	return out
}

// releaseHandle drops a handle. The last one commits what is still dirty
// (a flush that failed, or writes through a shared mapping) and drops the
// staging file.
func (n *fileNode) releaseHandle(h *fileHandle) {
	h.closeReader()
	n.mu.Lock()
	n.openCount--
	last := n.openCount == 0
	dirty := n.dirty && !n.unlinked
	n.mu.Unlock()
	if !last {
		return
	}
	key, _ := n.key()
	if dirty {
		// Release cannot report an error: this is the last chance.
		if err := n.commit(n.fsys.ctx); err != nil {
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
	if n.dirty && !n.unlinked {
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
	n.replacing = false
	n.setCleanLocked()
	if n.up != nil {
		n.up.drop()
		n.up = nil
	}
	if n.stage != nil {
		n.stage.Close()
		n.stage = nil
		n.fsys.stagingBytes.Add(-n.size)
	}
	n.fsys.untrack(n)
	if !n.pending && !n.unlinked {
		n.size = n.info.Size
	}
}

// preserveForReaders keeps the content readable for open handles before
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

var _ = (fs.NodeSetattrer)((*fileNode)(nil))

// Setattr handles truncate, chmod, chown and utimens. A size change is
// staged and committed on close (ftruncate), or at once (truncate(2)). Metadata changes ride along with pending content changes, or
// are stored at once by a self-copy of the object.
func (n *fileNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	ctx, cancel := n.fsys.mutctx(ctx)
	defer cancel()
	key, _ := n.key()
	if err := n.setattr(ctx, f, in); err != nil {
		return n.fsys.errno("setattr", key, err)
	}
	n.fillAttr(&out.Attr)
	return 0
}

func (n *fileNode) setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn) error {
	if err := n.fsys.checkWritable(); err != nil {
		return err
	}
	if size, ok := in.GetSize(); ok {
		if err := n.truncate(ctx, int64(size)); err != nil {
			return err
		}
		if f == nil {
			// truncate(2) by path: no close will follow, commit now (with
			// whatever else is staged). The staging file goes when no
			// handle needs it.
			err := n.commit(ctx)
			n.dropStage()
			if err != nil {
				return err
			}
		}
	}
	mutate, ok := setattrMutation(ctx, in)
	if !ok {
		return nil
	}
	return n.updateMeta(ctx, mutate)
}

// updateMeta applies a metadata change: locally when content changes are
// pending (committed with them), else through a self-copy.
func (n *fileNode) updateMeta(ctx context.Context, mutate func(*posixAttr) error) error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	n.mu.Lock()
	if n.dirty || n.pending || n.unlinked {
		a := n.attr.clone()
		err := mutate(&a)
		if err == nil {
			a.Ctime = time.Now()
			err = checkMetaSize(encodeAttr(a, n.info.Meta))
		}
		prep := false
		if err == nil {
			n.attr = a
			if !n.unlinked {
				prep = n.markDirtyLocked()
			}
		}
		base := n.baseLocked()
		n.mu.Unlock()
		if prep {
			key, _ := n.key()
			n.fsys.prepare(key, base)
		}
		return err
	}
	n.mu.Unlock()
	if err := n.updateMetaRemote(ctx, mutate); err != nil {
		return err
	}
	n.mu.Lock()
	n.keepETag = n.info.ETag
	n.mu.Unlock()
	return nil
}

var _ = (fs.NodeStatfser)((*fileNode)(nil))

// Statfs reports the filesystem's (fixed) capacity, for df on a file.
func (n *fileNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	statfsOut(out)
	return 0
}

var _ = (fs.NodeGetxattrer)((*fileNode)(nil))

// Getxattr reads a user attribute or user.fencefs.stamp.
func (n *fileNode) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	sz, err := n.getxattr(attr, dest)
	if err != nil {
		k, _ := n.key()
		return sz, n.fsys.errno("getxattr", k, err)
	}
	return sz, 0
}

var _ = (fs.NodeListxattrer)((*fileNode)(nil))

// Listxattr lists the user attributes.
func (n *fileNode) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	sz, err := copyXattr(dest, n.listxattr(nil))
	return sz, toErrno(err)
}

var _ = (fs.NodeSetxattrer)((*fileNode)(nil))

// Setxattr stores a user attribute (E2BIG when the object's metadata would
// overflow).
func (n *fileNode) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	ctx, cancel := n.fsys.mutctx(ctx)
	defer cancel()
	k, _ := n.key()
	mutate, err := xattrSetMutation(attr, data, flags)
	if err == nil {
		err = n.updateMeta(ctx, mutate)
	}
	return n.fsys.errno("setxattr", k, err)
}

var _ = (fs.NodeRemovexattrer)((*fileNode)(nil))

// Removexattr removes a user attribute.
func (n *fileNode) Removexattr(ctx context.Context, attr string) syscall.Errno {
	ctx, cancel := n.fsys.mutctx(ctx)
	defer cancel()
	k, _ := n.key()
	mutate, err := xattrRemoveMutation(attr)
	if err == nil {
		err = n.updateMeta(ctx, mutate)
	}
	return n.fsys.errno("removexattr", k, err)
}

// fileHandle is one open file description.
type fileHandle struct {
	node *fileNode
	// appending: opened with O_APPEND. The kernel computes an append's
	// offset from the size it cached at lookup, which can be older than the
	// version Open pinned (another mount appended in between): writing at
	// that offset would overwrite the other mount's bytes. Such writes go to
	// the end of the staged content instead.
	appending bool

	mu sync.Mutex
	rd *reader // GUARDED_BY(mu): ranged reads from the store, created on first read
	// delivered counts the bytes read from the store through rd; a read
	// that delivered none may move to a newer version (replace.go).
	delivered int64 // GUARDED_BY(mu)
	// keepCache: opened with FOPEN_KEEP_CACHE (the kernel may serve pages
	// of the pinned version without asking): never moves to another version.
	keepCache bool
}

var _ = (fs.FileReader)((*fileHandle)(nil))

// Read reads from the staging file when there is one, else from the store
// with ranged GETs pinned to the node's ETag, with readahead for sequential
// reads. An object that changed since it was opened reads as ESTALE.
func (h *fileHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n := h.node
	n.cmu.RLock()
	if n.stage != nil {
		defer n.cmu.RUnlock()
		nr, err := n.stage.ReadAt(dest, off)
		if err != nil && err != io.EOF {
			k, _ := n.key()
			return nil, n.fsys.errno("read", k, err)
		}
		return fuse.ReadResultData(dest[:nr]), 0
	}
	n.cmu.RUnlock()

	key, err := n.keyOrErr()
	if err != nil {
		return nil, n.fsys.errno("read", "", err)
	}
	ctx, cancel := n.fsys.opctx(ctx)
	defer cancel()
	n.mu.Lock()
	etag, size := n.info.ETag, n.size
	n.mu.Unlock()
	h.mu.Lock()
	if h.rd == nil || h.rd.etag != etag {
		if h.rd != nil {
			h.rd.close()
		}
		h.rd = newReader(n.fsys, etag, size)
	}
	rd := h.rd
	h.mu.Unlock()
	res, err := h.readFrom(ctx, rd, key, dest, off)
	for attempt := 0; isConflict(err) && attempt < maxReadRebase; attempt++ {
		// The object changed since the handle pinned it: a handle that
		// returned nothing yet takes the current version instead.
		var ok bool
		if rd, ok = h.rebase(ctx, rd, key); !ok {
			break
		}
		res, err = h.readFrom(ctx, rd, key, dest, off)
	}
	if isConflict(err) {
		// The version is gone: the next open asks the store again
		// instead of trusting the cache until MetaCacheTTL.
		n.mu.Lock()
		if !n.dirty && !n.pending {
			n.fetched, n.keepETag = time.Time{}, ""
		}
		n.mu.Unlock()
	}
	if err != nil {
		return nil, n.fsys.errno("read", key, err)
	}
	return res, 0
}

// readFrom serves one READ from rd. A success is counted as delivered
// unless rd was replaced meanwhile: then its bytes may be of the older
// version while others were read from the newer one, and the read is
// ESTALE instead.
func (h *fileHandle) readFrom(ctx context.Context, rd *reader, key string, dest []byte, off int64) (fuse.ReadResult, error) {
	if off >= rd.size {
		return fuse.ReadResultData(nil), nil
	}
	want := int64(len(dest))
	if off+want > rd.size {
		want = rd.size - off
	}
	res, err := rd.read(ctx, key, dest[:want], off)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rd != rd {
		res.Done()
		return nil, fmt.Errorf("%w: %s changed while being read", fencing.ErrStale, key)
	}
	h.delivered += int64(res.Size())
	return res, nil
}

func (h *fileHandle) closeReader() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rd != nil {
		h.rd.close()
		h.rd = nil
	}
}

var _ = (fs.FileWriter)((*fileHandle)(nil))

// Write stages data; it is committed on flush, fsync or release.
func (h *fileHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	ctx, cancel := h.node.fsys.opctx(ctx)
	defer cancel()
	if h.appending {
		off = -1
	}
	w, err := h.node.write(ctx, data, off)
	if err != nil {
		k, _ := h.node.key()
		return w, h.node.fsys.errno("write", k, err)
	}
	return w, 0
}

var _ = (fs.FileFlusher)((*fileHandle)(nil))

// Flush (every close(2) of a descriptor) commits pending changes; its error
// is what close returns.
// One exception, for shell redirects and dd (see flush.go): nothing is
// committed while the only change is the open's own and the closing
// process still holds the file through another descriptor.
func (h *fileHandle) Flush(ctx context.Context) syscall.Errno {
	n := h.node
	n.mu.Lock()
	openOnly := n.dirty && n.openChangeOnly
	n.mu.Unlock()
	if caller, ok := fuse.FromContext(ctx); ok && openOnly && n.fsys.stillOpenIn(caller.Pid, n.StableAttr().Ino) {
		return 0
	}
	ctx, cancel := h.node.fsys.mutctx(ctx)
	defer cancel()
	if err := h.node.commit(ctx); err != nil {
		k, _ := h.node.key()
		return h.node.fsys.errno("flush", k, err)
	}
	return 0
}

var _ = (fs.FileFsyncer)((*fileHandle)(nil))

// Fsync commits pending changes: success means the data is stored under an
// epoch that was still valid at the commit.
func (h *fileHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	ctx, cancel := h.node.fsys.mutctx(ctx)
	defer cancel()
	if err := h.node.commit(ctx); err != nil {
		k, _ := h.node.key()
		return h.node.fsys.errno("fsync", k, err)
	}
	return 0
}

var _ = (fs.FileReleaser)((*fileHandle)(nil))

// Release drops the handle (see fileNode.releaseHandle).
func (h *fileHandle) Release(ctx context.Context) syscall.Errno {
	h.node.releaseHandle(h)
	return 0
}

var _ = (fs.FileAllocater)((*fileHandle)(nil))

// Allocate implements fallocate: mode 0 grows the file to off+size
// (zero-filled, committed on close); FALLOC_FL_KEEP_SIZE only reserves
// space, which an object store does not need, so it succeeds doing nothing.
// Other modes (punching or collapsing ranges) are not supported.
func (h *fileHandle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	ctx, cancel := h.node.fsys.mutctx(ctx)
	defer cancel()
	n := h.node
	k, _ := n.key()
	switch mode {
	case 0:
	case unix.FALLOC_FL_KEEP_SIZE:
		return n.fsys.errno("fallocate", k, n.fsys.checkWritable())
	default:
		return n.fsys.errno("fallocate", k, fmt.Errorf("%w: fallocate mode %#x", errNotSupported, mode))
	}
	n.mu.Lock()
	cur := n.size
	n.mu.Unlock()
	if end := int64(off + size); end > cur {
		if err := n.truncate(ctx, end); err != nil {
			return n.fsys.errno("fallocate", k, err)
		}
	}
	return 0
}
