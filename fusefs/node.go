package fusefs

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is what every node kind (dirNode, fileNode, symlinkNode,
// specialNode) answers to the code that handles a child without asking its
// kind: lookups, listings, removals, renames and the cache drop of a
// takeover. What one kind alone does (a directory's listing, a file's
// content and commit) stays a method of that type.
//
// Contract: methods read and change the node's cached state only; none but
// refresh and removeObject calls the store. A kind may leave adoptLocked,
// movedLocked and forgetCached to nodeBase, whose versions suit a node
// with no local state.
//
// Locking: a method whose name ends in Locked requires the node's
// nodeBase.mu (LOCKS_REQUIRED(n.base().mu)); the others take what they
// need themselves (LOCKS_EXCLUDED(n.base().mu)). removeObject takes
// opMu, so it must not be called with opMu held; no other method takes
// opMu, or a file's openMu or cmu.
type node interface {
	fs.InodeEmbedder
	// Every kind serves statfs and the extended attributes through
	// nodeBase (attrs.go).
	fs.NodeStatfser
	fs.NodeGetxattrer
	fs.NodeListxattrer
	fs.NodeSetxattrer
	fs.NodeRemovexattrer
	// base is the state all kinds share: the key, the cached version
	// (info, fetched) and the attributes.
	base() *nodeBase
	// fillAttr reports the attributes (size and nlink as the kind counts
	// them).
	fillAttr(out *fuse.Attr)
	// refresh re-reads the object once the cached version expired,
	// unless the node is gone or pinned (Getattr).
	refresh(ctx context.Context) error
	// goneLocked: the node gave up its name here (unlinked; a file also
	// when superseded, file_capture.go), so a lookup does not reuse it.
	goneLocked() bool
	// pinnedLocked: state the store does not have (open handles,
	// uncommitted changes, an unlink) pins the cached version: nothing
	// read from the store replaces it.
	pinnedLocked() bool
	// adoptLocked makes the version info, read from the store by a
	// lookup or a listing, the node's own.
	adoptLocked(info objstore.ObjectInfo)
	// localOnlyLocked: the name is shown though the store may not list
	// it (a file created here and not committed, a directory emptied
	// here: dirNode.emptied).
	localOnlyLocked() bool
	// movedLocked takes the version a directory rename copied the node's
	// object to (rename.go updateTree).
	movedLocked(info objstore.ObjectInfo)
	// forgetCached marks the cached version stale (a file's unless
	// local state pins it), so that the next use reads the store
	// (activate.go).
	forgetCached()
	// removeObject deletes the node's object at key with del,
	// conditioned on the version it holds, and marks the node unlinked
	// (Unlink; a directory is EISDIR: Rmdir removes it).
	removeObject(ctx context.Context, key string, del deleteFunc) error
	// updateMeta stores a metadata change (an xattr's: attrs.go): at
	// once (nodeBase.updateMeta) or, for a file with uncommitted content
	// changes, with them.
	updateMeta(ctx context.Context, mutate func(*posixAttr) error) error
	// selfCopiedLocked: a metadata change was stored by copying the
	// object onto itself, so the new version has the old one's content
	// (a file's pages in the kernel stay valid).
	selfCopiedLocked()
}

// deleteFunc deletes key at version base for an unlink: at once, or
// acknowledged now and sent in the background (dirNode.deleteEntry).
type deleteFunc func(ctx context.Context, key string, base fencing.Version) error

// nodeOf returns the node of ino, or nil (no inode, or one of no node
// kind).
func nodeOf(ino *fs.Inode) node {
	if ino == nil {
		return nil
	}
	n, _ := ino.Operations().(node)
	return n
}

// baseOf returns the nodeBase of ino's node, or nil.
func baseOf(ino *fs.Inode) *nodeBase {
	if n := nodeOf(ino); n != nil {
		return n.base()
	}
	return nil
}

// nodeBase is the state every node kind shares: the object version it came
// from and its POSIX attributes.
type nodeBase struct {
	// Constant after construction.
	fsys *filesystem
	ino  *fs.Inode // the fs.Inode embedded in the outer node
	kind uint32

	// opMu serialises the mutations of this node (commit, metadata update,
	// unlink, rename): each is conditioned on the version the previous one
	// produced. Held across Guard calls; it is per node, never
	// filesystem-wide.
	opMu sync.Mutex

	mu sync.Mutex
	// info is the object version this node came from: the precondition
	// (base) of its next mutation. For a directory it is the marker
	// (ETag "" for an implicit directory); for a file being created it is
	// zero until the first commit.
	info    objstore.ObjectInfo // GUARDED_BY(mu)
	attr    posixAttr           // GUARDED_BY(mu)
	fetched time.Time           // GUARDED_BY(mu): when info was last read from the store
	// attrPending: attr holds a chmod/chown/utimens not stored yet
	// (attrwb.go); info is still the stored version. GUARDED_BY(mu)
	attrPending bool
	// attrBind is the binding the pending change was made under
	// (held.go). GUARDED_BY(mu)
	attrBind fencing.Binding
	// attrKey is the key the pending change was made at, and orphaned
	// that the kernel forgot the node with it pending (attr_orphans.go).
	attrKey  string // GUARDED_BY(mu)
	orphaned bool   // GUARDED_BY(mu)
}

func (b *nodeBase) init(fsys *filesystem, ino *fs.Inode, kind uint32, info objstore.ObjectInfo) {
	b.fsys = fsys
	b.ino = ino
	b.kind = kind
	b.setInfo(info)
}

func (b *nodeBase) base() *nodeBase { return b }

// adoptLocked is setInfoLocked. LOCKS_REQUIRED(b.mu)
func (b *nodeBase) adoptLocked(info objstore.ObjectInfo) { b.setInfoLocked(info) }

// movedLocked takes info, keeping the metadata this node knows (the copy
// carried it). LOCKS_REQUIRED(b.mu)
func (b *nodeBase) movedLocked(info objstore.ObjectInfo) {
	info.Meta = b.info.Meta
	b.info = info
}

// forgetCached marks the cached version stale. LOCKS_EXCLUDED(b.mu)
func (b *nodeBase) forgetCached() {
	b.mu.Lock()
	b.fetched = time.Time{}
	b.mu.Unlock()
}

// leafNode is the state a symlink and a special file add to nodeBase:
// nodes whose only local state is their unlink.
type leafNode struct {
	nodeBase
	unlinked bool // GUARDED_BY(mu)
}

func (l *leafNode) goneLocked() bool      { return l.unlinked } // LOCKS_REQUIRED(l.mu)
func (l *leafNode) pinnedLocked() bool    { return l.unlinked } // LOCKS_REQUIRED(l.mu)
func (l *leafNode) localOnlyLocked() bool { return false }      // LOCKS_REQUIRED(l.mu)

// markUnlinked records that the name is gone: fstat shows nlink 0.
func (l *leafNode) markUnlinked() {
	l.mu.Lock()
	l.unlinked = true
	l.mu.Unlock()
}

// refresh re-reads the object once its metadata cache expired, unless it
// was unlinked here: a tombstone or a missing object is ENOENT.
func (l *leafNode) refresh(ctx context.Context) error {
	l.mu.Lock()
	skip := l.unlinked || !l.staleLocked()
	l.mu.Unlock()
	key, ok := l.key()
	if skip || !ok {
		return nil
	}
	info, err := l.fsys.store.Stat(ctx, key)
	if err == nil && fencing.IsTombstone(info) {
		err = fmt.Errorf("%w: %s is a tombstone", objstore.ErrNotFound, key)
	}
	if err != nil {
		return err
	}
	l.setInfo(info)
	return nil
}

// removeObject deletes the object conditioned on the version the node holds.
// LOCKS_EXCLUDED(l.opMu)
func (l *leafNode) removeObject(ctx context.Context, key string, del deleteFunc) error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	l.mu.Lock()
	base := fencing.VersionOf(l.info)
	l.mu.Unlock()
	if err := del(ctx, key, base); err != nil {
		return err
	}
	l.markUnlinked()
	return nil
}

