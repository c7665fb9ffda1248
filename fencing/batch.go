package fencing

import (
	"context"
	"sync"
	"sync/atomic"
)

// batch shares one run of an operation among every caller that arrives
// before the run starts (group commit): validation rounds share one
// register read, journal writes one conditional PUT. Runs are sequential,
// on one goroutine at a time. A caller always waits for a run that fixes
// what it acts on after the call, so the run sees everything the caller did
// before calling.
type batch[R any] struct {
	mu      sync.Mutex
	pending *batchRun[R] // callers join it; not started; GUARDED_BY(mu)
	current *batchRun[R] // the run in progress; GUARDED_BY(mu)
	running bool         // a runner goroutine exists; GUARDED_BY(mu)
}

// batchRun is one run of a batch.
type batchRun[R any] struct {
	done chan struct{}
	// fixed is set by the operation once what it acts on is fixed (after
	// that, a caller's later changes are not part of this run).
	fixed atomic.Bool
	res   R // valid once done is closed
}

// join returns the run the caller must wait for. With joinUnfixed, that
// may be the run in progress, if its operation has not fixed what it acts
// on yet; otherwise it is the next run. When no runner exists one is
// started (counted in wg), calling op for each run in turn.
func (b *batch[R]) join(wg *sync.WaitGroup, joinUnfixed bool, op func(*batchRun[R]) R) *batchRun[R] {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur := b.current; joinUnfixed && cur != nil && !cur.fixed.Load() {
		return cur
	}
	r := b.pending
	if r == nil {
		r = &batchRun[R]{done: make(chan struct{})}
		b.pending = r
	}
	if !b.running {
		b.running = true
		b.pending = nil
		b.current = r
		wg.Add(1)
		go b.runAll(wg, r, op)
	}
	return r
}

// runAll runs r, then every run that callers joined meanwhile.
func (b *batch[R]) runAll(wg *sync.WaitGroup, r *batchRun[R], op func(*batchRun[R]) R) {
	defer wg.Done()
	for r != nil {
		r.res = op(r)
		close(r.done)
		b.mu.Lock()
		r = b.pending
		b.pending = nil
		b.current = r
		if r == nil {
			b.running = false
		}
		b.mu.Unlock()
	}
}

// wait returns the run's result, or ctx's error if ctx ends first.
func (r *batchRun[R]) wait(ctx context.Context) (R, error) {
	select {
	case <-r.done:
		return r.res, nil
	case <-ctx.Done():
		var zero R
		return zero, ctx.Err()
	}
}
