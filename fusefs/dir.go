package fusefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// dirNode is a directory: a "dir/" marker object, or implicitly the common
// prefix of the objects below it. The root is the mount's prefix.
type dirNode struct {
	fs.Inode
	nodeBase
	names dirNames   // what the last listing showed, for lookups of absent names
	pre   prefetcher // HEADs of listed objects ahead of their lookups (prefetch.go)
	// emptied records that this mount removed an entry from the directory
	// or moved one out of it. An implicit directory (no marker) whose last
	// object went that way no longer exists in the bucket; it stays visible
	// to this mount (lookups, its parent's listings) until its rmdir or
	// until the kernel forgets it, as a local directory emptied by rm does,
	// so that rm -r and mv can remove it after the kernel's entry expired.
	// Other mounts see it gone at once (docs/DECISIONS.md).
	emptied bool // GUARDED_BY(mu)
	// changed is when this mount last added or removed an entry: the
	// directory's mtime and ctime, in this mount's memory (posixrules.go).
	changed time.Time // GUARDED_BY(mu)
}

// noteRemoval records that name left d through this mount.
// LOCKS_EXCLUDED(d.mu)
func (d *dirNode) noteRemoval(name string) {
	d.dropPrefetch(name)
	d.mu.Lock()
	d.emptied = true
	d.changed = time.Now()
	d.mu.Unlock()
	d.names.removed()
}

// heldChild returns the child directory name when this mount removed
// entries from it (so it may be an implicit directory emptied here), or nil.
func (d *dirNode) heldChild(name string) *fs.Inode {
	ch := d.GetChild(name)
	if ch == nil {
		return nil
	}
	dn, ok := ch.Operations().(*dirNode)
	if !ok {
		return nil
	}
	dn.mu.Lock()
	defer dn.mu.Unlock()
	if !dn.emptied {
		return nil
	}
	return ch
}

var _ = (fs.InodeEmbedder)((*dirNode)(nil))

// A directory keeps its name until its rmdir, and no local state pins its
// version; its emptied state is local only (see emptied).
var _ node = (*dirNode)(nil)

func (d *dirNode) goneLocked() bool      { return false }     // LOCKS_REQUIRED(d.mu)
func (d *dirNode) pinnedLocked() bool    { return false }     // LOCKS_REQUIRED(d.mu)
func (d *dirNode) localOnlyLocked() bool { return d.emptied } // LOCKS_REQUIRED(d.mu)

// movedLocked takes the version of the marker a rename copied.
// LOCKS_REQUIRED(d.mu)
func (d *dirNode) movedLocked(info objstore.ObjectInfo) {
	d.info = info
	d.fetched = time.Now()
}

// forgetCached marks the marker's version stale and forgets the listing.
func (d *dirNode) forgetCached() {
	d.nodeBase.forgetCached()
	d.names.forget()
}

// removeObject refuses the unlink of a directory.
func (d *dirNode) removeObject(ctx context.Context, key string) error {
	return fmt.Errorf("%w: %s", errIsDir, key)
}

func newDirNode(fsys *filesystem, info objstore.ObjectInfo) *dirNode {
	d := &dirNode{}
	d.init(fsys, &d.Inode, kindDir, info)
	return d
}

// dirKey is the key prefix of the directory's children.
func (d *dirNode) dirKey() (string, error) {
	return d.keyOrErr()
}

func (d *dirNode) childKey(name string) (string, error) {
	dk, err := d.dirKey()
	if err != nil {
		return "", err
	}
	return d.fsys.childKey(dk, name)
}

func (d *dirNode) fillAttr(out *fuse.Attr) {
	d.mu.Lock()
	a := withEntryChange(d.attr, d.changed)
	d.mu.Unlock()
	fillAttr(out, a, 4096, 1) // nlink 1: "unknown", so find(1) does not skip subdirectories
}

