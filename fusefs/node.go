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

	// metaUpdate stores a metadata change (xattrs; attrs.go): set by the
	// node's constructor, constant after.
	metaUpdate func(ctx context.Context, mutate func(*posixAttr) error) error

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
}

func (b *nodeBase) init(fsys *filesystem, ino *fs.Inode, kind uint32, info objstore.ObjectInfo) {
	b.fsys = fsys
	b.ino = ino
	b.kind = kind
	b.metaUpdate = b.updateMetaNow
	b.setInfo(info)
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
		return "", err
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
		out, err = b.fsys.guard.Copy(ctx, key, info.ETag, key, fencing.VersionOf(info), meta)
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
	if !ch.hasMode && !ch.hasUID && !ch.hasGID && !ch.hasMtime && !ch.hasAtime {
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
		if ch.hasMode {
			a.Mode = mode
		}
		if ch.hasUID {
			a.UID = ch.uid
		}
		if ch.hasGID {
			a.GID = ch.gid
		}
		if ch.hasMtime {
			a.Mtime = mtime
		}
		if ch.hasAtime {
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
