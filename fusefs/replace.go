package fusefs

// Moving to the current version of an object instead of failing with ESTALE,
// where nothing can be inconsistent:
//
//   - a whole-file replacement (O_TRUNC, a truncate to 0, O_CREAT|O_TRUNC)
//     uses nothing of the version it was based on. Its commit, refused
//     because the object changed, is retried once on the current version
//     when that version was committed by an epoch older than this mount's
//     active token: a change made before this mount became the leader, which
//     the mount could not have seen (a frozen old leader's last write, its
//     own takeover sweep's re-stamp). A change by this epoch, or by a writer
//     without fencing, stays a conflict (ESTALE).
//   - a read handle that has returned no byte yet has nothing to be
//     inconsistent with: a read refused because the object changed since the
//     open takes the current version (maxReadRebase times at most), unless
//     the kernel may already hold pages of the old version (FOPEN_KEEP_CACHE,
//     or another handle open on the node).

import (
	"context"
	"errors"
	"strconv"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
)

// maxReadRebase bounds how often one READ moves to a newer version (a writer
// replacing the object in a loop could otherwise keep a reader chasing it).
const maxReadRebase = 3

// replacementBase returns the version a whole-file replacement of key may be
// committed on instead of the one it was based on: the current one (absent,
// a tombstone or an object) if it was written by an epoch older than the
// mount's active token. ok is false when the refusal must stand.
func (fsys *filesystem) replacementBase(ctx context.Context, key string) (fencing.Version, bool) {
	if fsys.guard == nil {
		return fencing.Version{}, false
	}
	st := fsys.guard.Status()
	if st.State != fencing.StateActive || st.Token == 0 {
		return fencing.Version{}, false // no leader (mode off): a conflict is a conflict
	}
	cur, err := fsys.store.Stat(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		fsys.log.Info("replacing a file removed by an older epoch", "key", key, "token", st.Token)
		return fencing.Version{}, true
	}
	if err != nil {
		return fencing.Version{}, false
	}
	epoch, perr := strconv.ParseUint(cur.Meta[fencing.MetaEpoch], 10, 64)
	if perr != nil || epoch >= st.Token {
		return fencing.Version{}, false
	}
	fsys.log.Info("replacing a file last written by an older epoch", "key", key,
		"written_by_epoch", epoch, "token", st.Token)
	return fencing.VersionOf(cur), true
}

// rebase moves a read handle that has delivered nothing from rd, whose
// version is gone, to the object's current version, and returns the reader
// to retry with. ok is false when the handle must report ESTALE.
func (h *fileHandle) rebase(ctx context.Context, rd *reader, key string) (*reader, bool) {
	n := h.node
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.delivered > 0 || h.keepCache {
		return nil, false
	}
	if h.rd != rd && h.rd != nil {
		return h.rd, true // a concurrent READ of this handle moved it already
	}
	n.mu.Lock()
	alone := n.openCount == 1 && !n.dirty && !n.pending && !n.unlinked
	n.mu.Unlock()
	if !alone {
		return nil, false
	}
	cur, err := n.fsys.store.Stat(ctx, key)
	if err != nil || fencing.IsTombstone(cur) {
		return nil, false
	}
	n.mu.Lock()
	if n.openCount != 1 || n.dirty {
		n.mu.Unlock()
		return nil, false
	}
	n.setInfoLocked(cur)
	n.size = cur.Size
	n.keepETag = cur.ETag
	n.mu.Unlock()
	if h.rd != nil {
		h.rd.close()
	}
	h.rd = newReader(n.fsys, cur.ETag, cur.Size)
	// The kernel's size of the file is the old version's: drop its cached
	// attributes (only those: no page is locked by this) so that a read
	// past it asks for the new size.
	n.NotifyContent(-1, 0)
	n.fsys.metrics.readRebases.Inc()
	n.fsys.log.Debug("read moved to the current version", "key", key, "etag", cur.ETag)
	return h.rd, true
}