// reuseChild returns the existing child at name updated to the version r,
// when it is of r's kind and still names an object (so inode numbers stay
// stable), else nil. A node with local state keeps what it pins.
func (d *dirNode) reuseChild(name string, r resolved) *fs.Inode {
	ch := d.GetChild(name)
	n := nodeOf(ch)
	if n == nil {
		return nil
	}
	b := n.base()
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.kind != b.kind || n.goneLocked() {
		return nil
	}
	if !n.pinnedLocked() {
		n.adoptLocked(r.info)
	}
	return ch
}

// childNode returns the node for what resolve found at name, reusing the
// existing child inode when it can (reuseChild).
func (d *dirNode) childNode(ctx context.Context, name string, r resolved) *fs.Inode {
	if ch := d.reuseChild(name, r); ch != nil {
		return ch
	}
	if isSpecialKind(r.kind) {
		return d.NewInode(ctx, newSpecialNode(d.fsys, r.kind, r.info), fs.StableAttr{Mode: r.kind})
	}
	switch r.kind {
	case kindDir:
		return d.NewInode(ctx, newDirNode(d.fsys, r.info), fs.StableAttr{Mode: syscall.S_IFDIR})
	case kindSymlink:
		return d.NewInode(ctx, newSymlinkNode(d.fsys, r.info), fs.StableAttr{Mode: syscall.S_IFLNK})
	default:
		return d.NewInode(ctx, newFileNode(d.fsys, r.info), fs.StableAttr{Mode: syscall.S_IFREG})
	}
}

// cachedChild returns an existing child that can answer a lookup without a
// round trip: one with local state (open, being written, created and not yet
// committed) or fetched less than MetaCacheTTL ago.
func cachedChild(ch *fs.Inode) bool {
	n := nodeOf(ch)
	if n == nil {
		return false
	}
	b := n.base()
	b.mu.Lock()
	defer b.mu.Unlock()
	return !n.goneLocked() && (n.pinnedLocked() || !b.staleLocked())
}

var _ = (fs.NodeLookuper)((*dirNode)(nil))

// Lookup finds name: from a live child inode when its metadata is fresh,
// else with resolve (HEAD of the object; HEAD of the marker and a listing
// for a directory). Tombstones and the protocol directory are invisible.
func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	key, err := d.childKey(name)
	if err != nil {
		if errors.Is(err, errPerm) {
			err = fmt.Errorf("%w: %s is hidden", objstore.ErrNotFound, key)
		}
		return nil, d.fsys.errno("lookup", key, err)
	}
	if ch := d.GetChild(name); ch != nil {
		d.fsys.retryOnOwnNode(ctx, key, ch)
		if cachedChild(ch) {
			d.fsys.gaveOwnNode(ctx, key, ch)
			fillEntry(ch, out)
			return ch, 0
		}
	}
	ctx, cancel := d.fsys.opctx(ctx)
	defer cancel()
	if d.GetChild(name) == nil && d.knownAbsent(ctx, name) {
		d.fsys.metrics.negativeHits.Inc()
		return nil, syscall.ENOENT
	}
	if r, ok := d.prefetched(ctx, name); ok {
		d.fsys.metrics.prefetchHits.Inc()
		ch := d.childNode(ctx, name, r)
		d.fsys.gaveOwnNode(ctx, key, ch)
		fillEntry(ch, out)
		return ch, 0
	}
	start := time.Now()
	r, err := d.fsys.resolve(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		d.names.probed(start)
		if ch := d.heldChild(name); ch != nil {
			fillEntry(ch, out)
			return ch, 0
		}
	}
	if err != nil {
		return nil, d.fsys.errno("lookup", key, err)
	}
	ch := d.childNode(ctx, name, r)
	d.fsys.gaveOwnNode(ctx, key, ch)
	fillEntry(ch, out)
	return ch, 0
}

var _ = (fs.NodeGetattrer)((*dirNode)(nil))

// Getattr returns the directory's attributes: the marker's metadata, or the
// mount's defaults for an implicit directory.
func (d *dirNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	return nodeGetattr(ctx, d, out)
}

