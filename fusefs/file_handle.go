package fusefs

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// fileHandle is one open file description.
type fileHandle struct {
	node *fileNode
	// appending: opened with O_APPEND. The kernel computes an append's
	// offset from the size it cached at lookup, which can be older than the
	// version Open pinned (another mount appended in between): writing at
	// that offset would overwrite the other mount's bytes. Such writes go to
	// the end of the staged content instead.
	appending bool
	// writable: opened for writing. Only its close stores a pending
	// attribute change (attrwb.go): a reader's close(2) never reports the
	// failure of a chmod it did not make.
	writable bool

	mu sync.Mutex
	rd *reader // GUARDED_BY(mu): ranged reads from the store, created on first read
	// delivered counts the bytes read from the store through rd; a read
	// that delivered none may move to a newer version (rebase).
	delivered int64 // GUARDED_BY(mu)
	// keepCache: opened with FOPEN_KEEP_CACHE (the kernel may serve pages
	// of the pinned version without asking): never moves to another version.
	keepCache bool
	// key is the object's key at open: the reads of a superseded node,
	// which is no longer in the tree, use it (file_capture.go).
	key string
	// gen is the content's gen after this handle's last change (a write,
	// an O_TRUNC at its open, an ftruncate, a fallocate); 0 while it made
	// none. GUARDED_BY(node.mu)
	gen uint64
}

// changed records that the handle just changed the content.
func (h *fileHandle) changed() {
	n := h.node
	g := n.c.genNow()
	n.mu.Lock()
	if h.gen == 0 {
		n.changers++
	}
	h.gen = g
	n.mu.Unlock()
}

// flushCommits reports whether a FLUSH of h commits the content: when h
// holds changes not stored yet, or no other open handle changed the
// content (the changes are a path truncate's, or a failed commit's). A
// flush never publishes what another open handle is writing (an O_TRUNC
// followed by half of its writes): that handle's own close does.
func (h *fileHandle) flushCommits() bool {
	n := h.node
	stored := n.c.storedGenNow()
	n.mu.Lock()
	defer n.mu.Unlock()
	others := n.changers
	if h.gen != 0 {
		others--
	}
	return h.gen > stored || others == 0
}

// readKey returns the key to read the handle's version from.
func (h *fileHandle) readKey() (string, error) {
	key, err := h.node.keyOrErr()
	if err != nil && h.key != "" {
		n := h.node
		n.mu.Lock()
		superseded := n.superseded
		n.mu.Unlock()
		if superseded {
			return h.key, nil
		}
	}
	return key, err
}

var _ = (fs.FileReader)((*fileHandle)(nil))