// nodeGetattr answers every kind's GETATTR: the attributes, refreshed once
// their cache expired, with the leader's attribute timeout.
func nodeGetattr(ctx context.Context, n node, out *fuse.AttrOut) syscall.Errno {
	b := n.base()
	ctx, cancel := b.fsys.opctx(ctx)
	defer cancel()
	if err := n.refresh(ctx); err != nil {
		k, _ := b.key()
		return b.fsys.errno("getattr", k, err)
	}
	n.fillAttr(&out.Attr)
	b.fsys.leaderAttrTimeout(out)
	return 0
}

// fillEntry reports the attributes of ino's node in a LOOKUP reply, with
// the leader's entry and attribute timeouts.
func fillEntry(ino *fs.Inode, out *fuse.EntryOut) {
	if n := nodeOf(ino); n != nil {
		n.fillAttr(&out.Attr)
		n.base().fsys.leaderEntryTimeout(out)
	}
}

// setInfo records a version read from the store. LOCKS_EXCLUDED(b.mu)
func (b *nodeBase) setInfo(info objstore.ObjectInfo) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.setInfoLocked(info)
}

// LOCKS_REQUIRED(b.mu)
func (b *nodeBase) setInfoLocked(info objstore.ObjectInfo) {
	if b.attrPending {
		if info.ETag == b.info.ETag {
			// The same version read again: the pending change stands.
			b.info, b.fetched = info, time.Now()
			return
		}
		// Another client changed the object: its version wins, and
		// storing the change (conditioned on the old one) would fail.
		b.attrPending = false
		b.fsys.log.Warn("an acknowledged chmod/chown/utimens is dropped: the object changed in the bucket first", "key", info.Key)
	}
	b.info = info
	b.attr = b.storedAttrLocked()
	b.fetched = time.Now()
}

