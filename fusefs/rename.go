package fusefs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// renameParallelism bounds the concurrent copies and deletes of a directory
// rename.
const renameParallelism = 8

var _ = (fs.NodeRenamer)((*dirNode)(nil))

// Rename moves a file or symlink with a server-side copy conditioned on the
// destination's version, then a conditional delete of the source. A
// directory is moved object by object (not atomic; at most
// Options.MaxDirRename objects, else EXDEV). RENAME_NOREPLACE is honoured;
// RENAME_EXCHANGE is not supported (EINVAL).
func (d *dirNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	srcKey, err := d.childKey(name)
	if err != nil {
		return d.fsys.mutationErrno(ctx, "rename", srcKey, err)
	}
	np, ok := newParent.(*dirNode)
	if !ok {
		return d.fsys.mutationErrno(ctx, "rename", srcKey, fmt.Errorf("%w: destination parent is not a directory", errNotDir))
	}
	dstKey, err := np.childKey(newName)
	if err == nil && flags&^uint32(unix.RENAME_NOREPLACE) != 0 {
		err = fmt.Errorf("%w: rename flags %#x (only RENAME_NOREPLACE is supported)", errInvalid, flags)
	}
	if err == nil {
		err = d.fsys.checkWritable("rename")
	}
	if err == nil {
		ctx, cancel := d.fsys.mutctx(ctx)
		defer cancel()
		err = d.rename(ctx, name, srcKey, np, newName, dstKey, flags&unix.RENAME_NOREPLACE != 0)
		if err == nil {
			np.entryAdded(newName)
			d.noteRemoval(name)
			// A change pending on a forgotten node of the name replaced.
			d.fsys.attrwb.dropOrphans(false, dstKey)
			d.fsys.attrwb.dropOrphans(true, dstKey+"/")
		}
	}
	return d.fsys.mutationErrno(ctx, "rename", srcKey+" -> "+dstKey, err)
}

func (d *dirNode) rename(ctx context.Context, name, srcKey string, np *dirNode, newName, dstKey string, noreplace bool) error {
	src := d.GetChild(name)
	if src == nil {
		r, err := d.fsys.resolve(ctx, srcKey)
		if err != nil {
			return err
		}
		src = d.childNode(ctx, name, r)
	}
	dst := np.GetChild(newName)
	if sd, ok := src.Operations().(*dirNode); ok {
		return d.fsys.renameDir(ctx, sd, srcKey, np, dst, dstKey, noreplace)
	}
	return d.fsys.renameObject(ctx, src, srcKey, dst, dstKey, noreplace)
}

// lockTwo locks two node mutexes in address order (so two renames in
// opposite directions cannot deadlock). b may be nil or equal to a.
func lockTwo(a, b *sync.Mutex) func() {
	if b == nil || a == b {
		a.Lock()
		return a.Unlock
	}
	if uintptr(unsafe.Pointer(b)) < uintptr(unsafe.Pointer(a)) {
		a, b = b, a
	}
	a.Lock()
	b.Lock()
	return func() { b.Unlock(); a.Unlock() }
}

