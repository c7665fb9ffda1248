package fusefs

// Delete write-back: unlink(2) of a file, symlink or special file returns
// once the name is gone from this mount, and the object's delete
// (fencing.Guard.Delete: in strict mode an intent and the conditional
// DELETE, or a tombstone) is sent at once in the background, up to
// Options.DeleteConcurrency at a time. The deletes of an `rm -rf` or a
// nightly cleanup then go out side by side and share their journal writes
// (the Guard's group commit) instead of costing a journal write and a
// delete one after the other per file.
//
// The durability point is the one a local file system gives an unlink
// (docs/DESIGN.md "Deletes"): the delete is in the bucket when fsync(2) of
// the directory returns success, when rmdir(2) of the directory returns
// (it waits for the deletes of its entries), and at unmount; otherwise
// within the few round trips it takes. Meanwhile this mount shows the name
// as gone (lookups, listings, an emptied directory's rmdir); other mounts
// and S3 clients see the object until the delete lands.
//
// A create, mknod, symlink or rename onto a name whose delete is pending
// waits for the delete first (fsys.create, renames), so that no commit of
// the name can be ordered before it. A delete that fails — a newer leader
// fenced this mount (EROFS), the object changed behind it (ESTALE), the
// storage does not answer (EIO) — is logged, counted in
// fencefs_fuse_delete_failures_total, reported by the next fsync(2) and by
// the rmdir(2) of the directory made by the process that unlinked it (each
// such process once, deletereport.go), even when the kernel forgot the
// directory in between, and the name shows the stored object again. No delete refused after a takeover is ever reported as done by an
// fsync. A crash (kill -9) before a delete landed leaves the object in the
// bucket: the name is back at the next mount, as an unlink that was never
// written back is after a power cut.

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/fencefs/fencefs/fencing"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// maxPendingDeletes bounds the deletes queued or in flight: an unlink past
// it waits for room (memory stays bounded whatever rm -rf removes).
const maxPendingDeletes = 16384

// deleteWriteback sends the deletes this mount acknowledged. The mount
// has none (nil) when it deletes before unlink returns
// (Options.DeleteConcurrency 0); the methods of a nil *deleteWriteback
// find nothing pending. Safe for concurrent use.
type deleteWriteback struct {
	// del sends one delete (filesystem.deleteObject, in a mutation of
	// its own); failed logs and counts a delete that failed.
	del     func(key string, base fencing.Version, bind fencing.Binding) error
	failed  func(key string, err error)
	senders int           // Options.DeleteConcurrency: deletes in flight at most
	room    chan struct{} // deletes queued or in flight, maxPendingDeletes at most

	mu      sync.Mutex
	pending map[string]*pendingDelete // GUARDED_BY(mu): by key
	queue   []*pendingDelete          // GUARDED_BY(mu): not sent yet, oldest first
	running int                       // GUARDED_BY(mu): sending goroutines, senders at most
	// failures are the failed deletes still to report, by the key of
	// the directory the name left (deletereport.go).
	failures map[string][]deleteFailure // GUARDED_BY(mu)
}

// entryDir is the node of the directory an acknowledged delete's name
// left (a dirNode), told when the delete failed, so that the name shows
// again.
type entryDir interface {
	deleteFailed(key string)
}

// pendingDelete is one acknowledged delete. err is set before done closes.
type pendingDelete struct {
	key  string
	base fencing.Version
	bind fencing.Binding // what unlink acknowledged it under (held.go)
	pid  uint32          // the unlink's thread (0: unknown): its process is told a failure
	dir  entryDir
	prev *pendingDelete // an earlier delete of the same name, still pending: sent after it
	done chan struct{}
	err  error
}

func newDeleteWriteback(concurrency int, del func(string, fencing.Version, fencing.Binding) error, failed func(string, error)) *deleteWriteback {
	return &deleteWriteback{
		del:      del,
		failed:   failed,
		senders:  max(concurrency, 1),
		room:     make(chan struct{}, maxPendingDeletes),
		pending:  map[string]*pendingDelete{},
		failures: map[string][]deleteFailure{},
	}
}

