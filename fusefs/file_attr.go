package fusefs

// A file's metadata changes: chmod, chown, utimens and truncate(2) by path.

import (
	"context"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// updateAttr applies a chmod/chown/utimens: with the uncommitted content
// changes when there are some (updateMeta), else as a pending attribute
// change (attrwb.go).
func (n *fileNode) updateAttr(ctx context.Context, mutate func(*posixAttr) error) error {
	if n.c.local() {
		return n.updateMeta(ctx, mutate)
	}
	return n.deferAttr(ctx, mutate)
}

// updateMeta applies a metadata change: locally when content changes are
// pending (committed with them), else through a self-copy.
func (n *fileNode) updateMeta(ctx context.Context, mutate func(*posixAttr) error) error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	n.mu.Lock()
	if f := n.c.flags(); f.any(stDirty | stPending | stUnlinked) {
		a := n.attr.clone()
		err := mutate(&a)
		if err == nil {
			a.Ctime = time.Now()
			err = checkMetaSize(encodeAttr(a, n.info.Meta))
		}
		if err == nil {
			n.attr = a
			if !f.has(stUnlinked) {
				n.c.changedAttr()
			}
		}
		n.mu.Unlock()
		return err
	}
	n.mu.Unlock()
	if err := n.updateMetaRemote(ctx, mutate); err != nil {
		return err
	}
	n.mu.Lock()
	n.selfCopiedLocked()
	n.mu.Unlock()
	return nil
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
		return n.fsys.mutationErrno(ctx, "setattr", key, err)
	}
	n.fillAttr(&out.Attr)
	return 0
}

func (n *fileNode) setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn) error {
	if err := n.fsys.checkWritable("setattr"); err != nil {
		return err
	}
	if size, ok := in.GetSize(); ok {
		if err := n.truncate(ctx, int64(size)); err != nil {
			return err
		}
		if h, ok := f.(*fileHandle); ok {
			h.changed()
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
	return n.updateAttr(ctx, mutate)
}
