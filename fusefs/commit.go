package fusefs

// Committing a file: its staged content (or, for metadata alone, the
// unchanged content) through the Guard, conditioned on the version the node
// came from.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// commit writes the node's local changes through the Guard: the staged
// content (or the unchanged object content when only metadata changed) with
// the node's metadata, conditioned on the version the node came from (or on
// absence, for a file this mount created). It returns nil when there is
// nothing to commit. The error is what close(2) and fsync(2) report.
func (n *fileNode) commit(ctx context.Context) error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	return n.commitLocked(ctx)
}

// sync stores what the bucket does not have yet of the node: the content
// changes (commit), then, with attrs, a pending attribute change
// (attrwb.go). Its error is what close(2) and fsync(2) report.
func (n *fileNode) sync(ctx context.Context, attrs bool) error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	if err := n.commitLocked(ctx); err != nil || !attrs {
		return err
	}
	return n.storePendingAttrLocked(ctx)
}

// LOCKS_REQUIRED(n.opMu)
func (n *fileNode) commitLocked(ctx context.Context) error {
	if done, err := n.resolveUnknownLocked(ctx); done || err != nil {
		if done {
			n.dropSpentStage()
		}
		return err
	}
	metaLeft, err := n.commitStagedLocked(ctx)
	if err != nil {
		return err
	}
	n.dropSpentStage()
	if metaLeft {
		return n.storePendingAttrLocked(ctx)
	}
	return nil
}

// commitStagedLocked commits the node's changes; metaLeft reports that a
// streamed commit stored the metadata it was started with, and the node's
// own is a pending attribute change now (streamfile.go).
// LOCKS_REQUIRED(n.opMu)
func (n *fileNode) commitStagedLocked(ctx context.Context) (metaLeft bool, err error) {
	n.cmu.RLock()
	defer n.cmu.RUnlock()
	c, err := n.snapshotCommit()
	if c == nil || err != nil {
		return false, err
	}
	start := time.Now()
	info, err := n.store(ctx, c)
	if c.pending && errors.Is(err, errExist) {
		// Another client created the name first: this file can never be
		// stored there. Like an unlinked file it stays readable through
		// its open handles, but the name now shows the other object, and
		// later writes are dropped.
		n.mu.Lock()
		n.unlinked = true
		n.setCleanLocked()
		n.mu.Unlock()
		n.forgetName()
		err = fmt.Errorf("%w: %v", fencing.ErrStale, err)
	}
	if wid := fencing.WriteIDOfUnknown(err); wid != "" {
		n.mu.Lock()
		n.unknownWID, n.unknownGen = wid, c.gen
		n.mu.Unlock()
	}
	if err != nil {
		return false, fmt.Errorf("commit %s: %w", c.key, err)
	}
	info = mergeInfo(info, c.key, c.size, c.meta)
	n.fsys.log.Debug("committed", "key", c.key, "size", c.size, "etag", info.ETag, "took", time.Since(start))
	n.mu.Lock()
	defer n.mu.Unlock()
	n.info = info
	n.fetched = time.Now()
	n.pending = false
	n.state.set(stReplacing, false)
	n.attrPending = c.metaLeft          // else the commit stored n.attr
	n.state.set(stSpent, n.holes.any()) // the bucket holds what the staging file lost
	n.keepETag = info.ETag
	if n.gen == c.gen {
		n.setCleanLocked()
		if n.stage == nil {
			n.fsys.untrack(n)
		}
	}
	return c.metaLeft, nil
}