// stale reports whether the cached version is older than MetaCacheTTL
// (LeaderCacheTTL for one fetched while leading: see filesystem.fresh).
// LOCKS_REQUIRED(b.mu)
func (b *nodeBase) staleLocked() bool {
	return !b.fsys.fresh(b.fetched)
}

// key returns the object key of the node (directories: the marker key, with
// the trailing slash), or false when the node is no longer in the tree.
func (b *nodeBase) key() (string, bool) {
	p, ok := b.fsys.pathOf(b.ino)
	if !ok {
		return "", false
	}
	if b.kind == kindDir {
		if p == "" {
			return b.fsys.prefix, true
		}
		return b.fsys.prefix + p + "/", true
	}
	return b.fsys.prefix + p, true
}

// keyOrErr is key for mutations: a node that left the tree is ENOENT.
func (b *nodeBase) keyOrErr() (string, error) {
	k, ok := b.key()
	if !ok {
		return "", fmt.Errorf("%w: node was unlinked", objstore.ErrNotFound)
	}
	return k, nil
}

func (b *nodeBase) snapshot() (objstore.ObjectInfo, posixAttr) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.info, b.attr.clone()
}

// metaKey is the key a metadata change of the node is stored under, or why
// none can be: the mount cannot write, the node left the tree, or it is
// the bucket root.
func (b *nodeBase) metaKey() (string, error) {
	if err := b.fsys.checkWritable("setattr"); err != nil {
		return "", err
	}
	key, err := b.keyOrErr()
	if err != nil {
		b.mu.Lock()
		k, ok := b.orphanKeyLocked()
		b.mu.Unlock()
		if !ok {
			return "", err
		}
		key = k
	}
	if key == "" {
		return "", fmt.Errorf("%w: the bucket root has no object to hold metadata", errNotSupported)
	}
	return key, nil
}

// mutated applies mutate to a (the attributes of version info), moves the
// ctime, and returns them with the metadata that stores them (E2BIG
// when too large).
func mutated(info objstore.ObjectInfo, a posixAttr, mutate func(*posixAttr) error) (posixAttr, map[string]string, error) {
	if err := mutate(&a); err != nil {
		return a, nil, err
	}
	a.Ctime = time.Now()
	meta := encodeAttr(a, info.Meta)
	if err := checkMetaSize(meta); err != nil {
		return a, nil, err
	}
	return a, meta, nil
}

