package fusefs

// Removing an entry of a directory: unlink(2) and rmdir(2).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fs"
)

var _ = (fs.NodeUnlinker)((*dirNode)(nil))

// Unlink deletes the object conditioned on the version this mount knows
// (ESTALE if someone changed it since): acknowledged once the name is gone
// from this mount, and sent in the background (deletewb.go). A file that is
// still open keeps its content: it is staged locally before the delete.
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
		d.fsys.attrwb.dropOrphans(false, key, key+"/")
		if ch == nil {
			ch = d.GetChild(name) // looked up by rm
		}
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
	return n.removeObject(ctx, key, d.deleteEntry)
}

var _ = (fs.NodeRmdirer)((*dirNode)(nil))

// Rmdir removes an empty directory (ENOTEMPTY otherwise): the marker is
// deleted conditioned on its version; an implicit directory has nothing to
// delete. It waits for the deletes unlink acknowledged of the directory's
// entries, and fails as they did (deletewb.go).
func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	return d.remove(ctx, "rmdir", name, func(ctx context.Context, key string) error {
		if err := d.rmdir(ctx, name, key+"/"); err != nil {
			return err
		}
		d.fsys.deletes.dropFailures(key + "/") // what others were owed went with it
		return nil
	})
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
	// The deletes of its entries first: a failed one leaves an entry.
	if err := d.fsys.syncDeletes(ctx, prefix); err != nil {
		return err
	}
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
