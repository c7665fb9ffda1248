package fusefs

// Attributes ahead of the stat calls that follow a listing.
//
// `ls -l`, `find`, `du` and file managers list a directory and then stat
// every entry, one at a time, in the order they choose. A listing carries
// each object's ETag, size and date but not its metadata (mode, owner,
// times, symlink or file), so each stat would be a HEAD in turn. Instead a
// listing:
//
//   - confirms the cached version of every child whose ETag, size and
//     date match what it lists (a metadata change through fencefs is a
//     copy, which changes the date): the child is fresh again, no HEAD;
//   - starts HEADs of the other listed objects in the background, in the
//     listing's order, at most Options.PrefetchConcurrency at a time; a
//     lookup of such a name waits for its HEAD if it is in flight, or takes
//     the name's turn if it has not started.
//
// A listing that carried an object's metadata is that object's HEAD
// already (listattrs.go): its result is a prefetch that is done.
//
// A prefetched result answers a lookup for as long as a node's own HEAD
// would (MetaCacheTTL, counted from when it arrived; see filesystem.fresh), and
// is dropped once used or when the next listing starts. Only objects are
// prefetched (not prefixes), at most maxPrefetch per listing.

import (
	"context"
	"sync"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"golang.org/x/sync/errgroup"
)

// maxPrefetch bounds the HEADs one listing starts (and the results kept).
const maxPrefetch = 100_000

// prefetch is one listed name's HEAD. Its fields are set once, before done
// is closed.
type prefetch struct {
	done chan struct{}
	r    resolved
	err  error
	at   time.Time // when the HEAD returned
}

// prefetcher holds a directory's prefetches.
type prefetcher struct {
	fsys *filesystem // constant

	mu sync.Mutex
	// GUARDED_BY(mu): by name. An entry whose done is open is queued or
	// in flight; claimed marks a queued one a lookup took over.
	byName  map[string]*prefetch
	claimed map[string]bool
	cancel  context.CancelFunc // stops the current round
}

// prefetchItem is one listed object to prefetch: its name and key, and,
// when the listing carried its metadata, what a HEAD would have found.
type prefetchItem struct {
	name, key string
	listed    *resolved // nil: the version needs a HEAD
}

// start replaces the directory's prefetches with items, in order: those
// listed with their version are ready at once, the others are HEADs run in
// the background.
func (p *prefetcher) start(items []prefetchItem) {
	p.mu.Lock()
	if p.cancel != nil {
		p.cancel()
	}
	p.byName, p.claimed, p.cancel = nil, nil, nil
	if len(items) == 0 {
		p.mu.Unlock()
		return
	}
	if len(items) > maxPrefetch {
		items = items[:maxPrefetch]
	}
	ctx, cancel := context.WithCancel(p.fsys.ctx)
	now := time.Now()
	byName := make(map[string]*prefetch, len(items))
	claimed := map[string]bool{}
	pfs := make([]*prefetch, len(items)) // the goroutine's own view: byName changes under p.mu
	heads := 0
	for i, it := range items {
		pfs[i] = &prefetch{done: make(chan struct{})}
		byName[it.name] = pfs[i]
		if it.listed != nil {
			pfs[i].r, pfs[i].at = *it.listed, now
			close(pfs[i].done)
			claimed[it.name] = true
		} else {
			heads++
		}
	}
	p.byName, p.claimed, p.cancel = byName, claimed, cancel
	p.mu.Unlock()
	if heads == 0 {
		cancel()
		return
	}

	go func() {
		defer cancel()
		var g errgroup.Group
		g.SetLimit(p.fsys.opts.PrefetchConcurrency)
		for i, it := range items {
			pf, name, key := pfs[i], it.name, it.key
			if it.listed != nil {
				continue
			}
			if ctx.Err() != nil {
				break
			}
			p.mu.Lock()
			taken := p.claimed[name]
			p.claimed[name] = true
			p.mu.Unlock()
			if taken {
				continue // a lookup does it
			}
			g.Go(func() error {
				info, err := p.fsys.store.Stat(ctx, key)
				pf.finish(key, info, err)
				return nil
			})
		}
		_ = g.Wait()
	}()
}

func (pf *prefetch) finish(key string, info objstore.ObjectInfo, err error) {
	switch {
	case err != nil:
		pf.err = err
	case fencing.IsTombstone(info):
		pf.err = objstore.ErrNotFound
	default:
		pf.r = resolved{kind: kindOf(key, info.Meta), info: info}
	}
	pf.at = time.Now()
	close(pf.done)
}

// take returns the prefetched version of name, waiting for its HEAD when
// it is in flight. ok is false when there is none to use (no prefetch, not
// started, failed, a directory, or stale): the caller resolves the name
// itself.
func (p *prefetcher) take(ctx context.Context, name string) (resolved, bool) {
	p.mu.Lock()
	pf := p.byName[name]
	if pf == nil {
		p.mu.Unlock()
		return resolved{}, false
	}
	if !p.claimed[name] {
		p.claimed[name] = true // not started: the lookup's own HEAD is as fast
		delete(p.byName, name)
		p.mu.Unlock()
		return resolved{}, false
	}
	p.mu.Unlock()
	select {
	case <-pf.done:
	case <-ctx.Done():
		return resolved{}, false
	}
	p.mu.Lock()
	if p.byName[name] == pf {
		delete(p.byName, name)
	}
	p.mu.Unlock()
	if pf.err != nil || pf.r.kind == kindDir || !p.fsys.fresh(pf.at) {
		return resolved{}, false
	}
	return pf.r, true
}

// drop forgets name's prefetched version, when this mount adds, removes
// or renames the name: a HEAD from before the change must not answer a
// lookup after it (a FIFO listed, unlinked and made again was EEXIST:
// pjdfstest mkfifo/00.t).
func (p *prefetcher) drop(name string) {
	p.mu.Lock()
	if p.byName[name] != nil {
		delete(p.byName, name)
		if p.claimed != nil {
			p.claimed[name] = true // a queued HEAD is skipped
		}
	}
	p.mu.Unlock()
}