// resolveUnknownLocked asks the bucket whether the node's last commit whose
// outcome was unknown landed after all (its write id is in the object's
// metadata). If it did, the node takes that version as committed, and
// done=true when nothing changed since; if it did not, the commit is
// simply made again. LOCKS_REQUIRED(n.opMu)
func (n *fileNode) resolveUnknownLocked(ctx context.Context) (done bool, err error) {
	n.mu.Lock()
	wid, gen := n.unknownWID, n.unknownGen
	n.mu.Unlock()
	if wid == "" {
		return false, nil
	}
	key, err := n.keyOrErr()
	if err != nil {
		return false, nil // the name is gone: the commit drops the changes
	}
	info, landed, err := n.fsys.guard.Landed(ctx, key, wid)
	if err != nil {
		return false, fmt.Errorf("commit %s: the outcome of the last attempt is still unknown: %w", key, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.unknownWID = ""
	if !landed {
		return false, nil
	}
	if n.up != nil { // the stream that landed
		n.up.cancel()
		n.up = nil
	}
	n.info = info
	n.fetched = time.Now()
	n.pending = false
	n.state.set(stReplacing, false)
	n.keepETag = info.ETag
	n.state.set(stSpent, true) // if parts of the staging file were released
	if n.gen != gen {
		return false, nil // changed since: committed on top of what landed
	}
	n.attrPending = false
	n.setCleanLocked()
	return true, nil
}

// dropSpentStage drops the staging file of a node whose streamed commit
// succeeded while parts of it had been released: it no longer holds the
// content, the bucket does (handles read from there; a write stages the
// object again). Writers and truncates call dropSpentStageLocked first
// thing, as they may come in between the commit and this.
func (n *fileNode) dropSpentStage() {
	n.cmu.Lock()
	defer n.cmu.Unlock()
	n.dropSpentStageLocked()
}

// LOCKS_REQUIRED(n.cmu write)
func (n *fileNode) dropSpentStageLocked() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.state.has(stSpent) {
		return
	}
	n.state.set(stSpent, false)
	if !n.holes.any() || n.stage == nil || n.state.has(stDirty) {
		return
	}
	n.stage.Close()
	n.stage = nil
	n.resetStreamHolesLocked()
	n.fsys.stagingBytes.Add(-n.size)
	n.fsys.untrack(n)
}

// pendingCommit is what one commit stores, as the node was when it began.
type pendingCommit struct {
	key                string
	gen                uint64
	size               int64
	pending, replacing bool
	metaLeft           bool // stored without the node's metadata (streamfile.go)
	base               fencing.Version
	meta               map[string]string
	body               io.ReaderAt
}

// snapshotCommit returns what the node's commit must store, nil when there
// is nothing to store (clean, or the name is gone), or the error a commit
// reports without trying (a failed staging write).
// LOCKS_REQUIRED(n.cmu read)
func (n *fileNode) snapshotCommit() (*pendingCommit, error) {
	n.mu.Lock()
	if !n.state.has(stDirty) {
		n.mu.Unlock()
		return nil, nil
	}
	key, ok := n.key()
	if n.unlinked || !ok {
		n.unlinked = true
		n.setCleanLocked()
		n.mu.Unlock()
		return nil, nil
	}
	if err := n.stageErr; err != nil {
		n.mu.Unlock()
		return nil, fmt.Errorf("commit %s: not stored: %w; the file keeps its stored version once every descriptor is closed", key, err)
	}
	c := &pendingCommit{key: key, gen: n.gen, size: n.size, pending: n.pending, replacing: n.state.has(stReplacing),
		base: n.baseLocked(), meta: encodeAttr(n.attr, contentMeta(n.info.Meta)), body: bytes.NewReader(nil)}
	n.mu.Unlock()
	if n.stage != nil {
		c.body = n.stage
	} else if c.size != 0 {
		return nil, fmt.Errorf("commit %s: %d bytes but no staged content", key, c.size)
	}
	return c, nil
}

// store writes c through the Guard: through the node's stream when one is
// in progress, else as a create (pending) or a Put on the base; a
// whole-file replacement is the Guard's Replace, which may move it to the
// current version (fencing/replace.go). c.meta becomes what was stored. A
// staging file with released ranges is never Put.
// LOCKS_REQUIRED(n.opMu, n.cmu read)
func (n *fileNode) store(ctx context.Context, c *pendingCommit) (objstore.ObjectInfo, error) {
	if n.stage != nil && c.size > 0 {
		info, streamed, err := n.commitStream(ctx, c)
		if streamed && c.pending && errors.Is(err, fencing.ErrStale) {
			err = fmt.Errorf("%w: %s was created concurrently (%v)", errExist, c.key, err)
		}
		if streamed {
			return info, err
		}
	}
	g := n.fsys.guard
	switch {
	case n.holes.any():
		return objstore.ObjectInfo{}, fmt.Errorf("%w: nothing stored", errStreamLost)
	case c.replacing: // c.base is absent when pending: a create
		return existErr(g.Replace(ctx, c.key, c.body, c.size, c.base, c.meta))
	case c.pending:
		return n.fsys.create(ctx, c.key, c.body, c.size, c.meta)
	}
	return g.Put(ctx, c.key, c.body, c.size, c.base, c.meta)
}

// forgetName asks the kernel to drop its cached directory entry of the
// node, so that the next lookup of the name asks us (and finds what the
// store holds). Sent from a goroutine: an entry notification waits for the
// directory's lock, which the request being served may hold.
func (n *fileNode) forgetName() {
	name, parent := n.Parent()
	if parent == nil {
		return
	}
	go func() {
		if errno := parent.NotifyEntry(name); errno != 0 && errno != syscall.ENOENT {
			n.fsys.log.Debug("cannot invalidate a kernel directory entry", "name", name, "errno", errno)
		}
	}()
}

// contentMeta is the metadata kept when the content is rewritten: everything
// but checksums of the old content that other tools store.
func contentMeta(m map[string]string) map[string]string {
	if _, ok := m["md5chksum"]; !ok {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if k != "md5chksum" {
			out[k] = v
		}
	}
	return out
}

// updateAttr applies a chmod/chown/utimens: with the uncommitted content
// changes when there are some (updateMeta), else as a pending attribute
// change (attrwb.go).
func (n *fileNode) updateAttr(ctx context.Context, mutate func(*posixAttr) error) error {
	n.mu.Lock()
	local := n.state.has(stDirty) || n.pending || n.unlinked
	n.mu.Unlock()
	if local {
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
	if n.state.has(stDirty) || n.pending || n.unlinked {
		a := n.attr.clone()
		err := mutate(&a)
		if err == nil {
			a.Ctime = time.Now()
			err = checkMetaSize(encodeAttr(a, n.info.Meta))
		}
		if err == nil {
			n.attr = a
			if !n.unlinked {
				n.markDirtyLocked()
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
	n.keepETag = n.info.ETag
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