// renameObject renames a file or a symlink.
func (fsys *filesystem) renameObject(ctx context.Context, src *fs.Inode, srcKey string, dst *fs.Inode, dstKey string, noreplace bool) error {
	sb := baseOf(src)
	var db *nodeBase
	if dst != nil {
		if _, isDir := dst.Operations().(*dirNode); isDir {
			return fmt.Errorf("%w: %s", errIsDir, dstKey)
		}
		db = baseOf(dst)
	}
	var dbMu *sync.Mutex
	if db != nil {
		dbMu = &db.opMu
	}
	// A delete of the destination unlink acknowledged lands first, so that
	// the copy meets the bucket as this mount shows it (deletewb.go).
	if err := fsys.deletes.wait(ctx, dstKey); ctx.Err() != nil {
		return err
	}
	unlock := lockTwo(&sb.opMu, dbMu)
	defer unlock()

	sf, _ := src.Operations().(*fileNode)
	if sf != nil {
		// The copy is of the stored object: commit local changes first.
		if err := sf.commitLocked(ctx); err != nil {
			return err
		}
		if sf.c.flags().has(stUnlinked) {
			return fmt.Errorf("%w: %s", objstore.ErrNotFound, srcKey)
		}
	}
	info, a := sb.snapshot()
	dstBase, err := renameTarget(ctx, dst, db, sb, dstKey, noreplace)
	if err != nil {
		return err
	}

	a.Ctime = time.Now()
	meta := encodeAttr(a, info.Meta)
	// Strict mode: the copy's and the delete's intents in one journal write.
	release := fsys.guard.Reserve(ctx,
		fencing.Intent{Key: dstKey, Base: dstBase}, fencing.Intent{Key: srcKey, Base: fencing.VersionOf(info)})
	defer release()
	from := info
	from.Key = srcKey
	out, err := fsys.copyForRename(ctx, from, dstKey, dstBase, meta, noreplace)
	if err != nil {
		return err
	}
	if err := fsys.deleteObject(ctx, srcKey, fencing.VersionOf(info)); err != nil {
		fsys.log.Warn("rename copied the object but could not delete the source; both names exist",
			"src", srcKey, "dst", dstKey, "err", err)
		return fmt.Errorf("%w: rename %s to %s: the copy landed, the source's delete did not (%w); both names exist",
			errHalfDone, srcKey, dstKey, err)
	}
	out = mergeInfo(out, dstKey, info.Size, meta)
	sb.mu.Lock()
	sb.info = out
	sb.attr = a
	sb.attrPending = false // the copy carries them
	sb.fetched = time.Now()
	sb.mu.Unlock()
	if sf != nil {
		sf.mu.Lock()
		sf.keepETag = out.ETag
		sf.mu.Unlock()
	}
	if dst != nil && db != sb {
		db.dropPendingAttr() // replaced: nothing left to store it on
		if n, ok := dst.Operations().(interface{ markUnlinked() }); ok {
			n.markUnlinked() // a file, symlink or special file
		}
	}
	return nil
}

// renameTarget returns the version the rename's copy onto dstKey is
// conditioned on (absent unless this mount knows a stored destination),
// refusing a live destination with noreplace, and keeps a replaced file's
// content readable for its open handles. LOCKS_REQUIRED(db.opMu)
func renameTarget(ctx context.Context, dst *fs.Inode, db, sb *nodeBase, dstKey string, noreplace bool) (fencing.Version, error) {
	if db == nil || db == sb {
		return fencing.Version{}, nil
	}
	df, _ := dst.Operations().(*fileNode)
	db.mu.Lock()
	dstVersion := fencing.VersionOf(db.info)
	pendingOnly := df != nil && df.c.flags().has(stPending)
	gone := df != nil && df.c.flags().has(stUnlinked)
	db.mu.Unlock()
	if gone {
		return fencing.Version{}, nil
	}
	if noreplace {
		return fencing.Version{}, fmt.Errorf("%w: %s", errExist, dstKey)
	}
	if pendingOnly {
		return fencing.Version{}, nil
	}
	if df != nil {
		// Open handles of the replaced file keep reading its content.
		if err := df.preserveForReadersLocked(ctx); err != nil {
			return fencing.Version{}, err
		}
	}
	return dstVersion, nil
}

// copyForRename copies src (the version the mount knows) onto dstKey
// conditioned on dstBase; when the destination was thought absent but is not, it is
// replaced on its current version (a tombstone, or an object unless
// noreplace: EEXIST).
func (fsys *filesystem) copyForRename(ctx context.Context, src objstore.ObjectInfo, dstKey string, dstBase fencing.Version, meta map[string]string, noreplace bool) (objstore.ObjectInfo, error) {
	cp := func(base fencing.Version) (objstore.ObjectInfo, error) {
		return fsys.guard.CopyFrom(ctx, src, dstKey, base, meta)
	}
	out, err := cp(dstBase)
	if err == nil || !isConflict(err) || dstBase.Exists() {
		return out, err
	}
	// Something we did not know about is at the destination.
	cur, serr := fsys.store.Stat(ctx, dstKey)
	switch {
	case serr != nil:
		if !errors.Is(serr, objstore.ErrNotFound) {
			return out, serr
		}
		return out, err
	case fencing.IsTombstone(cur):
		return cp(fencing.VersionOf(cur))
	case noreplace:
		return out, fmt.Errorf("%w: %s", errExist, dstKey)
	default:
		return cp(fencing.VersionOf(cur))
	}
}

