package fusefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// maxKeyLen is S3's limit on object keys.
const maxKeyLen = 1024

// maxNameLen is the longest name of one directory entry (NAME_MAX): longer
// names are ENAMETOOLONG, as on ext4.
const maxNameLen = 255

// filesystem is the state shared by every node of one mount.
type filesystem struct {
	// Dependencies.
	store objstore.Store
	guard Guard // nil only for a ReadOnly mount
	log   *slog.Logger

	// Constant after construction.
	opts      Options
	prefix    string // Options.Prefix
	hidden    string // FenceDomain + ".fencefs": hidden key (and prefix with "/")
	stageDir  string // private directory for staging files
	mountTime time.Time
	def       attrDefaults
	ctx       context.Context // cancelled when the mount goes away
	cancel    context.CancelFunc
	metrics   *metrics
	root      *fs.Inode // the root directory's inode
	// uploadSlots bounds the parts of streamed uploads in flight
	// (Options.UploadConcurrency): send to take a slot.
	uploadSlots chan struct{}
	// noPunch: the cache directory cannot punch holes; streamed files
	// keep their whole content (file_upload.go).
	noPunch atomic.Bool

	// capturedGets counts the GETs sent at open that still serve their
	// handle (file_capture.go), bounded by maxCapturedGets.
	capturedGets atomic.Int64
	// refused remembers the opens refused for a superseded node until the
	// kernel's retry of each (file_capture.go).
	refused openRefusals

	// Counters for metrics (atomic).
	dirtyFiles   atomic.Int64
	stagingBytes atomic.Int64
	// bindErr is why the last bind through XattrToken failed, with its
	// time ("" or nil once one succeeds).
	bindErr atomic.Pointer[string]
	// ledToken is the newest token this mount has been active with; a
	// newer one is an activation (activate.go).
	ledToken atomic.Uint64
	// fencedToken is the newest token this mount has seen fenced.
	fencedToken atomic.Uint64
	// leadingSince is when the mount became the active leader it still is
	// (Unix nanoseconds), 0 while it is not (activate.go).
	leadingSince atomic.Int64
	// mntID is the kernel's id of the mount (file_handle_dupclose.go); 0 if unknown.
	mntID atomic.Int64
	// mountDir is the mountpoint, set by Mount before the kernel mount
	// serves: where file_handle_dupclose.go looks mntID up when a FLUSH arrives before
	// Mount stored it.
	mountDir string

	// attrwb stores deferred attribute changes; nil when
	// Options.AttrWriteback is 0 (each is stored at once).
	attrwb *attrWriteback
	// deletes sends the deletes unlink acknowledged; nil when
	// Options.DeleteConcurrency is negative (each is sent at once).
	deletes *deleteWriteback

	nodesMu sync.Mutex
	staged  map[stagedFile]struct{} // GUARDED_BY(nodesMu): files holding local changes or a staging file
}

func newFilesystem(opts Options, stageDir string) *filesystem {
	ctx, cancel := context.WithCancel(context.Background())
	fsys := &filesystem{
		store:     opts.Store,
		guard:     opts.Guard,
		log:       opts.Logger,
		opts:      opts,
		prefix:    opts.Prefix,
		hidden:    opts.FenceDomain + fencing.ProtocolDir,
		stageDir:  stageDir,
		mountTime: time.Now(),
		def: attrDefaults{
			UID: opts.UID, GID: opts.GID,
			FileMode: uint32(opts.FileMode.Perm()), DirMode: uint32(opts.DirMode.Perm()),
		},
		ctx:    ctx,
		cancel: cancel,
		staged: map[stagedFile]struct{}{},

		uploadSlots: make(chan struct{}, opts.UploadConcurrency),
	}
	if opts.AttrWriteback > 0 {
		fsys.attrwb = newAttrWriteback(fsys, opts.AttrWriteback)
	}
	if opts.DeleteConcurrency > 0 {
		fsys.deletes = newDeleteWriteback(opts.DeleteConcurrency, fsys.deleteInBackground, fsys.deleteFailed)
	}
	fsys.metrics = newMetrics(gauges{
		attrPending:    func() int { return fsys.attrwb.pending() },
		pendingDeletes: func() int { return fsys.deletes.count() },
		dirtyFiles:     fsys.dirtyFiles.Load,
		stagingBytes:   fsys.stagingBytes.Load,
		oldestDirty:    func() time.Duration { return fsys.oldestDirtyAge(time.Now()) },
		stagingFS:      fsys.stagingFS,
	})
	return fsys
}