// storedAttrLocked is the attributes the stored version says.
// LOCKS_REQUIRED(b.mu)
func (b *nodeBase) storedAttrLocked() posixAttr {
	lm := b.info.LastModified
	if lm.IsZero() {
		lm = b.fsys.mountTime
	}
	return decodeAttr(b.kind, b.info.Meta, lm, b.fsys.def)
}

// updateMetaRemote applies mutate to the node's attributes and stores them:
// a self-copy of the object conditioned on its ETag (the content is
// unchanged), or, for a directory without a marker, the creation of the
// marker. LOCKS_REQUIRED(b.opMu)
func (b *nodeBase) updateMetaRemote(ctx context.Context, mutate func(*posixAttr) error) error {
	key, err := b.metaKey()
	if err != nil {
		return err
	}
	info, a := b.snapshot()
	a, meta, err := mutated(info, a, mutate)
	if err != nil {
		return err
	}
	var out objstore.ObjectInfo
	if info.ETag == "" {
		if b.kind != kindDir {
			return fmt.Errorf("%w: %s has no stored version", objstore.ErrNotFound, key)
		}
		out, err = b.fsys.createEmpty(ctx, key, meta)
	} else {
		src := info
		src.Key = key
		out, err = b.fsys.guard.CopyFrom(ctx, src, key, fencing.VersionOf(info), meta)
	}
	if err != nil {
		return err
	}
	out = mergeInfo(out, key, info.Size, meta)
	b.mu.Lock()
	b.info = out
	b.attr = a // a pending attribute change included
	b.attrPending = false
	b.fetched = time.Now()
	b.mu.Unlock()
	return nil
}

// setattrMutation turns the metadata part of a SETATTR into a mutation,
// checked against the ownership rules for the caller in ctx
// (posixrules.go). The second result is false when nothing but the size was
// asked for.
func setattrMutation(ctx context.Context, in *fuse.SetAttrIn) (func(*posixAttr) error, bool) {
	ch := changeOf(in)
	if !ch.set.has(chMode | chUID | chGID | chMtime | chAtime) {
		return nil, false
	}
	c := callerOf(ctx)
	mtime, _ := in.GetMTime()
	atime, _ := in.GetATime()
	return func(a *posixAttr) error {
		mode, err := checkSetattr(c, ch, *a)
		if err != nil {
			return err
		}
		killPrivOnChown(ch, a)
		if ch.set.has(chMode) {
			a.Mode = mode
		}
		if ch.set.has(chUID) {
			a.UID = ch.uid
		}
		if ch.set.has(chGID) {
			a.GID = ch.gid
		}
		if ch.set.has(chMtime) {
			a.Mtime = mtime
		}
		if ch.set.has(chAtime) {
			a.Atime = atime
		}
		a.Ctime = time.Now()
		return nil
	}, true
}

// Extended attributes.
//
// User attributes ("user.*") are stored in the object's metadata in s3fs's
// format. Names under "user.fencefs." are reserved: on the mount root they
// are the control attributes (see control.go), on any object
// "user.fencefs.stamp" is the epoch that wrote it (read-only, not listed).
// Other namespaces are not supported (security.* is answered by go-fuse).
const (
	xattrUserPrefix    = "user."
	xattrCapability    = "security.capability"
	xattrControlPrefix = "user.fencefs."
	xattrStamp         = "user.fencefs.stamp"
)

