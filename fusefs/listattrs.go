package fusefs

// Attributes from a listing.
//
// `ls -l`, `find`, `du`, `stat` after a listing and rsync's scan list a
// directory and then ask for every entry's attributes. Where the store's
// listings carry each object's metadata (objstore Store.ListMeta: MinIO's
// ListObjectsV2 with metadata=true; the probe's list-metadata row), a
// listed object is exactly what a HEAD of it returns — the same ETag, size,
// date and user metadata, of one version — so a directory's listing
// stands for a HEAD of every object it lists:
//
//   - it decides whether an object is a tombstone (no HEAD for the
//     entries of tombstone size);
//   - it gives readdir each entry's exact type (d_type: find -type needs
//     no stat, a FIFO is never listed as a file);
//   - the listed version becomes the node that holds the name, as a
//     lookup's HEAD would make it (unless local state pins the node: open
//     handles, uncommitted changes; or the node's version was fetched or
//     committed after the listing started, so is newer: adoptListed), or,
//     when there is no such node, the answer to the name's next lookup: a
//     prefetch that is already done (prefetch.go).
//
// Either way it is trusted for as long as a HEAD's answer would be
// (MetaCacheTTL, LeaderCacheTTL for one fetched while leading:
// filesystem.fresh), counted from the listing. An object the store listed
// without its metadata (every object on the Versity gateway and AWS S3; one
// the caller may list but not read) takes the HEAD path of prefetch.go, as
// before. Directories are not covered: a common prefix carries no marker,
// so a subdirectory's lookup still costs its marker's HEAD and a LIST.

import (
	"syscall"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
)

// listedVersion returns what a lookup of the listed object e would find,
// and false when the listing did not carry its metadata. A tombstone is
// found absent (kind 0).
func listedVersion(e objstore.Entry) (resolved, bool) {
	info, ok := e.Info()
	if !ok {
		return resolved{}, false
	}
	if fencing.IsTombstone(info) {
		return resolved{}, true
	}
	return resolved{kind: kindOf(e.Key, info.Meta), info: info}, true
}

// listedItem is what a listing that found the live object e at name does
// with it: mode is the entry's d_type; pre is the prefetch to start for
// the name, if any (ok false: none, the listing already refreshed the
// name's node or confirmed its version, or the name is a directory that a
// lookup resolves by itself).
// The listing started at listed.
func (d *dirNode) listedItem(name string, e objstore.Entry, listed time.Time) (mode uint32, pre prefetchItem, ok bool) {
	r, known := listedVersion(e)
	if !known {
		return guessMode(e.Size), prefetchItem{name: name, key: e.Key}, !d.confirmListed(name, e)
	}
	if r.kind == kindDir {
		return kindDir, prefetchItem{}, false
	}
	if d.adoptListed(name, r, listed) {
		return r.kind, prefetchItem{}, false
	}
	return r.kind, prefetchItem{name: name, key: e.Key, listed: &r}, true
}

// adoptListed gives the existing child at name the version r of a listing
// started at listed, and reports whether the child took it or keeps a
// version of its own: one fetched or committed by this mount since the
// listing started (newer than what the listing saw), or one local state
// pins (open handles, uncommitted changes). false: there is no child of
// r's kind at name.
func (d *dirNode) adoptListed(name string, r resolved, listed time.Time) bool {
	n := nodeOf(d.GetChild(name))
	if n == nil {
		return false
	}
	b := n.base()
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.kind != b.kind {
		return false
	}
	if !n.pinnedLocked() && !b.fetched.After(listed) {
		n.adoptLocked(r.info)
	}
	return true
}

// guessMode is the d_type of a listed object before its metadata is known:
// a symlink's body is its target (1..4095 bytes) and a FIFO, socket or
// device node is an empty object, so only a larger object is surely a
// regular file; any other is unknown (0, DT_UNKNOWN) and readers stat it
// (find -type f reported FIFOs as files when empty objects were DT_REG).
func guessMode(size int64) uint32 {
	if size > maxSymlinkTarget {
		return syscall.S_IFREG
	}
	return 0
}

// listedUnchanged reports whether a listed object is the version info
// describes: same ETag and size, and the same date to the second (HEAD
// dates have no sub-second part).
func listedUnchanged(e objstore.Entry, info objstore.ObjectInfo) bool {
	return info.ETag != "" && objstore.NormalizeETag(e.ETag) == objstore.NormalizeETag(info.ETag) &&
		e.Size == info.Size && e.LastModified.Unix() == info.LastModified.Unix()
}

// confirmListed marks the child at name fresh when the listing shows the
// version it holds, and reports whether it did.
func (d *dirNode) confirmListed(name string, e objstore.Entry) bool {
	ch := d.GetChild(name)
	if ch == nil {
		return false
	}
	b := baseOf(ch)
	if b == nil || (b.kind != kindFile && b.kind != kindSymlink) {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !listedUnchanged(e, b.info) {
		return false
	}
	b.fetched = time.Now()
	return true
}
