package fusefs

// Attribute write-back: chmod, chown and utimensat of a node with nothing
// else to commit (a closed file, a directory, a symlink, a special file)
// are applied to the node at once and stored a moment later, so that the
// calls programs make in a row — tar's utimensat+chmod(+chown) of every
// directory, rsync's chmod+utimensat of its temporary file before the
// rename, cp -a's of every directory — cost one fenced commit together
// instead of one each, or none when a commit or rename that follows
// carries them.
//
// The durability point (docs/DESIGN.md "Attribute changes"): the change is
// in the bucket when fsync(2) of the file or directory returns success,
// when close(2) of a descriptor of the file opened for writing returns
// success (a reader's close leaves it to the delay), when a rename returns,
// at unmount, and otherwise within Options.AttrWriteback. The call itself
// checks everything that can be checked without the store — permissions
// and ownership rules, the mount's known fence state (EROFS at once when
// it knows it is fenced), the metadata size — so what it acknowledges can
// only fail later if the storage refuses it (a newer leader fenced this
// one: the change is then dropped like any write of a fenced leader); that
// is logged, counted in fencefs_fuse_attr_writeback_failures_total, and the
// node shows the stored attributes again. A storage that does not answer
// fails the fsync or close that asked (EIO) but keeps the change pending,
// tried again after each delay until it is stored (or unmount gives up).
// A crash (kill -9) in the window loses the
// attribute change, never content: the object keeps its stored version.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sync/errgroup"
)

// attrWriteback holds the nodes whose attribute changes are not stored
// yet and stores each when its delay is over.
type attrWriteback struct {
	fsys  *filesystem
	delay time.Duration // Options.AttrWriteback; > 0

	mu  sync.Mutex
	due map[*nodeBase]time.Time // GUARDED_BY(mu): when each change must be stored
	// orphans are the nodes the kernel forgot with a change pending, by
	// the key it was made at (attr_orphans.go).
	orphans map[string]*nodeBase // GUARDED_BY(mu)
	wake    chan struct{}        // a new, earlier deadline (buffered 1)
}

func newAttrWriteback(fsys *filesystem, delay time.Duration) *attrWriteback {
	return &attrWriteback{fsys: fsys, delay: delay, due: map[*nodeBase]time.Time{},
		orphans: map[string]*nodeBase{}, wake: make(chan struct{}, 1)}
}

// schedule makes b's pending change due after the delay (an earlier
// deadline stands: a change is never delayed by the next one).
// A nil w (no write-back delay) schedules nothing: the change stays
// pending until the next fsync or close stores it.
func (w *attrWriteback) schedule(b *nodeBase) {
	if w == nil {
		return
	}
	w.mu.Lock()
	if _, ok := w.due[b]; !ok {
		w.due[b] = time.Now().Add(w.delay)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// pending is the number of nodes with a change not stored yet (none when
// w is nil: every change is stored before its call returns).
func (w *attrWriteback) pending() int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.due)
}

