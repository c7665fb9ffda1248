package fusefs

import (
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
	// directory's mtime and ctime, in this mount's memory (dir_attr.go).
	changed time.Time // GUARDED_BY(mu)
}

// noteRemoval records that name left d through this mount.
// LOCKS_EXCLUDED(d.mu)
func (d *dirNode) noteRemoval(name string) {
	d.pre.drop(name)
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
func (d *dirNode) removeObject(ctx context.Context, key string, _ deleteFunc) error {
	return fmt.Errorf("%w: %s", errIsDir, key)
}

func newDirNode(fsys *filesystem, info objstore.ObjectInfo) *dirNode {
	d := &dirNode{}
	d.init(fsys, &d.Inode, kindDir, info)
	d.pre.fsys = fsys
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

// entryAdded records that name was added to d through this mount.
func (d *dirNode) entryAdded(name string) {
	d.pre.drop(name)
	d.names.add(name)
	d.mu.Lock()
	d.changed = time.Now()
	d.mu.Unlock()
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

// deleteFailed is told that the acknowledged delete of entry key failed
// (its failure is kept for the next fsync, deletereport.go): the names d
// knew and the kernel's entry of the name are forgotten, so that the
// entry shows again. The kernel is told from a goroutine of its own: the
// notification waits for the directory's lock, which an fsync or rmdir of
// it holds while it waits for this delete.
func (d *dirNode) deleteFailed(key string) {
	d.names.forget()
	go d.NotifyEntry(key[strings.LastIndex(key, "/")+1:])
}

// deleteEntry deletes key, the object of entry of d, at version base: the
// deleteFunc of an unlink. It is acknowledged now and sent in the
// background (deletewb.go), or sent at once when the mount deletes before
// unlink returns.
func (d *dirNode) deleteEntry(ctx context.Context, key string, base fencing.Version) error {
	if d.fsys.deletes == nil {
		return d.fsys.deleteObject(ctx, key, base)
	}
	return d.fsys.deletes.add(ctx, d, key, base)
}