// opctx derives the context of one read-only operation (lookup, getattr,
// read, readdir, readlink), one objstore.WithOperation: while the storage is
// known down the call waits for at most one check of it. It is cancelled when the mount goes away and,
// with Options.HonorInterrupts, when the kernel interrupts the request (the
// caller then sees EINTR).
//
// By default interrupts are ignored, as NFS does since Linux 2.6.25 and
// gcsfuse does by default: a process receiving any signal (Go programs
// receive SIGURG for goroutine preemption all the time) would otherwise see
// EINTR from read(2), stat(2) or close(2), which almost no program retries.
// A fatal signal still ends the waiting process at once (the kernel stops
// waiting for the reply).
func (fsys *filesystem) opctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if !fsys.opts.HonorInterrupts {
		return fsys.mutctx(ctx)
	}
	c, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(fsys.ctx, cancel)
	return objstore.WithOperation(c), func() { stop(); cancel() }
}

// mutctx derives the context of a mutation: cancelled only when the mount
// goes away, never by an interrupt, because an abandoned conditional write
// has an unknown outcome the caller could not act on. Like opctx it is one
// objstore.WithOperation. It keeps the caller's
// identity (uid, gid) for new objects.
func (fsys *filesystem) mutctx(ctx context.Context) (context.Context, context.CancelFunc) {
	c := fsys.ctx
	if caller, ok := fuse.FromContext(ctx); ok {
		c = fuse.NewContext(c, caller)
	}
	c, cancel := context.WithCancel(c)
	// Bound to the binding current at the request's start (held.go): a
	// mutation that waits out a bind to another line is refused.
	return objstore.WithOperation(heldCtx(c, fsys.binding())), cancel
}

// checkWritable fails fast, without a round trip, when mutation op cannot
// succeed: the mount is read-only, has no token, or is fenced (Guard.Admit,
// which counts the refusal). The Guard re-checks on every mutation; this
// only gives the right errno early (for example at open(O_WRONLY) rather
// than at close).
func (fsys *filesystem) checkWritable(op string) error {
	if fsys.opts.Access.ReadOnly || fsys.guard == nil {
		return fmt.Errorf("%w: mounted read-only", fencing.ErrReadOnly)
	}
	st, err := fsys.guard.Admit(op)
	fsys.noteStatus(st)
	return err
}

// isHidden reports whether key is the protocol directory or inside it.
func (fsys *filesystem) isHidden(key string) bool {
	return key == fsys.hidden || strings.HasPrefix(key, fsys.hidden+"/")
}

// childKey returns the key of name inside the directory whose key prefix is
// dirKey, refusing names S3 or fencefs cannot store.
func (fsys *filesystem) childKey(dirKey, name string) (string, error) {
	key := dirKey + name
	if len(name) > maxNameLen {
		return key, fmt.Errorf("%w: name of %d bytes (at most %d)", errNameTooLong, len(name), maxNameLen)
	}
	if len(key)+1 > maxKeyLen {
		return key, fmt.Errorf("%w: key %q is longer than S3 accepts", errNameTooLong, key)
	}
	if fsys.isHidden(key) {
		return key, fmt.Errorf("%w: %q is reserved for fencing", errPerm, key)
	}
	return key, nil
}

// pathOf returns the path of n below the root ("" for the root), or false
// when n is no longer linked into the tree (unlinked or replaced).
func (fsys *filesystem) pathOf(n *fs.Inode) (string, bool) {
	root := fsys.root
	var segs []string
	for p := n; p != root; {
		name, parent := p.Parent()
		if parent == nil {
			return "", false
		}
		segs = append(segs, name)
		p = parent
	}
	for i, j := 0, len(segs)-1; i < j; i, j = i+1, j-1 {
		segs[i], segs[j] = segs[j], segs[i]
	}
	return strings.Join(segs, "/"), true
}