// take removes and returns the nodes due at now (all with all), and the
// next deadline of those left (zero if none).
func (w *attrWriteback) take(now time.Time, all bool) ([]*nodeBase, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*nodeBase
	var next time.Time
	for b, t := range w.due {
		if all || !t.After(now) {
			out = append(out, b)
			delete(w.due, b)
		} else if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return out, next
}

// run stores due changes until ctx ends (the mount goes away).
func (w *attrWriteback) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, next := w.take(time.Now(), false)
		w.store(ctx, due, true)
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-timer.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// storeAll stores every pending change now (unmount), returning the
// errors of those that failed.
func (w *attrWriteback) storeAll(ctx context.Context) error {
	due, _ := w.take(time.Now(), true)
	return w.store(ctx, due, false)
}

// store stores the changes of nodes, s3.concurrency at a time. background
// (the timer's stores) also tells the kernel to drop the attributes of a
// node whose change failed.
func (w *attrWriteback) store(ctx context.Context, nodes []*nodeBase, background bool) error {
	if len(nodes) == 0 {
		return nil
	}
	var g errgroup.Group
	g.SetLimit(max(w.fsys.opts.UploadConcurrency, 1))
	for _, b := range nodes {
		g.Go(func() error {
			mctx, cancel := w.fsys.mutctx(ctx)
			defer cancel()
			err := b.storePendingAttr(mctx)
			if err != nil && background {
				go b.ino.NotifyContent(0, 0) // never from a FUSE handler
			}
			return err
		})
	}
	return g.Wait()
}

// deferAttr applies mutate to the node's attributes now and schedules
// storing them (see the top of this file). It fails, storing nothing, when
// the mount cannot write, the node has no stored version (a file: ENOENT)
// or left the tree, mutate refuses, or the metadata would be too large.
func (b *nodeBase) deferAttr(ctx context.Context, mutate func(*posixAttr) error) error {
	if b.fsys.attrwb == nil {
		return b.updateMeta(ctx, mutate)
	}
	key, err := b.metaKey()
	if err != nil {
		return err
	}
	b.opMu.Lock()
	defer b.opMu.Unlock()
	for {
		// mutate runs without b.mu (a directory's takes it); opMu keeps
		// every other change out, a lookup may still read a new version.
		info, a := b.snapshot()
		if info.ETag == "" && b.kind != kindDir {
			return fmt.Errorf("%w: %s has no stored version", objstore.ErrNotFound, key)
		}
		a, _, err := mutated(info, a, mutate)
		if err != nil {
			return err
		}
		b.mu.Lock()
		if b.info.ETag != info.ETag {
			b.mu.Unlock()
			continue // changed in the bucket meanwhile: apply to that version
		}
		if b.attrPending && b.fsys.superseded(b.attrBind) {
			// Held under a binding another holder's epoch superseded
			// (held.go): dropped, and this call reports it.
			tok := b.attrBind.Token
			b.revertAttrLocked()
			b.mu.Unlock()
			b.fsys.metrics.attrWritebackFailures.Inc()
			return fmt.Errorf("%s: %w: %w: a chmod/chown/utimens made under token %d was dropped (another holder's epoch was active since)",
				key, fencing.ErrFenced, fencing.ErrSuperseded, tok)
		}
		b.attr = a
		b.attrPending = true
		b.attrBind = b.fsys.binding()
		b.attrKey = key
		b.mu.Unlock()
		b.fsys.attrwb.schedule(b)
		return nil
	}
}

// storePendingAttr stores the node's pending attribute change, if any.
func (b *nodeBase) storePendingAttr(ctx context.Context) error {
	b.opMu.Lock()
	defer b.opMu.Unlock()
	return b.storePendingAttrLocked(ctx)
}

// storePendingAttrLocked stores the pending attribute change (a self-copy
// conditioned on the stored version, or a directory's marker). On failure
// the change is dropped and the stored attributes shown again; a node that
// left the tree (unlinked, renamed over) drops it silently.
// LOCKS_REQUIRED(b.opMu)
func (b *nodeBase) storePendingAttrLocked(ctx context.Context) error {
	b.mu.Lock()
	pending, bind := b.attrPending, b.attrBind
	b.mu.Unlock()
	if !pending {
		return nil
	}
	err := b.updateMetaRemote(heldCtx(ctx, bind), func(*posixAttr) error { return nil })
	if !errors.Is(err, objstore.ErrUnavailable) || errors.Is(err, fencing.ErrFenced) {
		defer b.fsys.attrwb.unorphan(b) // stored or dropped; runs after b.mu.Unlock
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	key, ok := b.key()
	if !ok {
		key = b.attrKey // an orphan (attr_orphans.go)
	}
	switch {
	case err == nil:
		nodeOf(b.ino).selfCopiedLocked()
		return nil
	case errors.Is(err, objstore.ErrUnavailable) && !errors.Is(err, fencing.ErrFenced):
		// The storage does not answer: the change stays pending and is
		// tried again after the delay (if this attempt landed unseen,
		// the next one is refused and the node reads the bucket again).
		// The caller (fsync, close) still gets the error.
		b.fsys.attrwb.schedule(b)
		b.fsys.log.Warn("an acknowledged chmod/chown/utimens is not stored yet: the storage does not answer; it is tried again", "key", key, "err", err)
		return err
	}
	b.revertAttrLocked()
	b.fsys.metrics.attrWritebackFailures.Inc()
	if errors.Is(err, objstore.ErrNotFound) {
		// Not removed or renamed by this mount (those drop or carry
		// the change, even for a node the kernel forgot:
		// attr_orphans.go): the object went away behind its back.
		b.fsys.log.Warn("an acknowledged chmod/chown/utimens is dropped: its node is gone", "key", key, "err", err)
		return nil
	}
	b.fsys.log.Warn("an acknowledged chmod/chown/utimens could not be stored and is dropped", "key", key, "err", err)
	return err
}

// dropPendingAttr forgets a pending attribute change of a node this mount
// removed or replaced.
func (b *nodeBase) dropPendingAttr() {
	b.mu.Lock()
	b.attrPending = false
	b.mu.Unlock()
}

// revertAttrLocked shows the stored attributes again and makes the next
// lookup fetch the object. LOCKS_REQUIRED(b.mu)
func (b *nodeBase) revertAttrLocked() {
	b.attrPending = false
	b.attr = b.storedAttrLocked()
	b.fetched = time.Time{}
}

// setattrDeferred applies the chmod, chown and utimens of a node without content
// of its own to stage (a symlink, a special file: what names the kind in
// errors) as a pending attribute change (above); a size change is
// EINVAL. fill then reports the attributes in out.
func (b *nodeBase) setattrDeferred(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut, what string, fill func(*fuse.Attr)) syscall.Errno {
	ctx, cancel := b.fsys.mutctx(ctx)
	defer cancel()
	var err error
	if _, ok := in.GetSize(); ok {
		err = fmt.Errorf("%w: truncate of %s", errInvalid, what)
	} else if mutate, ok := setattrMutation(ctx, in); ok {
		err = b.deferAttr(ctx, mutate)
	}
	if err != nil {
		key, _ := b.key()
		return b.fsys.mutationErrno(ctx, "setattr", key, err)
	}
	fill(&out.Attr)
	return 0
}
