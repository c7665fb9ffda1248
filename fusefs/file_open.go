package fusefs

// open(2) of a regular file: the handle, the version it reads (captured at
// open on a mount that does not lead: file_capture.go) and the kernel's
// page cache.

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

var _ = (fs.NodeOpener)((*fileNode)(nil))

// Open opens the file. Opening for writing fails with EROFS when the mount
// cannot write (no token, fenced, read-only); O_TRUNC empties the staged
// content at once (committed on close).
func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ctx, cancel := n.fsys.opctx(ctx)
	defer cancel()
	key, _ := n.key()
	writing := flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0
	if writing {
		if err := n.fsys.checkWritable("open"); err != nil {
			return nil, 0, n.fsys.errno("open", key, err)
		}
	}
	n.openMu.Lock()
	if !writing && n.fsys.capturesReads() {
		h, fuseFlags, handled, err := n.openCaptured(ctx, key)
		if handled {
			n.openMu.Unlock()
			if err != nil {
				return nil, 0, n.fsys.errno("open", key, err)
			}
			return h, fuseFlags, 0
		}
	}
	h, fuseFlags, err := n.openLazily(ctx, key, flags)
	n.openMu.Unlock()
	if err != nil && writing {
		return nil, 0, n.fsys.mutationErrno(ctx, "open", key, err)
	}
	if err != nil {
		return nil, 0, n.fsys.errno("open", key, err)
	}
	if flags&syscall.O_TRUNC != 0 {
		if err := n.c.truncate(ctx, key, 0, true); err != nil {
			n.releaseHandle(h)
			return nil, 0, n.fsys.mutationErrno(ctx, "open", key, err)
		}
		h.changed()
	}
	return h, fuseFlags, 0
}

// openLazily opens a handle on the node's version (refreshed if stale),
// whose first read sends the GET. LOCKS_REQUIRED(n.openMu)
func (n *fileNode) openLazily(ctx context.Context, key string, flags uint32) (*fileHandle, uint32, error) {
	if err := n.refresh(ctx); err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			// Deleted elsewhere while the kernel kept the name: ESTALE
			// below makes it look again (an O_CREAT then creates).
			n.markUnlinked()
		} else {
			return nil, 0, err
		}
	}
	n.mu.Lock()
	if n.superseded {
		n.mu.Unlock()
		n.fsys.refused.note(ctx, key)
		return nil, 0, fmt.Errorf("open %s: %w", key, errSuperseded)
	}
	if n.c.flags().has(stUnlinked) && n.openCount == 0 {
		// The kernel still has a name for a node whose object is gone
		// or was never stored (a refused create): ESTALE makes it look
		// the name up again (LOOKUP_REVAL) and open or create what the
		// store has, instead of writing into a node no commit stores.
		n.mu.Unlock()
		return nil, 0, fmt.Errorf("%w: %s: the name no longer refers to this file", fencing.ErrStale, key)
	}
	n.openCount++
	etag := n.info.ETag
	var fuseFlags uint32
	if n.keepETag != "" && n.keepETag == etag && flags&syscall.O_TRUNC == 0 {
		fuseFlags |= fuse.FOPEN_KEEP_CACHE
	}
	n.keepETag = etag
	n.mu.Unlock()
	h := &fileHandle{node: n, appending: flags&syscall.O_APPEND != 0, keepCache: fuseFlags&fuse.FOPEN_KEEP_CACHE != 0,
		writable: flags&syscall.O_ACCMODE != syscall.O_RDONLY, key: key}
	return h, fuseFlags, nil
}