// isConflict reports an error saying that the key is not at the version a
// conditional mutation expected.
func isConflict(err error) bool {
	return errors.Is(err, fencing.ErrStale) || errors.Is(err, objstore.ErrPrecondition)
}

// resolved is what lookup found at a name.
type resolved struct {
	kind uint32              // kindFile, kindDir, kindSymlink; 0 = nothing
	info objstore.ObjectInfo // the object, or the directory marker (ETag "" when implicit)
}

// resolve finds what a name is, in the order s3fs uses: the object at key
// (a file or symlink; a tombstone counts as absent), then the directory
// marker key+"/" and the objects below key+"/" (an implicit directory). A
// name that is both a file and a directory resolves to the file. An object
// whose delete this mount acknowledged is absent (deletewb.go).
func (fsys *filesystem) resolve(ctx context.Context, key string) (resolved, error) {
	var info objstore.ObjectInfo
	var err error
	if fsys.deletes.isPending(key) {
		err = objstore.ErrNotFound // its delete is on its way: absent here
	} else {
		info, err = fsys.store.Stat(ctx, key)
	}
	var dirMeta *objstore.ObjectInfo
	switch {
	case err == nil && !fencing.IsTombstone(info):
		if k := kindOf(key, info.Meta); k != kindDir {
			return resolved{kind: k, info: info}, nil
		}
		// An old-style s3fs directory object without the slash: a
		// directory; its metadata is used when there is no marker.
		dirMeta = &info
	case err == nil, errors.Is(err, objstore.ErrNotFound):
	default:
		return resolved{}, err
	}
	dirKey := key + "/"
	var (
		wg       sync.WaitGroup
		marker   objstore.ObjectInfo
		mErr     error
		live     bool
		liveErr  error
		childCtx context.Context
		cancel   context.CancelFunc
	)
	childCtx, cancel = context.WithCancel(ctx)
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		live, liveErr = fsys.hasLive(childCtx, dirKey)
	}()
	marker, mErr = fsys.store.Stat(ctx, dirKey)
	if mErr == nil && !fencing.IsTombstone(marker) {
		cancel()
		wg.Wait()
		return resolved{kind: kindDir, info: marker}, nil
	}
	wg.Wait()
	if mErr != nil && !errors.Is(mErr, objstore.ErrNotFound) {
		return resolved{}, mErr
	}
	if liveErr != nil {
		return resolved{}, liveErr
	}
	if live || dirMeta != nil {
		r := resolved{kind: kindDir}
		if dirMeta != nil {
			r.info.Meta = dirMeta.Meta
			r.info.LastModified = dirMeta.LastModified
		}
		return r, nil
	}
	return resolved{}, fmt.Errorf("%w: %s", objstore.ErrNotFound, key)
}

// hasLive reports whether anything visible lives below prefix: an object
// other than the marker prefix itself, that is not a tombstone, not in the
// hidden protocol directory and not being deleted by this mount. The marker
// alone does not count (callers check it separately). The listing carries
// the objects' metadata where the store's can, so that tombstones (every
// delete's, on a store that ignores If-Match on DELETE) need no HEAD each.
func (fsys *filesystem) hasLive(ctx context.Context, prefix string) (bool, error) {
	found := false
	err := fsys.store.ListMeta(ctx, prefix, "", func(e objstore.Entry) error {
		if e.Key == prefix || fsys.isHidden(e.Key) || fsys.deletes.isPending(e.Key) {
			return nil
		}
		ok, err := fsys.notTombstone(ctx, e)
		if err != nil {
			return err
		}
		if ok {
			found = true
			return errStopList
		}
		return nil
	})
	if errors.Is(err, errStopList) {
		err = nil
	}
	return found, err
}