// refresh reads the marker again once the cached version expired; without
// one (implicit, or the marker went away) the attributes stay and the
// marker is forgotten.
func (d *dirNode) refresh(ctx context.Context) error {
	d.mu.Lock()
	stale := d.staleLocked()
	d.mu.Unlock()
	if !stale || d.IsRoot() {
		return nil
	}
	key, ok := d.key()
	if !ok {
		return nil
	}
	info, err := d.fsys.store.Stat(ctx, key)
	switch {
	case err == nil && !fencing.IsTombstone(info):
		d.setInfo(info)
	case err == nil || errors.Is(err, objstore.ErrNotFound):
		d.mu.Lock()
		d.info.ETag = ""
		d.fetched = time.Now()
		d.mu.Unlock()
	default:
		return err
	}
	return nil
}

var _ = (fs.NodeReaddirer)((*dirNode)(nil))

// validName reports whether a listed name can be shown by the kernel.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && len(name) <= 255 &&
		!strings.ContainsRune(name, 0) && !strings.Contains(name, "/")
}

var _ = (fs.NodeCreater)((*dirNode)(nil))

// Create creates a regular file. The object is written when the file is
// first flushed (so create-write-close is one PUT), conditioned on the key
// being absent; with O_EXCL on a mount that is not the active leader the
// empty object is created at once so that exclusivity holds across mounts
// (EEXIST otherwise).
func (d *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	key, err := d.writableChild("create", name)
	if err != nil {
		return nil, nil, 0, d.fsys.mutationErrno(ctx, "create", key, err)
	}
	ctx, cancel := d.fsys.mutctx(ctx)
	defer cancel()
	n := newFileNode(d.fsys, objstore.ObjectInfo{})
	a := newAttr(ctx, kindFile, mode)
	n.attr = a
	if flags&syscall.O_EXCL != 0 && d.fsys.leaderSince().IsZero() {
		// Exclusive across mounts: the empty object now. A leader
		// needs no such object: no other fencefs writer can create the
		// name until it is fenced, the kernel found the name absent,
		// and the commit at close is conditioned on its absence (a
		// client outside fencefs creating it meanwhile makes that
		// close fail).
		meta := encodeAttr(a, nil)
		info, err := d.fsys.createEmpty(ctx, key, meta)
		if err != nil {
			return nil, nil, 0, d.fsys.mutationErrno(ctx, "create", key, err)
		}
		n.setInfo(mergeInfo(info, key, 0, meta))
		n.attr = a
	} else {
		n.c.created(flags&syscall.O_TRUNC != 0)
	}
	n.mu.Lock()
	n.openCount = 1
	n.mu.Unlock()
	ch := d.added(ctx, name, n, out)
	return ch, &fileHandle{node: n, appending: flags&syscall.O_APPEND != 0, writable: true}, 0, 0
}

var _ = (fs.NodeMknoder)((*dirNode)(nil))

// Mknod creates an empty regular file at once, or a FIFO, socket or device
// node (special.go); other types are EINVAL.
func (d *dirNode) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	kind := mode & syscall.S_IFMT
	valid := func() error {
		if kind != syscall.S_IFREG && kind != 0 && !isSpecialKind(kind) {
			return fmt.Errorf("%w: mknod of type %#o", errInvalid, kind)
		}
		return nil
	}
	return d.makeChild(ctx, "mknod", name, "", valid, func(ctx context.Context, key string) (node, error) {
		if isSpecialKind(kind) {
			return d.mknodSpecial(ctx, key, mode, dev)
		}
		meta := encodeAttr(newAttr(ctx, kindFile, mode), nil)
		info, err := d.fsys.createEmpty(ctx, key, meta)
		if err != nil {
			return nil, err
		}
		return newFileNode(d.fsys, mergeInfo(info, key, 0, meta)), nil
	}, out)
}

var _ = (fs.NodeMkdirer)((*dirNode)(nil))

