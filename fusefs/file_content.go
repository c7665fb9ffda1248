package fusefs

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
)

// fileContent is a regular file's write side: everything this mount holds
// of the file's content beyond the version in the bucket, and the only code
// that changes it. It owns the staging file (file_content_body.go), the
// upload of a large file while it is written (file_content_upload.go,
// file_upload.go) and the commit that stores the content through the Guard
// (file_content_commit.go); fileNode and fileHandle adapt FUSE requests to
// its methods: write, truncate, readAt (read-through of the staged bytes),
// commit, drop.
//
// Content lives in the store until a handle first writes (or truncates):
// then the object is copied into a staging file (lazily, pinned to the
// version the node holds), writes go to the staging file, and the whole
// file is committed on flush (close), fsync and release. While a staging
// file exists every handle of the node reads from it, so all descriptors
// of one mount see one file. The staging file is dropped when the last
// handle is released.
//
// The content knows its node (owner) only for what a commit needs of it:
// the key, the version the content came from and the metadata to store
// (origin), and the version a commit produced (stored).
//
// Locks: body guards the staging file's bytes (Lock to create, write,
// truncate or drop it; RLock to read or upload it, so that a commit sees a
// stable body); mu guards every other field and is held only briefly,
// never across I/O. Order: body → the node's nodeBase.mu → mu →
// partUpload.mu. Nothing holding mu calls the owner, so a node's code may
// take mu under nodeBase.mu (fillAttr, lookups); code holding body may
// call the owner.
type fileContent struct {
	owner contentOwner // constant
	fsys  *filesystem

	body  sync.RWMutex
	stage *os.File // GUARDED_BY(body); nil while the content is only in the store
	// holes are the ranges of the staging file punched out once uploaded
	// (file_holes.go, file_content_upload.go). GUARDED_BY(body)
	holes holes

	mu    sync.Mutex
	size  int64     // GUARDED_BY(mu): the file's size (of the staging file when there is one)
	state fileState // GUARDED_BY(mu): what the change is (file_state.go)
	gen   uint64    // GUARDED_BY(mu): bumped by every local change; a commit cleans only if unchanged
	// storedGen is the newest gen the bucket holds or that was dropped:
	// changes up to it are nobody's to store any more. GUARDED_BY(mu)
	storedGen uint64
	// writers are the threads that made the changes held now (capped:
	// writersFull); refusal is a refusal of held changes not reported yet,
	// refusalFor the writers it is for (file_refused.go). GUARDED_BY(mu)
	writers     []uint32
	writersFull bool
	refusal     error
	refusalFor  []uint32
	// bind is the binding the uncommitted changes were made under (held.go):
	// set when the content becomes dirty, the condition of every commit of
	// them. GUARDED_BY(mu)
	bind fencing.Binding
	up   *partUpload
	// unknownWID is the write id of the last commit whose outcome was
	// unknown (it may have landed), unknownGen the gen it stored: the next
	// commit asks the bucket first (file_content_commit.go). GUARDED_BY(mu)
	unknownWID string
	unknownGen uint64
	// stageErr is why the staged content cannot be stored: a write to the
	// staging file failed (a full cache disk: ENOSPC), or a change the
	// content cannot make any more (file_content_upload.go). It is not what
	// the application wrote, so it is never committed. Every commit
	// reports it until the last handle is released, which discards the
	// changes (the file shows the store's version again), or a truncate to
	// 0 makes the content whole again. GUARDED_BY(mu)
	stageErr error
	// dirtySince is when the content became dirty (Unix nanoseconds; 0
	// while clean), set with stDirty; atomic so the dirty-age gauge reads
	// it without mu.
	dirtySince atomic.Int64
}

// contentOwner is what a file's content asks of its node (fileNode).
// The content calls it holding at most its body lock, never mu.
type contentOwner interface {
	// stagedFile: the mount tracks the owner while the content is dirty
	// or staged (filesystem.track).
	stagedFile
	key() (string, bool)
	keyOrErr() (string, error)
	// origin is what staging and commits are made on, as the node holds
	// it now; withMeta adds the metadata a commit stores.
	origin(withMeta bool) origin
	// stored moves the node to the version a commit produced.
	stored(info objstore.ObjectInfo, attrs attrsAfter)
	// touch sets the times of a change of the content.
	touch()
	// forgetName drops the kernel's directory entry of the node.
	forgetName()
	// storedSize is the size of the version the node holds.
	storedSize() int64
	// reverted shows the stored version again after the content dropped
	// changes it held for handles still open (refusedLocked); lostName:
	// the file was never stored.
	reverted(ctx context.Context, lostName bool)
}

func newFileContent(owner contentOwner, fsys *filesystem, size int64) *fileContent {
	return &fileContent{owner: owner, fsys: fsys, size: size}
}

// flags returns the content's state. LOCKS_EXCLUDED(c.mu)
func (c *fileContent) flags() fileState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// local reports whether the content holds a change the bucket lacks, was
// created here and never stored, or its name is gone. LOCKS_EXCLUDED(c.mu)
func (c *fileContent) local() bool {
	return c.flags().any(stDirty | stPending | stUnlinked)
}

// genNow returns the content's change counter. LOCKS_EXCLUDED(c.mu)
func (c *fileContent) genNow() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// storedGenNow returns storedGen. LOCKS_EXCLUDED(c.mu)
func (c *fileContent) storedGenNow() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.storedGen
}

// sizeNow returns the file's size as this mount shows it.
// LOCKS_EXCLUDED(c.mu)
func (c *fileContent) sizeNow() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}

// setStoredSize takes the size of a stored version the node moved to (a
// lookup, a refresh, an open that captured it). The caller holds the
// node's nodeBase.mu and has checked that nothing local pins the version.
// LOCKS_EXCLUDED(c.mu)
func (c *fileContent) setStoredSize(size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.size = size
}

