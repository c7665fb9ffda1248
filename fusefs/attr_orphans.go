package fusefs

// Pending attribute changes of nodes the kernel forgot. The kernel may
// forget an inode nobody holds open at any time — a change of leadership
// drops every kernel entry (activate.go), memory pressure drops unused
// ones — and the node goes with it, out of the tree: it has no key any
// longer, and the next lookup of its name makes a new node from the
// bucket. A chmod, chown or utimens acknowledged on the old node and not
// stored yet (attrwb.go) must not vanish with it: the mount would show the
// stored attributes again, an fsync of the name would report success
// without storing the change, and the write-back would drop it.
//
// So a node forgotten with a change pending becomes an orphan, kept by the
// key the change was made at (nodeBase.attrKey). The next node made for
// that key adopts the change if it comes from the same stored version
// (another client's newer version wins, as setInfoLocked decides for a
// live node); an orphan nobody looks up again is stored by the write-back
// under its key, as it would have been. A rename of a directory stores the
// orphans below it first (a rename is a durability point); a rename onto
// the key or a removal of it drops its orphan.

import (
	"context"
	"strings"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
)

// OnForget is called by go-fuse when the kernel forgot the node (and for
// a node moved by RmChild and AddChild, which this package does not use):
// a pending attribute change makes it an orphan.
func (b *nodeBase) OnForget() {
	if b.fsys == nil || b.fsys.attrwb == nil {
		return
	}
	b.mu.Lock()
	pending, key := b.attrPending, b.attrKey
	b.orphaned = pending
	b.mu.Unlock()
	if !pending {
		return
	}
	w := b.fsys.attrwb
	w.mu.Lock()
	w.orphans[key] = b
	w.mu.Unlock()
	// The kernel's FORGET may come after a LOOKUP that already made the
	// name's next node: that one adopts the change now.
	if nb := baseOf(b.fsys.inodeAt(key)); nb != nil && nb != b && nb.kind == b.kind {
		w.adopt(key, nb)
	}
}

// inodeAt returns the live inode of key in the tree, nil if there is none.
func (fsys *filesystem) inodeAt(key string) *fs.Inode {
	rest, ok := strings.CutPrefix(key, fsys.prefix)
	if !ok || fsys.root == nil { // not mounted yet
		return nil
	}
	ino := fsys.root
	for _, name := range strings.Split(strings.TrimSuffix(rest, "/"), "/") {
		if ino = ino.GetChild(name); ino == nil {
			return nil
		}
	}
	return ino
}

// orphanKeyLocked is the key an orphan's pending change is stored under,
// false for any other node. LOCKS_REQUIRED(b.mu)
func (b *nodeBase) orphanKeyLocked() (string, bool) {
	return b.attrKey, b.orphaned && b.attrPending
}

// adopt gives nb, a node just made for key, the pending change of the
// orphan of key, if any, when nb comes from the version the change was
// made on. An orphan being stored right now is left to finish; nb then
// reads the bucket again at its next lookup.
func (w *attrWriteback) adopt(key string, nb *nodeBase) {
	if w == nil {
		return
	}
	w.mu.Lock()
	o := w.orphans[key]
	if o == nil {
		w.mu.Unlock()
		return
	}
	if !o.opMu.TryLock() { // a store of it is in flight
		w.mu.Unlock()
		nb.forgetCached()
		return
	}
	defer o.opMu.Unlock()
	delete(w.orphans, key)
	due, scheduled := w.due[o]
	delete(w.due, o)
	w.mu.Unlock()

	o.mu.Lock()
	pending, info, attr, bind := o.attrPending, o.info, o.attr, o.attrBind
	o.attrPending, o.orphaned = false, false
	o.mu.Unlock()
	nb.mu.Lock()
	// A change made on nb already started from the stored attributes:
	// the later change wins, as it would on one node.
	same := pending && nb.info.ETag == info.ETag && !nb.attrPending
	if same {
		nb.attr, nb.attrPending, nb.attrBind, nb.attrKey = attr.clone(), true, bind, key
	}
	nb.mu.Unlock()
	switch {
	case !pending: // stored or dropped meanwhile: read the bucket again
		nb.forgetCached()
		return
	case !same:
		w.fsys.log.Warn("an acknowledged chmod/chown/utimens of a node the kernel forgot is dropped: the object, or its attributes, changed since", "key", key)
		return
	}
	if !scheduled {
		due = time.Now().Add(w.delay)
	}
	w.mu.Lock()
	w.due[nb] = due
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// unorphan forgets b as an orphan once its change was stored or dropped.
func (w *attrWriteback) unorphan(b *nodeBase) {
	if w == nil {
		return
	}
	b.mu.Lock()
	key, orphaned := b.attrKey, b.orphaned
	b.orphaned = false
	b.mu.Unlock()
	if !orphaned {
		return
	}
	w.mu.Lock()
	if w.orphans[key] == b {
		delete(w.orphans, key)
	}
	w.mu.Unlock()
}

// storeOrphansBelow stores the pending changes of the orphans at or below
// prefix (a directory about to be renamed) and returns their errors.
func (w *attrWriteback) storeOrphansBelow(ctx context.Context, prefix string) error {
	if w == nil {
		return nil
	}
	var nodes []*nodeBase
	w.mu.Lock()
	for k, o := range w.orphans {
		if strings.HasPrefix(k, prefix) {
			nodes = append(nodes, o)
		}
	}
	w.mu.Unlock()
	return w.store(ctx, nodes, false)
}

// dropOrphans forgets the pending changes of the orphans of the keys
// given (exactly) or, with below, at or below them: their names were
// removed or renamed over through this mount.
func (w *attrWriteback) dropOrphans(below bool, keys ...string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	var dropped []*nodeBase
	for k, o := range w.orphans {
		for _, key := range keys {
			if k == key || below && strings.HasPrefix(k, key) {
				delete(w.orphans, k)
				delete(w.due, o)
				dropped = append(dropped, o)
				break
			}
		}
	}
	w.mu.Unlock()
	for _, o := range dropped {
		o.dropPendingAttr()
	}
}