// renameDir moves every object below srcKey+"/" to dstKey+"/": all copies
// first (conditioned on the destinations being absent), then the deletes of
// the sources (conditioned on the versions copied). A failed copy removes
// the copies already made; a failed delete leaves both trees and is
// reported.
func (fsys *filesystem) renameDir(ctx context.Context, sd *dirNode, srcKey string, np *dirNode, dst *fs.Inode, dstKey string, noreplace bool) error {
	srcPrefix, dstPrefix := srcKey+"/", dstKey+"/"
	// Deletes unlink acknowledged below either tree land first: the
	// plan lists both (deletewb.go).
	for _, p := range []string{srcPrefix, dstPrefix} {
		if err := fsys.deletes.waitPrefix(ctx, p); ctx.Err() != nil {
			return err
		}
	}
	if err := fsys.checkDirRename(ctx, srcPrefix, dst, dstKey, noreplace); err != nil {
		return err
	}
	// The copies are of stored objects: commit what is pending below.
	if err := sd.storePendingAttr(ctx); err != nil {
		return err
	}
	if err := commitTree(ctx, sd.EmbeddedInode()); err != nil {
		return err
	}
	if err := fsys.attrwb.storeOrphansBelow(ctx, srcPrefix); err != nil {
		return err
	}
	srcs, dstVersions, err := fsys.dirRenamePlan(ctx, srcPrefix, dstPrefix)
	if err != nil {
		return err
	}
	copied, err := fsys.copyTree(ctx, srcs, srcPrefix, dstPrefix, dstVersions)
	if err != nil {
		return err
	}
	if err := fsys.deleteTree(ctx, srcs, srcPrefix); err != nil {
		fsys.log.Warn("directory rename copied everything but could not delete all sources; both trees exist",
			"src", srcPrefix, "dst", dstPrefix, "err", err)
		return err
	}
	// The nodes below move with the tree (go-fuse moves the subtree when we
	// return); give them the versions copied.
	byOld := make(map[string]objstore.ObjectInfo, len(srcs))
	for i, e := range srcs {
		byOld[e.Key] = copied[i]
	}
	updateTree(sd.EmbeddedInode(), srcPrefix, byOld)
	if db := baseOf(dst); db != nil {
		db.dropPendingAttr() // replaced: nothing left to store it on
	}
	fsys.deletes.moveFailures(srcPrefix, dstPrefix)
	return nil
}

// checkDirRename refuses a directory rename that cannot be done: into
// itself, of the protocol directory's parent, beyond max_dir_rename, onto
// a non-directory, onto anything with noreplace, or onto a non-empty
// directory.
func (fsys *filesystem) checkDirRename(ctx context.Context, srcPrefix string, dst *fs.Inode, dstKey string, noreplace bool) error {
	dstPrefix := dstKey + "/"
	if strings.HasPrefix(dstPrefix, srcPrefix) {
		return fmt.Errorf("%w: cannot move %s into itself", errInvalid, srcPrefix)
	}
	if strings.HasPrefix(fsys.hidden+"/", srcPrefix) {
		return fmt.Errorf("%w: %s holds the fencing protocol directory", errCrossDevice, srcPrefix)
	}
	if fsys.opts.MaxDirRename == 0 {
		return fmt.Errorf("%w: directory renames are disabled (max_dir_rename=0)", errCrossDevice)
	}
	if dst != nil {
		dd, ok := dst.Operations().(*dirNode)
		if !ok {
			return fmt.Errorf("%w: %s", errNotDir, dstKey)
		}
		if noreplace {
			return fmt.Errorf("%w: %s", errExist, dstKey)
		}
		return dd.checkEmpty(ctx, dstPrefix)
	}
	// Not known here: it may still exist in the store.
	if noreplace {
		if _, err := fsys.resolve(ctx, dstKey); err == nil {
			return fmt.Errorf("%w: %s", errExist, dstKey)
		} else if !errors.Is(err, objstore.ErrNotFound) {
			return err
		}
	}
	live, err := fsys.hasLive(ctx, dstPrefix)
	if err != nil {
		return err
	}
	if live {
		return fmt.Errorf("%w: %s", errNotEmpty, dstPrefix)
	}
	return nil
}