// add acknowledges the delete of key at version base, the name of an entry
// of dir, and sends it in the background (its error comes later, see
// above). It waits only for room in the queue, or for ctx.
func (w *deleteWriteback) add(ctx context.Context, dir entryDir, key string, base fencing.Version) error {
	select {
	case w.room <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	p := &pendingDelete{key: key, base: base, bind: fencing.BindingOf(ctx), dir: dir, done: make(chan struct{})}
	if caller, ok := fuse.FromContext(ctx); ok {
		p.pid = caller.Pid
	}
	w.mu.Lock()
	p.prev = w.pending[key]
	w.pending[key] = p
	w.queue = append(w.queue, p)
	if w.running < w.senders {
		w.running++
		go w.sendQueued()
	}
	w.mu.Unlock()
	return nil
}

// sendQueued sends queued deletes until the queue is empty: at most
// senders of it run, so the goroutines and requests in flight stay
// bounded however many deletes wait.
func (w *deleteWriteback) sendQueued() {
	for {
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.running--
			w.mu.Unlock()
			return
		}
		p := w.queue[0]
		w.queue[0] = nil
		w.queue = w.queue[1:]
		w.mu.Unlock()
		w.send(p)
	}
}

// send sends p's delete (after the earlier one of its name, if any) and
// records its outcome.
func (w *deleteWriteback) send(p *pendingDelete) {
	defer func() { <-w.room }()
	if p.prev != nil {
		<-p.prev.done
		p.prev = nil
	}
	err := w.del(p.key, p.base, p.bind)
	var tgid uint32
	if err != nil {
		w.failed(p.key, err)
		if p.pid != 0 {
			tgid = tgidOf(p.pid)
		}
		p.dir.deleteFailed(p.key)
	}
	w.mu.Lock()
	if err != nil {
		w.recordFailureLocked(parentKey(p.key), deleteFailure{err: err, tgid: tgid})
	}
	if w.pending[p.key] == p {
		delete(w.pending, p.key)
	}
	p.err = err
	w.mu.Unlock()
	close(p.done)
}

// isPending reports whether key's delete was acknowledged and has not
// ended yet: this mount shows the name as gone.
func (w *deleteWriteback) isPending(key string) bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pending[key] != nil
}

// count is the number of deletes queued or in flight.
func (w *deleteWriteback) count() int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

// wait waits for the pending delete of key, if any, and returns its error.
func (w *deleteWriteback) wait(ctx context.Context, key string) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	p := w.pending[key]
	w.mu.Unlock()
	return waitDeletes(ctx, []*pendingDelete{p})
}

// waitDir waits for the pending deletes of the entries of the directory
// dirKey (nodeBase.key) and returns the first error among them.
func (w *deleteWriteback) waitDir(ctx context.Context, dirKey string) error {
	return w.waitMatching(ctx, func(p *pendingDelete) bool { return parentKey(p.key) == dirKey })
}

// waitPrefix waits for the pending deletes of keys below prefix and
// returns the first error among them.
func (w *deleteWriteback) waitPrefix(ctx context.Context, prefix string) error {
	return w.waitMatching(ctx, func(p *pendingDelete) bool { return strings.HasPrefix(p.key, prefix) })
}

// waitAll waits for every pending delete (unmount) and returns their
// errors.
func (w *deleteWriteback) waitAll(ctx context.Context) error {
	return w.waitMatching(ctx, func(*pendingDelete) bool { return true })
}

func (w *deleteWriteback) waitMatching(ctx context.Context, match func(*pendingDelete) bool) error {
	if w == nil {
		return nil
	}
	var ps []*pendingDelete
	w.mu.Lock()
	for _, p := range w.pending {
		if match(p) {
			ps = append(ps, p)
		}
	}
	w.mu.Unlock()
	return waitDeletes(ctx, ps)
}

// waitDeletes waits for ps (nil entries are skipped) and joins their
// errors.
func waitDeletes(ctx context.Context, ps []*pendingDelete) error {
	var errs []error
	for _, p := range ps {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
			if p.err != nil {
				errs = append(errs, p.err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.Join(errs...)
}