// markDirtyLocked records a local change. No intent is written for it: the
// commit names its base in the journal when it is sent (fencing, DESIGN §7).
// LOCKS_REQUIRED(c.mu)
func (c *fileContent) markDirtyLocked() {
	defer c.checkInvariantsLocked()
	c.gen++
	c.state.set(stOpenChangeOnly, false)
	if c.state.has(stDirty) {
		return
	}
	c.state.set(stDirty, true)
	c.bind = c.fsys.binding()
	c.dirtySince.Store(time.Now().UnixNano())
	c.fsys.dirtyFiles.Add(1)
	c.fsys.track(c.owner)
}

// setCleanLocked records that the content holds no change the bucket lacks
// (committed, or dropped). LOCKS_REQUIRED(c.mu)
func (c *fileContent) setCleanLocked() {
	defer c.checkInvariantsLocked()
	c.storedGen = c.gen
	c.writers, c.writersFull = nil, false
	c.state.set(stNoUpload|stOpenChangeOnly, false)
	c.stageErr = nil
	if c.state.has(stDirty) {
		c.state.set(stDirty, false)
		c.dirtySince.Store(0)
		c.fsys.dirtyFiles.Add(-1)
	}
}

// changedAttr records a metadata change, committed with the content's
// changes (the caller, holding the node's nodeBase.mu, checked that there
// are some). LOCKS_EXCLUDED(c.mu)
func (c *fileContent) changedAttr() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.markDirtyLocked()
}

// created records a file created by this mount and not yet in the bucket:
// its open is its only change. O_CREAT|O_TRUNC (trunc) replaces whatever is
// there: if an older epoch created the name unseen, the commit replaces it
// (fencing.Guard.Replace).
func (c *fileContent) created(trunc bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state.set(stPending, true)
	c.markDirtyLocked()
	c.state.set(stOpenChangeOnly, true)
	c.state.set(stReplacing, trunc)
}

// unlink records that the file's name is gone: later commits store nothing
// and its upload, if any, is abandoned.
func (c *fileContent) unlink() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unlinkLocked()
}

// LOCKS_REQUIRED(c.mu)
func (c *fileContent) unlinkLocked() {
	c.state.set(stUnlinked, true)
	c.setCleanLocked()
	c.dropUploadLocked(false)
}

// dropUploadLocked abandons the upload in progress, if any; noMore keeps a
// new one from starting before the next commit. LOCKS_REQUIRED(c.mu)
func (c *fileContent) dropUploadLocked(noMore bool) {
	if c.up != nil {
		c.up.drop()
		c.up = nil
	}
	if noMore {
		c.state.set(stNoUpload, true)
	}
}

// failStageLocked records a failed write to the staging file (see
// stageErr); the content is dirty from then on, so that a commit reports
// it. LOCKS_REQUIRED(c.mu)
func (c *fileContent) failStageLocked(key string, err error) {
	if c.stageErr == nil {
		c.fsys.log.Warn("writing the staging file failed; the file's changes will not be stored",
			"key", key, "cache_dir", c.fsys.opts.CacheDir, "err", err)
	}
	c.failLocked(fmt.Errorf("a write to the staging file failed (%w)", err))
}

// failLocked records that the staged content cannot be stored (stageErr),
// for the reason err. LOCKS_REQUIRED(c.mu)
func (c *fileContent) failLocked(err error) {
	if c.stageErr == nil {
		c.stageErr = err
	}
	c.markDirtyLocked()
}

// checkInvariantsLocked panics when the content's state is one no code
// path may leave (as gcsfuse checks its inodes). It runs only in -race
// builds (the tests: invariantChecks), after every change of the state it
// checks. LOCKS_REQUIRED(c.mu)
func (c *fileContent) checkInvariantsLocked() {
	if !invariantChecks {
		return
	}
	fail := func(format string, args ...any) {
		key, _ := c.owner.key()
		panic(fmt.Sprintf("fusefs: file %q: %s (state=%s size=%d)", key, fmt.Sprintf(format, args...), c.state, c.size))
	}
	switch {
	case c.size < 0:
		fail("negative size")
	case c.state.has(stPending) && !c.state.any(stDirty|stUnlinked):
		// A file created here and never stored is dirty until its first
		// commit, or unlinked once that cannot happen.
		fail("pending but neither dirty nor unlinked")
	case c.stageErr != nil && !c.state.has(stDirty):
		fail("a failed staging write on a clean file")
	case c.state.has(stOpenChangeOnly) && !c.state.has(stDirty):
		fail("an open-time change on a clean file")
	case c.state.has(stDirty) != (c.dirtySince.Load() != 0):
		fail("dirty and dirtySince disagree")
	}
	if c.state.has(stDirty) {
		c.fsys.nodesMu.Lock()
		_, tracked := c.fsys.staged[c.owner]
		c.fsys.nodesMu.Unlock()
		if !tracked {
			fail("dirty but not tracked for unmount")
		}
	}
}

// pendingCommit is what one commit stores, as the content was when it
// began.
type pendingCommit struct {
	key                string
	gen                uint64
	bind               fencing.Binding // what the changes were made under
	size               int64
	pending, replacing bool
	metaLeft           bool // stored without the node's metadata (file_content_upload.go)
	base               fencing.Version
	meta               map[string]string
	body               io.ReaderAt
}

// origin is what the content's staging and commits are made on, as the
// node holds it now (contentOwner.origin).
type origin struct {
	key     string          // "" once the node left the tree
	etag    string          // the version the content came from
	version fencing.Version // its precondition form
	meta    map[string]string
}

// attrsAfter is what a commit of the content made of the node's
// attributes.
type attrsAfter uint8