// getxattr answers GETXATTR for a stored attribute or the stamp.
func (b *nodeBase) getxattr(name string, dest []byte) (uint32, error) {
	info, a := b.snapshot()
	var val []byte
	switch {
	case name == xattrStamp:
		e, ok := info.Meta[fencing.MetaEpoch]
		if !ok {
			return 0, fmt.Errorf("%w: %s has no fencing stamp", errNoAttr, info.Key)
		}
		val = []byte(e)
	case strings.HasPrefix(name, xattrControlPrefix):
		return 0, errNoAttr
	case name == xattrCapability:
		// Asked before every write (file_remove_privs): no capabilities.
		return 0, errNoAttr
	case !strings.HasPrefix(name, xattrUserPrefix):
		// What the kernel answers for a namespace a filesystem has no
		// handler for (security labels, POSIX ACLs, trusted.*). ls -l
		// asks every file for security.selinux and its ACL unless one
		// answer says the device does not support them: ENODATA cost
		// two FUSE round trips per file of every listing.
		return 0, fmt.Errorf("%w: %s is outside the user namespace", errNotSupported, name)
	default:
		v, ok := a.Xattrs[name]
		if !ok {
			return 0, errNoAttr
		}
		val = v
	}
	return copyXattr(dest, val)
}

// copyXattr implements the GETXATTR/LISTXATTR buffer protocol: ERANGE with
// the needed size when dest is too small.
func copyXattr(dest, val []byte) (uint32, error) {
	if len(dest) < len(val) {
		return uint32(len(val)), syscall.ERANGE
	}
	return uint32(copy(dest, val)), nil
}

// listxattr lists the stored user attributes (NUL-terminated names).
func (b *nodeBase) listxattr(extra []string) []byte {
	_, a := b.snapshot()
	names := make([]string, 0, len(a.Xattrs)+len(extra))
	names = append(names, extra...)
	for k := range a.Xattrs {
		names = append(names, k)
	}
	sort.Strings(names[len(extra):])
	var out []byte
	for _, n := range names {
		out = append(out, n...)
		out = append(out, 0)
	}
	return out
}

// xattrSetMutation validates a SETXATTR of a stored attribute.
func xattrSetMutation(name string, value []byte, flags uint32) (func(*posixAttr) error, error) {
	if err := checkXattrName(name); err != nil {
		return nil, err
	}
	val := append([]byte(nil), value...)
	return func(a *posixAttr) error {
		_, exists := a.Xattrs[name]
		if flags&xattrCreate != 0 && exists {
			return fmt.Errorf("%w: xattr %s", errExist, name)
		}
		if flags&xattrReplace != 0 && !exists {
			return fmt.Errorf("%w: xattr %s", errNoAttr, name)
		}
		if a.Xattrs == nil {
			a.Xattrs = map[string][]byte{}
		}
		a.Xattrs[name] = val
		return nil
	}, nil
}

func xattrRemoveMutation(name string) (func(*posixAttr) error, error) {
	if err := checkXattrName(name); err != nil {
		return nil, err
	}
	return func(a *posixAttr) error {
		if _, ok := a.Xattrs[name]; !ok {
			return fmt.Errorf("%w: xattr %s", errNoAttr, name)
		}
		delete(a.Xattrs, name)
		if len(a.Xattrs) == 0 {
			a.Xattrs = nil
		}
		return nil
	}, nil
}

// setxattr flags (linux/xattr.h).
const (
	xattrCreate  = 1
	xattrReplace = 2
)

func checkXattrName(name string) error {
	switch {
	case strings.HasPrefix(name, xattrControlPrefix):
		return fmt.Errorf("%w: %s is reserved (control attributes live on the mount root)", errPerm, name)
	case !strings.HasPrefix(name, xattrUserPrefix) || len(name) == len(xattrUserPrefix):
		return fmt.Errorf("%w: xattr %q: only the user namespace is stored", errNotSupported, name)
	}
	return nil
}

// formatUint is strconv.FormatUint for the control attributes.
func formatUint(v uint64) []byte { return []byte(strconv.FormatUint(v, 10)) }

// updateMeta stores a metadata change at once (a self-copy, or the marker
// of an implicit directory): the node kinds that keep no uncommitted
// changes.
func (b *nodeBase) updateMeta(ctx context.Context, mutate func(*posixAttr) error) error {
	b.opMu.Lock()
	defer b.opMu.Unlock()
	return b.updateMetaRemote(ctx, mutate)
}

// selfCopiedLocked does nothing: only a file has pages in the kernel.
// LOCKS_REQUIRED(b.mu)
func (b *nodeBase) selfCopiedLocked() {}
