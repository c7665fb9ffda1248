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
)

// fileNode is a regular file: one object at the same key. It adapts the
// FUSE node requests to the file's content (fileContent, which owns the
// staging file, the upload while writing and the commit) and keeps what
// belongs to the inode: its handles, the version they read, and the
// kernel's page cache.
//
// A node with open handles is never refreshed from the store: the version
// seen at open stays pinned until the last close (close-to-open
// consistency, as NFS).
//
// Locks, in the order they are taken (none is taken while one after it in
// this list is held): openMu (opens), nodeBase.opMu (the node's
// mutations: commits, metadata, unlink, rename; held across Guard calls),
// fileContent.body (the staging file), fileHandle.mu (a handle's reader),
// nodeBase.mu (every field marked GUARDED_BY(mu)), fileContent.mu (the
// content's state), partUpload.mu (an upload's parts). A …Locked method
// names the locks it needs in its LOCKS_REQUIRED note.
type fileNode struct {
	fs.Inode
	nodeBase

	// openMu serializes opens: each decides the version its handle reads
	// against the handles already open (file_capture.go).
	openMu sync.Mutex
	c      *fileContent // constant

	// GUARDED_BY(mu) (nodeBase.mu):
	// superseded: the version open handles read was replaced in the
	// bucket by another writer, or a retried open needed a node of its
	// own; the name moves to a new node (file_capture.go).
	superseded bool
	// supersededKey is the key of a superseded node, which may have left
	// the tree: an open reaching it with no handle open reads it.
	supersededKey string
	openCount     int
	keepETag      string // ETag the kernel's page cache holds (FOPEN_KEEP_CACHE)
	// changers counts the open handles that changed the content
	// (fileHandle.gen != 0): a flush of another handle leaves their
	// changes to them (fileHandle.Flush).
	changers int
}

var _ = (fs.InodeEmbedder)((*fileNode)(nil))

func newFileNode(fsys *filesystem, info objstore.ObjectInfo) *fileNode {
	n := &fileNode{}
	n.init(fsys, &n.Inode, kindFile, info)
	n.c = newFileContent(n, fsys, info.Size)
	return n
}

// localStateLocked reports whether the node holds state the store does not
// have, or must not be refreshed because handles pin its version.
// LOCKS_REQUIRED(n.mu)
func (n *fileNode) localStateLocked() bool {
	return n.openCount > 0 || n.c.local()
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
	n.c.setStoredSize(info.Size)
	return nil
}

func (n *fileNode) fillAttr(out *fuse.Attr) {
	n.mu.Lock()
	a := n.attr
	n.mu.Unlock()
	size, unlinked := n.c.sizeNow(), n.c.flags().has(stUnlinked)
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

// origin returns the content's origin; withMeta adds the metadata a commit
// of the content stores. Called by the content holding at most its body
// lock. LOCKS_EXCLUDED(n.mu)
func (n *fileNode) origin(withMeta bool) origin {
	key, _ := n.key()
	n.mu.Lock()
	defer n.mu.Unlock()
	o := origin{key: key, etag: n.info.ETag, version: fencing.VersionOf(n.info)}
	if withMeta {
		o.meta = encodeAttr(n.attr, contentMeta(n.info.Meta))
	}
	return o
}

const (
	attrsKept   attrsAfter = iota // not stored by it: a pending change stays pending
	attrsStored                   // stored with the content
	attrsLeft                     // not stored: the node's are a pending change now (a self-copy follows)
)

// stored moves the node to the version info its content's commit
// produced. LOCKS_EXCLUDED(n.mu)
func (n *fileNode) stored(info objstore.ObjectInfo, attrs attrsAfter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.info = info
	n.fetched = time.Now()
	n.keepETag = info.ETag
	if attrs != attrsKept {
		n.attrPending = attrs == attrsLeft
		n.attrBind = n.fsys.binding()
	}
}

// dirtySince is when the content became dirty (stagedFile).
func (n *fileNode) dirtySince() int64 { return n.c.dirtySince.Load() }

// touch sets the times of a change of the content.
func (n *fileNode) touch() {
	now := time.Now()
	n.mu.Lock()
	n.attr.Mtime, n.attr.Ctime = now, now
	n.mu.Unlock()
}

// write stores data at off (off < 0: at the end of the content).
func (n *fileNode) write(ctx context.Context, data []byte, off int64) (uint32, error) {
	if err := n.fsys.checkWritable("write"); err != nil {
		return 0, err
	}
	key, _ := n.key()
	w, err := n.c.write(ctx, key, data, off)
	return uint32(w), err
}

// truncate sets the size of the content.
func (n *fileNode) truncate(ctx context.Context, size int64) error {
	if err := n.fsys.checkWritable("truncate"); err != nil {
		return err
	}
	key, _ := n.key()
	return n.c.truncate(ctx, key, size, false)
}

// storedSize is the size of the version the node holds (contentOwner).
func (n *fileNode) storedSize() int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.info.Size
}

// reverted shows the stored version again after the content dropped the
// changes it held for open handles (contentOwner): the node moves to the
// object's current version (the newer leader's, most often), which what the
// handles write next starts from; the kernel drops its pages and
// attributes; a file that was never stored loses its name. Called holding
// the content's body lock (no change can be staged meanwhile).
func (n *fileNode) reverted(ctx context.Context, lostName bool) {
	var cur objstore.ObjectInfo
	var err error
	if key, kerr := n.keyOrErr(); kerr == nil && !lostName {
		cur, err = n.fsys.store.Stat(ctx, key)
		if err == nil && fencing.IsTombstone(cur) {
			err = objstore.ErrNotFound
		}
	}
	n.mu.Lock()
	n.fetched = time.Time{}
	n.keepETag = ""
	if err == nil && cur.ETag != "" {
		n.setInfoLocked(cur)
		n.c.setStoredSize(cur.Size)
		n.fetched = time.Now()
	}
	n.mu.Unlock()
	go n.NotifyContent(0, 0) // may wait for a lock the request being served holds
	if lostName {
		n.forgetName()
	}
}

// dropStage drops the content's staging file, and forgets uncommitted
// changes, once no handle needs them any more.
func (n *fileNode) dropStage() {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	n.c.body.Lock()
	defer n.c.body.Unlock()
	n.mu.Lock()
	if n.openCount > 0 {
		n.mu.Unlock()
		return
	}
	lost, lostName := n.c.dropLocked(n.info.Size)
	if lost {
		// Failed commit: the data is lost (logged by the caller). Show
		// the store's version again; a file that was never committed
		// does not exist.
		n.fetched = time.Time{}
		n.keepETag = ""
	}
	n.mu.Unlock()
	if lostName {
		// Never stored: the name must not keep pointing here.
		n.forgetName()
	}
}

// preserveForReadersLocked keeps the content readable for open handles
// before the object is deleted or replaced (unlink, rename over): an open
// file keeps its data, as POSIX requires. LOCKS_REQUIRED(n.opMu)
func (n *fileNode) preserveForReadersLocked(ctx context.Context) error {
	n.mu.Lock()
	open := n.openCount > 0
	n.mu.Unlock()
	if !open {
		return nil
	}
	return n.c.preserve(ctx)
}

// markUnlinked records that the node's name is gone: later commits are
// dropped and fstat shows nlink 0.
func (n *fileNode) markUnlinked() { n.c.unlink() }

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
