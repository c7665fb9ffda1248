package fusefs

// A directory's attributes: chmod, chown and utimens (stored a moment
// later, attrwb.go), fsync(2), and the times of its entry changes.

import (
	"context"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

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

var _ = (fs.NodeFsyncer)((*dirNode)(nil))

// Fsync of a directory waits for the deletes of its entries that unlink
// acknowledged (deletewb.go), reporting the first that failed since the
// last fsync, and stores its pending attribute change (attrwb.go); its
// other entry changes are stored when they happen.
func (d *dirNode) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	ctx, cancel := d.fsys.mutctx(ctx)
	defer cancel()
	var err error
	if key, ok := d.key(); ok { // else removed: its failures went with it
		err = d.fsys.syncDeletes(ctx, key)
	}
	if err == nil {
		err = d.storePendingAttr(ctx)
	}
	if err != nil {
		key, _ := d.key()
		return d.fsys.mutationErrno(ctx, "fsync", key, err)
	}
	return 0
}

// foldEntryChange wraps a metadata mutation of d so that the stored mtime
// includes the last entry change (the mutation may still set another);
// *folded is the change it folded in, for forgetEntryChange once stored.
func (d *dirNode) foldEntryChange(mutate func(*posixAttr) error) (func(*posixAttr) error, *time.Time) {
	folded := new(time.Time)
	return func(a *posixAttr) error {
		d.mu.Lock()
		*folded = d.changed
		d.mu.Unlock()
		if folded.After(a.Mtime) {
			a.Mtime = *folded
		}
		return mutate(a)
	}, folded
}

// setattrDir applies a chmod/chown/utimens of the directory, the last
// entry change folded into its mtime (deferAttr).
func (d *dirNode) setattrDir(ctx context.Context, mutate func(*posixAttr) error) error {
	fold, folded := d.foldEntryChange(mutate)
	if err := d.deferAttr(ctx, fold); err != nil {
		return err
	}
	d.forgetEntryChange(*folded)
	return nil
}

// forgetEntryChange drops the in-memory entry change once it is stored,
// unless a newer one happened meanwhile.
func (d *dirNode) forgetEntryChange(folded time.Time) {
	d.mu.Lock()
	if d.changed.Equal(folded) {
		d.changed = time.Time{}
	}
	d.mu.Unlock()
}