// dirRenamePlan lists the objects to move (tombstones dropped, at most
// max_dir_rename) and what is at the destination (tombstones and the marker
// of an empty directory), the versions the copies are conditioned on.
func (fsys *filesystem) dirRenamePlan(ctx context.Context, srcPrefix, dstPrefix string) ([]objstore.Entry, map[string]fencing.Version, error) {
	var entries []objstore.Entry
	// With metadata where the listing carries it: the copies and deletes
	// then need no HEAD of a source.
	err := fsys.store.ListMeta(ctx, srcPrefix, "", func(e objstore.Entry) error {
		if fsys.isHidden(e.Key) {
			return nil
		}
		entries = append(entries, e)
		if fsys.opts.MaxDirRename > 0 && len(entries) > fsys.opts.MaxDirRename {
			return fmt.Errorf("%w: %s holds more than %d objects (max_dir_rename)", errCrossDevice, srcPrefix, fsys.opts.MaxDirRename)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	live := make([]bool, len(entries))
	if err := parallel(ctx, len(entries), func(ctx context.Context, i int) error {
		var err error
		entries[i], live[i], err = fsys.described(ctx, entries[i])
		return err
	}); err != nil {
		return nil, nil, err
	}
	dstVersions := map[string]fencing.Version{}
	err = fsys.store.List(ctx, dstPrefix, "", func(e objstore.Entry) error {
		// The destination is empty: anything but its marker is a tombstone.
		dstVersions[e.Key] = fencing.Version{ETag: e.ETag, Tombstone: e.Key != dstPrefix}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	var srcs []objstore.Entry
	for i, e := range entries {
		if live[i] {
			srcs = append(srcs, e)
		}
	}
	return srcs, dstVersions, nil
}

// copyTree copies every source to its destination (intents reserved in
// batches) and returns the copies; a failed copy removes the copies
// already made, so the source stays the only tree.
func (fsys *filesystem) copyTree(ctx context.Context, srcs []objstore.Entry, srcPrefix, dstPrefix string, dstVersions map[string]fencing.Version) ([]objstore.ObjectInfo, error) {
	copied := make([]objstore.ObjectInfo, len(srcs))
	done := make([]bool, len(srcs))
	dstOf := func(e objstore.Entry) string { return dstPrefix + strings.TrimPrefix(e.Key, srcPrefix) }
	err := fsys.reserved(ctx, len(srcs), func(i int) fencing.Intent {
		to := dstOf(srcs[i])
		return fencing.Intent{Key: to, Base: dstVersions[to]}
	}, func(ctx context.Context, i int) error {
		e := srcs[i]
		to := dstOf(e)
		src, _ := e.Info() // described by dirRenamePlan
		out, err := fsys.guard.CopyFrom(ctx, src, to, dstVersions[to], nil)
		if err != nil {
			return fmt.Errorf("copy %s to %s: %w", e.Key, to, err)
		}
		copied[i], done[i] = mergeInfo(out, to, e.Size, nil), true
		return nil
	})
	if err == nil {
		return copied, nil
	}
	for i := range srcs {
		if done[i] {
			if derr := fsys.guard.Delete(fsys.ctx, copied[i].Key, fencing.Version{ETag: copied[i].ETag}); derr != nil {
				fsys.log.Warn("directory rename: could not remove a copy after a failure",
					"key", copied[i].Key, "err", derr)
			}
		}
	}
	return nil, err
}

// deleteTree deletes the sources, conditioned on the versions copied; the
// marker last, so that an interrupted rename still shows the source
// directory.
func (fsys *filesystem) deleteTree(ctx context.Context, srcs []objstore.Entry, srcPrefix string) error {
	marker := -1
	var rest []int
	for i, e := range srcs {
		if e.Key == srcPrefix {
			marker = i
		} else {
			rest = append(rest, i)
		}
	}
	err := fsys.reserved(ctx, len(rest), func(j int) fencing.Intent {
		return fencing.Intent{Key: srcs[rest[j]].Key, Base: entryVersion(srcs[rest[j]])}
	}, func(ctx context.Context, j int) error {
		e := srcs[rest[j]]
		return fsys.deleteObject(ctx, e.Key, entryVersion(e))
	})
	if err == nil && marker >= 0 {
		err = fsys.deleteObject(ctx, srcPrefix, entryVersion(srcs[marker]))
	}
	return err
}

// entryVersion is the version of an object dirRenamePlan described, with
// its ETag-ABA record (the delete then needs no HEAD to learn it).
func entryVersion(e objstore.Entry) fencing.Version {
	info, _ := e.Info()
	return fencing.VersionOf(info)
}

// commitTree commits every dirty file below ino.
func commitTree(ctx context.Context, ino *fs.Inode) error {
	for _, ch := range ino.Children() {
		if b := baseOf(ch); b != nil {
			if err := b.storePendingAttr(ctx); err != nil {
				return err
			}
		}
		if fn, ok := ch.Operations().(*fileNode); ok {
			if err := fn.commit(ctx); err != nil {
				return err
			}
		}
		if err := commitTree(ctx, ch); err != nil { // below a directory
			return err
		}
	}
	return nil
}

// updateTree gives the node of ino, whose object was key (a directory's
// marker key: its prefix), and the nodes below it the versions their
// objects were copied to.
func updateTree(ino *fs.Inode, key string, byOld map[string]objstore.ObjectInfo) {
	if info, ok := byOld[key]; ok {
		if n := nodeOf(ino); n != nil {
			b := n.base()
			b.mu.Lock()
			n.movedLocked(info)
			b.mu.Unlock()
		}
	}
	for name, ch := range ino.Children() {
		k := key + name
		if ch.IsDir() {
			k += "/"
		}
		updateTree(ch, k, byOld)
	}
}

// reserveChunk is how many mutations of a directory rename share one
// reservation (one journal write in strict mode; the journal holds them
// while they run).
const reserveChunk = 128

// reserved runs fn for i in [0, n) like parallel, in chunks of
// reserveChunk whose intents (intent(i)) are reserved with one journal
// write before the chunk starts (Guard.Reserve). It stops at the first
// error.
func (fsys *filesystem) reserved(ctx context.Context, n int, intent func(i int) fencing.Intent, fn func(ctx context.Context, i int) error) error {
	for lo := 0; lo < n; lo += reserveChunk {
		hi := min(lo+reserveChunk, n)
		ins := make([]fencing.Intent, 0, hi-lo)
		for i := lo; i < hi; i++ {
			ins = append(ins, intent(i))
		}
		release := fsys.guard.Reserve(ctx, ins...)
		err := parallel(ctx, hi-lo, func(ctx context.Context, j int) error { return fn(ctx, lo+j) })
		release()
		if err != nil {
			return err
		}
	}
	return nil
}

// parallel runs fn for 0..n-1 with at most renameParallelism at a time and
// returns the first error (the others are cancelled).
func parallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(renameParallelism)
	for i := 0; i < n && gctx.Err() == nil; i++ {
		g.Go(func() error { return fn(gctx, i) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err() // cancelled before every fn ran
}