// Read reads from the staging file when there is one, else from the store
// with ranged GETs pinned to the node's ETag, with readahead for sequential
// reads. An object that changed since it was opened reads as ESTALE.
func (h *fileHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n := h.node
	if nr, staged, err := n.c.readAt(dest, off); staged {
		if err != nil {
			k, _ := n.key()
			return nil, n.fsys.errno("read", k, err)
		}
		return fuse.ReadResultData(dest[:nr]), 0
	}

	key, err := h.readKey()
	if err != nil {
		return nil, n.fsys.errno("read", "", err)
	}
	ctx, cancel := n.fsys.opctx(ctx)
	defer cancel()
	n.mu.Lock()
	etag, size := n.info.ETag, n.c.sizeNow()
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
	shrunk := false
	for attempt := 0; isConflict(err) && attempt < maxReadRebase; attempt++ {
		// The object changed since the handle pinned it: a handle that
		// returned nothing yet takes the current version instead.
		var ok, s bool
		if rd, ok, s = h.rebase(ctx, rd, key); !ok {
			break
		}
		shrunk = shrunk || s
		res, err = h.readFrom(ctx, rd, key, dest, off)
	}
	if shrunk {
		// The kernel's size is the old, larger one. It takes the new
		// one from this READ's short reply unless its attributes were
		// invalidated while the READ was in flight — then it fills the
		// rest of the page with zeros up to the old size. So the
		// invalidation waits for the reply.
		if err != nil {
			n.NotifyContent(-1, 0)
		} else {
			res = afterReply{ReadResult: res, after: func() { n.NotifyContent(-1, 0) }}
		}
	}
	if isConflict(err) {
		// The version is gone: the next open asks the store again
		// instead of trusting the cache until MetaCacheTTL.
		n.mu.Lock()
		if !n.c.flags().any(stDirty | stPending) {
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
	if w > 0 {
		h.changed()
	}
	if err != nil {
		k, _ := h.node.key()
		return w, h.node.fsys.mutationErrno(ctx, "write", k, err)
	}
	return w, 0
}

var _ = (fs.FileFlusher)((*fileHandle)(nil))

// Flush (every close(2) of a descriptor) commits pending changes; its error
// is what close returns.
// One exception, for shell redirects and dd (see file_handle_dupclose.go): nothing is
// committed while the only change is the open's own and the closing
// process still holds the file through another descriptor.
func (h *fileHandle) Flush(ctx context.Context) syscall.Errno {
	n := h.node
	openOnly := n.c.flags().has(stDirty | stOpenChangeOnly)
	if caller, ok := fuse.FromContext(ctx); ok && openOnly && n.fsys.stillOpenIn(caller.Pid, n.StableAttr().Ino) {
		return 0
	}
	ctx, cancel := h.node.fsys.mutctx(ctx)
	defer cancel()
	var err error
	switch {
	case h.flushCommits():
		err = h.node.sync(ctx, h.writable)
	case h.writable:
		err = h.node.storePendingAttr(ctx)
	}
	if err = h.node.c.reportRefusal(ctx, err); err != nil {
		k, _ := h.node.key()
		return h.node.fsys.mutationErrno(ctx, "flush", k, err)
	}
	return 0
}

var _ = (fs.FileFsyncer)((*fileHandle)(nil))

// Fsync commits pending changes (content and attributes): success means
// they are stored under an epoch that was still valid at the commit.
func (h *fileHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	ctx, cancel := h.node.fsys.mutctx(ctx)
	defer cancel()
	if err := h.node.c.reportRefusal(ctx, h.node.sync(ctx, true)); err != nil {
		k, _ := h.node.key()
		return h.node.fsys.mutationErrno(ctx, "fsync", k, err)
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
		return n.fsys.mutationErrno(ctx, "fallocate", k, n.fsys.checkWritable("fallocate"))
	default:
		return n.fsys.mutationErrno(ctx, "fallocate", k, fmt.Errorf("%w: fallocate mode %#x", errNotSupported, mode))
	}
	cur := n.c.sizeNow()
	if end := int64(off + size); end > cur {
		if err := n.truncate(ctx, end); err != nil {
			return n.fsys.mutationErrno(ctx, "fallocate", k, err)
		}
		h.changed()
	}
	return 0
}

// Moving to the current version of an object instead of failing with ESTALE,
// where nothing can be inconsistent (a whole-file replacement's commit is
// moved by the Guard: fencing/replace.go):
//
//   - a read handle that has returned no byte yet has nothing to be
//     inconsistent with: a read refused because the object changed since the
//     open takes the current version (maxReadRebase times at most), unless
//     the kernel may already hold pages of the old version (FOPEN_KEEP_CACHE,
//     or another handle open on the node).

// maxReadRebase bounds how often one READ moves to a newer version (a writer
// replacing the object in a loop could otherwise keep a reader chasing it).
const maxReadRebase = 3

// rebase moves a read handle that has delivered nothing from rd, whose
// version is gone, to the object's current version, and returns the reader
// to retry with. ok is false when the handle must report ESTALE.
func (h *fileHandle) rebase(ctx context.Context, rd *reader, key string) (_ *reader, ok, shrunk bool) {
	n := h.node
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.delivered > 0 || h.keepCache {
		return nil, false, false
	}
	if h.rd != rd && h.rd != nil {
		return h.rd, true, h.rd.size < rd.size // a concurrent READ of this handle moved it already
	}
	n.mu.Lock()
	alone := n.openCount == 1 && !n.c.local()
	n.mu.Unlock()
	if !alone {
		return nil, false, false
	}
	cur, err := n.fsys.store.Stat(ctx, key)
	if err != nil || fencing.IsTombstone(cur) {
		return nil, false, false
	}
	n.mu.Lock()
	if n.openCount != 1 || n.c.flags().has(stDirty) {
		n.mu.Unlock()
		return nil, false, false
	}
	n.setInfoLocked(cur)
	n.c.setStoredSize(cur.Size)
	n.keepETag = cur.ETag
	n.mu.Unlock()
	if h.rd != nil {
		h.rd.close()
	}
	h.rd = newReader(n.fsys, cur.ETag, cur.Size)
	n.fsys.metrics.readRebases.Inc()
	n.fsys.log.Debug("read moved to the current version", "key", key, "etag", cur.ETag)
	if cur.Size < rd.size {
		return h.rd, true, true // the caller invalidates after its reply
	}
	// The kernel's size of the file is the old version's: drop its cached
	// attributes (only those: no page is locked by this) so that a read
	// past it asks for the new size.
	n.NotifyContent(-1, 0)
	return h.rd, true, false
}

// afterReply is a READ's reply that runs after once go-fuse has written
// it (fuse.ReadResult's Done).
type afterReply struct {
	fuse.ReadResult
	after func()
}

func (r afterReply) Done() {
	r.ReadResult.Done()
	r.after()
}

// releaseHandle drops a handle. The last one commits what is still dirty
// (a flush that failed, or writes through a shared mapping) and drops the
// staging file, unless a handle opened since its decision: that handle's
// changes are its own (commitReleased).
func (n *fileNode) releaseHandle(h *fileHandle) {
	h.closeReader()
	n.mu.Lock()
	n.openCount--
	if h.gen != 0 {
		n.changers--
	}
	last, count := n.openCount == 0, n.openCount
	n.mu.Unlock()
	if invariantChecks && count < 0 {
		key, _ := n.key()
		panic(fmt.Sprintf("fusefs: file node %q: negative open count", key))
	}
	if !last {
		return
	}
	key, _ := n.key()
	if hook := n.fsys.opts.BeforeReleaseCommit; hook != nil {
		hook(n.fsys.ctx, key) // tests: an open may begin here
	}
	if f := n.c.flags(); f.has(stDirty) && !f.has(stUnlinked) {
		// Release cannot report an error: this is the last chance. Nobody
		// waits for it: while the storage is known down it fails at once
		// rather than hold the node (and the journal) for a check. It
		// stores only what no handle opened since holds (commitReleased).
		if err := n.commitReleased(objstore.Unwaited(n.fsys.ctx)); err != nil {
			n.fsys.log.Error("file released with uncommitted changes; they are lost",
				"key", key, "err", err)
		}
	}
	n.dropStage()
}
