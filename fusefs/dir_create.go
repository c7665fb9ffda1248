package fusefs

// Making an entry in a directory: create(2), mknod(2), mkdir(2),
// symlink(2); link(2) is not supported.

import (
	"bytes"
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

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

// mknodSpecial creates the empty object of a special file of type
// mode&S_IFMT with device number dev at key, conditioned on its absence.
func (d *dirNode) mknodSpecial(ctx context.Context, key string, mode, dev uint32) (node, error) {
	kind := mode & syscall.S_IFMT
	a := newAttr(ctx, kind, mode)
	if kind == syscall.S_IFCHR || kind == syscall.S_IFBLK {
		a.Rdev = dev
	}
	meta := encodeAttr(a, nil)
	info, err := d.fsys.createEmpty(ctx, key, meta)
	if err != nil {
		return nil, err
	}
	return newSpecialNode(d.fsys, kind, mergeInfo(info, key, 0, meta)), nil
}
