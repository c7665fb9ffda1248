package fusefs

import (
	"context"
	"syscall"

	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Special files (FIFOs, sockets, character and block devices) are stored as
// s3fs stores them: an empty object whose mode metadata carries the S_IF*
// type. The device number goes in the "rdev" key (decimal, the kernel's
// FUSE encoding of dev_t), which s3fs neither writes nor reads: a device
// node s3fs made shows device number 0 here, and one made here shows 0 on
// s3fs (docs/POSIX.md). The kernel opens, reads and writes them itself
// (a FIFO's data never reaches the filesystem); fencefs only stores their
// attributes, so chmod, chown, utimens, rename and unlink work as on files.
// User extended attributes are refused (EPERM), as Linux does on special
// files.

// isSpecialKind reports whether kind is one of the special file types.
func isSpecialKind(kind uint32) bool {
	switch kind {
	case syscall.S_IFIFO, syscall.S_IFSOCK, syscall.S_IFCHR, syscall.S_IFBLK:
		return true
	}
	return false
}

// specialNode is a FIFO, socket or device node.
type specialNode struct {
	fs.Inode
	leafNode
}

func newSpecialNode(fsys *filesystem, kind uint32, info objstore.ObjectInfo) *specialNode {
	n := &specialNode{}
	n.init(fsys, &n.Inode, kind, info)
	return n
}

func (n *specialNode) fillAttr(out *fuse.Attr) {
	n.mu.Lock()
	a, unlinked := n.attr, n.unlinked
	n.mu.Unlock()
	nlink := uint32(1)
	if unlinked {
		nlink = 0
	}
	fillAttr(out, a, 0, nlink)
	out.Rdev = a.Rdev
}

var _ node = (*specialNode)(nil)

var _ = (fs.NodeGetattrer)((*specialNode)(nil))

// Getattr returns the node's attributes (refreshed after MetaCacheTTL).
func (n *specialNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	return nodeGetattr(ctx, n, out)
}

var _ = (fs.NodeSetattrer)((*specialNode)(nil))

// Setattr stores chmod, chown and utimens (a self-copy of the empty
// object). The kernel refuses truncation of special files before asking.
func (n *specialNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return n.setattrDeferred(ctx, in, out, "a special file", n.fillAttr)
}