// Mkdir creates the "name/" marker, conditioned on its absence.
func (d *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return d.makeChild(ctx, "mkdir", name, "/", nil, func(ctx context.Context, marker string) (node, error) {
		meta := encodeAttr(newAttr(ctx, kindDir, mode), nil)
		start := time.Now()
		info, err := d.fsys.createEmpty(ctx, marker, meta)
		if err != nil {
			return nil, err
		}
		n := newDirNode(d.fsys, mergeInfo(info, marker, 0, meta))
		// The kernel looked the name up (absent: no object, marker or
		// object below it) before asking, and the marker was created on
		// absence: the new directory is known empty.
		n.names.set(start, map[string]struct{}{}, true)
		return n, nil
	}, out)
}

var _ = (fs.NodeSymlinker)((*dirNode)(nil))

// Symlink stores a symlink as s3fs does (body = target, S_IFLNK mode).
func (d *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	valid := func() error {
		if len(target) == 0 || len(target) > maxSymlinkTarget {
			return fmt.Errorf("%w: symlink target of %d bytes", errNameTooLong, len(target))
		}
		return nil
	}
	return d.makeChild(ctx, "symlink", name, "", valid, func(ctx context.Context, key string) (node, error) {
		meta := encodeAttr(newAttr(ctx, kindSymlink, 0o777), nil)
		body := []byte(target)
		info, err := d.fsys.create(ctx, key, bytes.NewReader(body), int64(len(body)), meta)
		if err != nil {
			return nil, err
		}
		n := newSymlinkNode(d.fsys, mergeInfo(info, key, int64(len(body)), meta))
		n.target, n.targetETag = target, n.info.ETag
		return n, nil
	}, out)
}

// makeChild is what Mknod, Mkdir and Symlink share: the key of name (plus
// suffix: "/" for a directory's marker), refused when valid (if any)
// refuses the request or the mount cannot write; then, under a mutation's
// deadline, create stores the object at that key and returns its node,
// which becomes the child name.
func (d *dirNode) makeChild(ctx context.Context, op, name, suffix string, valid func() error,
	create func(ctx context.Context, key string) (node, error), out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	key, err := d.childKey(name)
	if err == nil && valid != nil {
		err = valid()
	}
	if err == nil {
		err = d.fsys.checkWritable(op)
	}
	if err != nil {
		return nil, d.fsys.mutationErrno(ctx, op, key, err)
	}
	ctx, cancel := d.fsys.mutctx(ctx)
	defer cancel()
	key += suffix
	n, err := create(ctx, key)
	if err != nil {
		return nil, d.fsys.mutationErrno(ctx, op, key, err)
	}
	return d.added(ctx, name, n, out), 0
}

// added makes n, just created, the child name, and reports its attributes
// in out.
func (d *dirNode) added(ctx context.Context, name string, n node, out *fuse.EntryOut) *fs.Inode {
	ch := d.NewInode(ctx, n, fs.StableAttr{Mode: n.base().kind})
	d.entryAdded(name)
	n.fillAttr(&out.Attr)
	return ch
}

var _ = (fs.NodeLinker)((*dirNode)(nil))

// writableChild returns the key of child name, or the error that refuses a
// mutation there (an invalid name, or a read-only or fenced mount).
func (d *dirNode) writableChild(op, name string) (string, error) {
	key, err := d.childKey(name)
	if err == nil {
		err = d.fsys.checkWritable(op)
	}
	return key, err
}

// Link fails with ENOTSUP: objects cannot share content.
func (d *dirNode) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	key, _ := d.childKey(name)
	return nil, d.fsys.errno("link", key, fmt.Errorf("%w: hard links", errNotSupported))
}

var _ = (fs.NodeUnlinker)((*dirNode)(nil))

// Unlink deletes the object conditioned on the version this mount knows
// (ESTALE if someone changed it since). A file that is still open keeps its
// content: it is staged locally before the delete.
func (d *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	return d.remove(ctx, "unlink", name, func(ctx context.Context, key string) error { return d.unlink(ctx, name, key) })
}

