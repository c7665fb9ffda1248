package fusefs

// Activation: the moment this mount becomes the leader.
//
// Before it, the mount was a follower (or led with an older token): other
// writers changed the bucket under it, and its takeover sweep re-stamped
// keys it may have cached (a new ETag each). Everything it cached may
// therefore be out of date, and a commit conditioned on such a version
// fails with ESTALE. So the first time the mount sees its Guard active with
// a token it has not led with before (a bind through the root xattr, the
// mount's --token or auto, fencefs run), it forgets every version it cached:
// node metadata, directory listings (negative entries), and, through
// go-fuse's notifications, the kernel's attributes, page cache and
// directory entries. Nodes with open handles keep the version they pinned
// (close-to-open), but their whole-file replacements are no longer refused
// because of an older epoch's change (fencing.Guard.Replace) — only those
// made under this line of bindings, though: a change held since before
// another holder's epoch is refused whatever the mount leads with now
// (held.go), never revived by the failback.
//
// From then on, until the mount is fenced, no other fencefs writer can
// change the fence domain: what the mount saw since activation stays true,
// except for changes made by tools that do not go through fencefs.

import (
	"sync/atomic"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/hanwen/go-fuse/v2/fs"
)

// noteStatus is called with the Guard's status whenever it changes
// (watchGuard), and also before mutations and after a bind through the
// root xattr, so that those see its effect at once. A newly active token,
// or the first sight of this token being fenced (another leader writes
// now: what the mount cached while it led may be replaced), triggers
// forgetCached. Safe for concurrent use.
func (fsys *filesystem) noteStatus(st fencing.Status) {
	newLead := st.State == fencing.StateActive && st.Token != 0 && raise(&fsys.ledToken, st.Token)
	newLeader := st.State == fencing.StateFenced && raise(&fsys.fencedToken, st.Token)
	if st.State != fencing.StateActive || st.Token != fsys.ledToken.Load() {
		fsys.leadingSince.Store(0)
	}
	switch {
	case newLead:
		fsys.leadingSince.Store(0)
		files, dirs := fsys.forgetCached()
		fsys.leadingSince.Store(time.Now().UnixNano())
		fsys.metrics.activations.Inc()
		fsys.log.Info("mount is the leader: dropped every version cached before",
			"token", st.Token, "files", files, "dirs", dirs)
	case newLeader:
		files, dirs := fsys.forgetCached()
		fsys.log.Warn("mount is fenced: a newer epoch writes the bucket; dropped every cached version",
			"token", st.Token, "epoch", st.Epoch, "epoch_holder", st.EpochHolder, "files", files, "dirs", dirs)
	}
}

// raise sets *v to x if x is larger and reports whether it did.
func raise(v *atomic.Uint64, x uint64) bool {
	for {
		prev := v.Load()
		if prev >= x {
			return false
		}
		if v.CompareAndSwap(prev, x) {
			return true
		}
	}
}

// forgetCached marks every node's cached version stale (nodes pinned by
// local state excepted), drops directory listings, and tells the kernel to
// drop its attributes, pages and entries of every known inode. The kernel
// notifications are sent from a goroutine: they may wait for locks the
// request being served holds.
func (fsys *filesystem) forgetCached() (files, dirs int) {
	type entry struct {
		parent *fs.Inode
		name   string
	}
	var inodes []*fs.Inode
	var entries []entry
	var walk func(ino *fs.Inode)
	walk = func(ino *fs.Inode) {
		inodes = append(inodes, ino)
		n := nodeOf(ino)
		if n == nil {
			return
		}
		n.forgetCached()
		switch n.base().kind {
		case kindFile:
			files++
		case kindDir:
			dirs++
			for name, ch := range ino.Children() {
				entries = append(entries, entry{ino, name})
				walk(ch)
			}
		}
	}
	walk(fsys.root)
	go func() {
		for _, e := range entries {
			e.parent.NotifyEntry(e.name)
		}
		for _, ino := range inodes {
			ino.NotifyContent(0, 0)
		}
	}()
	return files, dirs
}

// watchGuard passes the Guard's status to noteStatus whenever it changes
// (fencing.Guard.Changed) until the mount goes away: a bind, and the fenced
// latch however the Guard learns of it (a refused mutation, its own
// register reads), start or end the leader's trust and drop the caches
// without waiting for the next mutation.
func (fsys *filesystem) watchGuard() {
	if fsys.guard == nil {
		return
	}
	for {
		changed := fsys.guard.Changed() // before Status: no change is missed
		fsys.noteStatus(fsys.guard.Status())
		select {
		case <-fsys.ctx.Done():
			return
		case <-changed:
		}
	}
}
