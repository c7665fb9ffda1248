package fusefs

import (
	"context"
	"fmt"
	"io"
	"syscall"

	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// maxSymlinkTarget is the longest target (PATH_MAX - 1).
const maxSymlinkTarget = 4095

// symlinkNode is a symbolic link, stored as s3fs does: an object whose body
// is the target and whose mode has S_IFLNK.
type symlinkNode struct {
	fs.Inode
	leafNode

	// GUARDED_BY(mu) (nodeBase.mu):
	target     string
	targetETag string // the version target was read from
}

func newSymlinkNode(fsys *filesystem, info objstore.ObjectInfo) *symlinkNode {
	n := &symlinkNode{}
	n.init(fsys, &n.Inode, kindSymlink, info)
	return n
}

func (n *symlinkNode) fillAttr(out *fuse.Attr) {
	n.mu.Lock()
	a, size, unlinked := n.attr, n.info.Size, n.unlinked
	if n.target != "" {
		size = int64(len(n.target))
	}
	n.mu.Unlock()
	nlink := uint32(1)
	if unlinked {
		nlink = 0
	}
	fillAttr(out, a, size, nlink)
}

var _ node = (*symlinkNode)(nil)

var _ = (fs.NodeGetattrer)((*symlinkNode)(nil))

// Getattr returns the link's attributes (refreshed after MetaCacheTTL).
func (n *symlinkNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	return nodeGetattr(ctx, n, out)
}

var _ = (fs.NodeReadlinker)((*symlinkNode)(nil))

// Readlink returns the target: the object's body, read once per version.
func (n *symlinkNode) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	n.mu.Lock()
	etag, target, tETag := n.info.ETag, n.target, n.targetETag
	n.mu.Unlock()
	if target != "" && tETag == etag {
		return []byte(target), 0
	}
	key, err := n.keyOrErr()
	if err != nil {
		return nil, n.fsys.errno("readlink", "", err)
	}
	ctx, cancel := n.fsys.opctx(ctx)
	defer cancel()
	rc, _, err := n.fsys.store.Get(ctx, key, objstore.GetOptions{Length: -1, IfMatch: etag})
	if err != nil {
		return nil, n.fsys.errno("readlink", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxSymlinkTarget+1))
	if err != nil {
		return nil, n.fsys.errno("readlink", key, err)
	}
	if len(b) == 0 || len(b) > maxSymlinkTarget {
		return nil, n.fsys.errno("readlink", key, fmt.Errorf("%w: symlink object of %d bytes", objstore.ErrInvalid, len(b)))
	}
	n.mu.Lock()
	n.target, n.targetETag = string(b), etag
	n.mu.Unlock()
	return b, 0
}

var _ = (fs.NodeSetattrer)((*symlinkNode)(nil))

// Setattr stores lchown and lutimes changes (self-copy of the object).
func (n *symlinkNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return n.setattrDeferred(ctx, in, out, "a symlink", n.fillAttr)
}