// remove runs the removal op of name (rm: given the child's key) and
// notes it in the directory's listing state.
func (d *dirNode) remove(ctx context.Context, op, name string, rm func(ctx context.Context, key string) error) syscall.Errno {
	key, err := d.writableChild(op, name)
	ch := d.GetChild(name)
	if err == nil {
		ctx, cancel := d.fsys.mutctx(ctx)
		defer cancel()
		err = rm(ctx, key)
	}
	if err == nil {
		d.noteRemoval(name)
		if ch != nil {
			if b := baseOf(ch); b != nil {
				b.dropPendingAttr() // removed: nothing left to store it on
			}
		}
	}
	return d.fsys.mutationErrno(ctx, op, key, err)
}

func (d *dirNode) unlink(ctx context.Context, name, key string) error {
	ch := d.GetChild(name)
	if ch == nil {
		r, err := d.fsys.resolve(ctx, key)
		if err != nil {
			return err
		}
		ch = d.childNode(ctx, name, r)
	}
	n := nodeOf(ch)
	if n == nil {
		return fmt.Errorf("%w: %s", objstore.ErrNotFound, key)
	}
	return n.removeObject(ctx, key)
}

var _ = (fs.NodeRmdirer)((*dirNode)(nil))

// Rmdir removes an empty directory (ENOTEMPTY otherwise): the marker is
// deleted conditioned on its version; an implicit directory has nothing to
// delete.
func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	return d.remove(ctx, "rmdir", name, func(ctx context.Context, key string) error { return d.rmdir(ctx, name, key+"/") })
}

func (d *dirNode) rmdir(ctx context.Context, name, prefix string) error {
	ch := d.GetChild(name)
	if ch == nil {
		r, err := d.fsys.resolve(ctx, strings.TrimSuffix(prefix, "/"))
		if err != nil {
			return err
		}
		ch = d.childNode(ctx, name, r)
	}
	dn, ok := ch.Operations().(*dirNode)
	if !ok {
		return fmt.Errorf("%w: %s", errNotDir, prefix)
	}
	dn.opMu.Lock()
	defer dn.opMu.Unlock()
	if err := dn.checkEmpty(ctx, prefix); err != nil {
		return err
	}
	marker, err := d.fsys.store.Stat(ctx, prefix)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return nil
	case err != nil:
		return err
	case fencing.IsTombstone(marker):
		return nil
	}
	return d.fsys.deleteObject(ctx, prefix, fencing.VersionOf(marker))
}

// checkEmpty fails with errNotEmpty when anything visible lives in the
// directory (in the store, or created here and not committed yet).
func (d *dirNode) checkEmpty(ctx context.Context, prefix string) error {
	for name, ch := range d.Children() {
		if fn, ok := ch.Operations().(*fileNode); ok {
			fn.mu.Lock()
			local := fn.localOnlyLocked()
			fn.mu.Unlock()
			if local {
				return fmt.Errorf("%w: %s holds %s", errNotEmpty, prefix, name)
			}
		}
	}
	live, err := d.fsys.hasLive(ctx, prefix)
	if err != nil {
		return err
	}
	if live {
		return fmt.Errorf("%w: %s", errNotEmpty, prefix)
	}
	return nil
}

var _ = (fs.NodeSetattrer)((*dirNode)(nil))

// Setattr stores chmod/chown/utimens of a directory in its marker (created
// for an implicit directory).
func (d *dirNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	key, _ := d.key()
	if mutate, ok := setattrMutation(ctx, in); ok {
		ctx, cancel := d.fsys.mutctx(ctx)
		defer cancel()
		err := d.setattrDir(ctx, mutate)
		if err != nil {
			return d.fsys.mutationErrno(ctx, "setattr", key, err)
		}
	}
	d.fillAttr(&out.Attr)
	return 0
}