// notTombstone decides whether a listed object is live. Only entries of
// exactly fencing.TombstoneSize bytes can be tombstones; those are confirmed
// with a Stat unless the listing carried their metadata.
func (fsys *filesystem) notTombstone(ctx context.Context, e objstore.Entry) (bool, error) {
	if _, ok := e.Info(); !ok && e.Size != fencing.TombstoneSize {
		return true, nil
	}
	_, live, err := fsys.described(ctx, e)
	return live, err
}

// described returns e with its object's metadata, read with a HEAD where
// the listing did not carry it (the copy and the delete of the move then
// need none of their own), and whether the object is live: there, and not
// a tombstone. A HEAD finding a newer version describes that one.
func (fsys *filesystem) described(ctx context.Context, e objstore.Entry) (objstore.Entry, bool, error) {
	if info, ok := e.Info(); ok {
		return e, !fencing.IsTombstone(info), nil
	}
	info, err := fsys.store.Stat(ctx, e.Key)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return e, false, nil
	case err != nil:
		return e, false, err
	}
	e.Size, e.ETag, e.LastModified, e.ContentType = info.Size, info.ETag, info.LastModified, info.ContentType
	e.Meta = info.Meta
	if e.Meta == nil {
		e.Meta = map[string]string{}
	}
	return e, !fencing.IsTombstone(info), nil
}

// create writes key as a new object through the Guard (which creates over
// a tombstone), after the pending delete of the name, if any (deletewb.go:
// whatever its outcome); a live object there is errExist.
func (fsys *filesystem) create(ctx context.Context, key string, body io.ReaderAt, size int64, meta map[string]string) (objstore.ObjectInfo, error) {
	if err := fsys.deletes.wait(ctx, key); ctx.Err() != nil {
		return objstore.ObjectInfo{}, err
	}
	return existErr(fsys.guard.Create(ctx, key, body, size, meta))
}

// existErr makes a create's fencing.ErrExist errExist.
func existErr(info objstore.ObjectInfo, err error) (objstore.ObjectInfo, error) {
	if errors.Is(err, fencing.ErrExist) {
		err = fmt.Errorf("%w: %w", errExist, err)
	}
	return info, err
}

// createEmpty writes an empty object (directory marker, empty file) through
// the Guard as a create.
func (fsys *filesystem) createEmpty(ctx context.Context, key string, meta map[string]string) (objstore.ObjectInfo, error) {
	return fsys.create(ctx, key, bytes.NewReader(nil), 0, meta)
}

// deleteObject deletes key at version base (fencing.VersionOf of what the
// mount read, so that the Guard knows the key's ETag-ABA record without a
// HEAD when the read carried metadata). A key that is already gone (deleted
// or a tombstone) counts as deleted; one that changed is ErrStale.
func (fsys *filesystem) deleteObject(ctx context.Context, key string, base fencing.Version) error {
	err := fsys.guard.Delete(ctx, key, base)
	if err == nil || !(isConflict(err) || errors.Is(err, objstore.ErrNotFound)) {
		return err
	}
	cur, serr := fsys.store.Stat(ctx, key)
	if errors.Is(serr, objstore.ErrNotFound) || (serr == nil && fencing.IsTombstone(cur)) {
		return nil
	}
	if serr != nil {
		return serr
	}
	return fmt.Errorf("%w: %s changed since it was read (%v)", fencing.ErrStale, key, err)
}

// stagedFile is a regular file whose content is dirty or staged (a
// fileNode): what unmount commits and the dirty-age gauge reads.
type stagedFile interface {
	// commit stores the file's changes (close(2)'s commit).
	commit(ctx context.Context) error
	// dirtySince is when the file became dirty (Unix nanoseconds), 0
	// while it is clean.
	dirtySince() int64
}

// deleteInBackground is deleteObject of a delete unlink acknowledged
// (deletewb.go), in a mutation of its own.
func (fsys *filesystem) deleteInBackground(key string, base fencing.Version, bind fencing.Binding) error {
	ctx, cancel := fsys.mutctx(context.Background())
	defer cancel()
	return fsys.deleteObject(heldCtx(ctx, bind), key, base)
}

