package fusefs

// Looking a name up in a directory: from a live child, the directory's
// last listing (an absent name), a prefetched HEAD, or the bucket.

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

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
	var ch *fs.Inode
	switch {
	case isSpecialKind(r.kind):
		ch = d.NewInode(ctx, newSpecialNode(d.fsys, r.kind, r.info), fs.StableAttr{Mode: r.kind})
	case r.kind == kindDir:
		ch = d.NewInode(ctx, newDirNode(d.fsys, r.info), fs.StableAttr{Mode: syscall.S_IFDIR})
	case r.kind == kindSymlink:
		ch = d.NewInode(ctx, newSymlinkNode(d.fsys, r.info), fs.StableAttr{Mode: syscall.S_IFLNK})
	default:
		ch = d.NewInode(ctx, newFileNode(d.fsys, r.info), fs.StableAttr{Mode: syscall.S_IFREG})
	}
	// A change pending on the node the kernel forgot (attr_orphans.go).
	if key, err := d.childKey(name); err == nil && d.fsys.attrwb != nil {
		if r.kind == kindDir {
			key += "/"
		}
		d.fsys.attrwb.adopt(key, baseOf(ch))
	}
	return ch
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
	if d.fsys.deletes.isPending(key) {
		return nil, syscall.ENOENT // unlinked here, its delete on its way (deletewb.go)
	}
	ctx, cancel := d.fsys.opctx(ctx)
	defer cancel()
	if d.GetChild(name) == nil && d.knownAbsent(ctx, name) {
		d.fsys.metrics.negativeHits.Inc()
		return nil, syscall.ENOENT
	}
	if r, ok := d.pre.take(ctx, name); ok {
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

// knownAbsent answers a lookup of name in d from the directory's name
// knowledge, renewing it with one LIST when it expired and the directory is
// small. It reports false whenever the store must be asked.
func (d *dirNode) knownAbsent(ctx context.Context, name string) bool {
	young := d.fsys.negativeFresh
	absent, fresh, refresh := d.names.absent(name, young)
	if fresh || !refresh {
		return absent
	}
	prefix, err := d.dirKey()
	if err != nil {
		return false
	}
	start := time.Now()
	names, complete, err := d.fsys.listNames(ctx, prefix)
	if err != nil {
		return false // the lookup itself reports the store's error
	}
	d.names.set(start, names, complete)
	absent, _, _ = d.names.absent(name, young)
	return absent
}