// deleteFailed logs and counts an acknowledged delete that failed.
func (fsys *filesystem) deleteFailed(key string, err error) {
	fsys.metrics.deleteFailures.Inc()
	fsys.log.Warn("an acknowledged delete could not be stored: the name shows the object again, and the directory's next fsync reports it",
		"key", key, "err", err)
}

// track adds f to the files Unmount must commit (dirty or staged).
func (fsys *filesystem) track(f stagedFile) {
	fsys.nodesMu.Lock()
	fsys.staged[f] = struct{}{}
	fsys.nodesMu.Unlock()
}

func (fsys *filesystem) untrack(f stagedFile) {
	fsys.nodesMu.Lock()
	delete(fsys.staged, f)
	fsys.nodesMu.Unlock()
}

// newAttr returns the attributes of an object created now by caller.
func newAttr(ctx context.Context, kind, perm uint32) posixAttr {
	now := time.Now()
	a := posixAttr{Mode: kind | perm&0o7777, Mtime: now, Ctime: now, Atime: now}
	if c, ok := fuse.FromContext(ctx); ok {
		a.UID, a.GID = c.Uid, c.Gid
	}
	return a
}

// mergeInfo fills what a Guard result may leave out with what the caller
// knows it wrote.
func mergeInfo(info objstore.ObjectInfo, key string, size int64, meta map[string]string) objstore.ObjectInfo {
	if info.Key == "" {
		info.Key = key
	}
	if info.Size == 0 {
		info.Size = size
	}
	if info.Meta == nil {
		info.Meta = meta
	}
	if info.LastModified.IsZero() {
		info.LastModified = time.Now()
	}
	return info
}

// fillAttr writes a's fields into out.
func fillAttr(out *fuse.Attr, a posixAttr, size int64, nlink uint32) {
	out.Mode = a.Mode
	out.Size = uint64(size)
	out.Blocks = (uint64(size) + 511) / 512
	out.Blksize = 4096
	out.Nlink = nlink
	out.Uid = a.UID
	out.Gid = a.GID
	out.SetTimes(&a.Atime, &a.Mtime, &a.Ctime)
}

// statfsOut reports a large, mostly free filesystem: S3 has no capacity.
func statfsOut(out *fuse.StatfsOut) {
	const bsize = 4096
	const blocks = 1 << 40 // 4 PiB
	out.Bsize = bsize
	out.Frsize = bsize
	out.Blocks = blocks
	out.Bfree = blocks
	out.Bavail = blocks
	out.Files = 1 << 32
	out.Ffree = 1 << 32
	out.NameLen = 255
}

// stageFile creates a staging file in the mount's private directory.
func (fsys *filesystem) stageFile() (*os.File, error) {
	f, err := os.CreateTemp(fsys.stageDir, "stage-")
	if err != nil {
		return nil, fmt.Errorf("create staging file: %w", err)
	}
	// The name is not needed: the open descriptor is the staging area.
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("unlink staging file: %w", err)
	}
	return f, nil
}

// stagingFS is the space available (to unprivileged users) and the size
// of the file system of the staging directory, 0 and 0 if statfs fails.
func (fsys *filesystem) stagingFS() (avail, size float64) {
	var st unix.Statfs_t
	if err := unix.Statfs(fsys.stageDir, &st); err != nil {
		return 0, 0
	}
	return float64(st.Bavail) * float64(st.Bsize), float64(st.Blocks) * float64(st.Bsize)
}

// oldestDirtyAge is how long before now the longest-dirty file became
// dirty, 0 when no file is dirty. Dirty nodes are always tracked
// (markDirtyLocked), so the staged set holds every one of them.
func (fsys *filesystem) oldestDirtyAge(now time.Time) time.Duration {
	fsys.nodesMu.Lock()
	defer fsys.nodesMu.Unlock()
	var oldest int64
	for f := range fsys.staged {
		if since := f.dirtySince(); since != 0 && (oldest == 0 || since < oldest) {
			oldest = since
		}
	}
	if oldest == 0 {
		return 0
	}
	return max(now.Sub(time.Unix(0, oldest)), 0)
}
