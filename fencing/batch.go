package fencing

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
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
	// waited is set once a caller that waits for the outcome joined (see
	// joinAs); read by the operation after fixed is set, it is final.
	waited atomic.Bool
	// since is when the operation of the earliest waiting caller began
	// (Unix nanoseconds; joinAs), final like waited.
	since atomic.Int64
	res   R // valid once done is closed
}

// Since returns when the earliest operation waiting for r began.
func (r *batchRun[R]) Since() time.Time {
	return time.Unix(0, r.since.Load())
}

// waitedSince records a waiting caller whose operation began at t.
func (r *batchRun[R]) waitedSince(t time.Time) {
	r.waited.Store(true)
	for n := t.UnixNano(); ; {
		old := r.since.Load()
		if old != 0 && old <= n || r.since.CompareAndSwap(old, n) {
			return
		}
	}
}

// join returns the run the caller must wait for. With joinUnfixed, that
// may be the run in progress, if its operation has not fixed what it acts
// on yet; otherwise it is the next run. When no runner exists one is
// started (counted in wg), calling op for each run in turn.
func (b *batch[R]) join(wg *sync.WaitGroup, joinUnfixed bool, op func(*batchRun[R]) R) *batchRun[R] {
	return b.joinAs(wg, joinUnfixed, true, time.Now(), op)
}

// joinAs is join for a caller that waits for the outcome, whose operation
// began at since, or (waited false) for background work that a later run
// can redo: a run that only the latter joined may give up early
// (batchRun.waited).
func (b *batch[R]) joinAs(wg *sync.WaitGroup, joinUnfixed, waited bool, since time.Time, op func(*batchRun[R]) R) *batchRun[R] {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur := b.current; joinUnfixed && cur != nil {
		if waited {
			// Before fixed is read: an operation that fixes after this
			// read sees waited (a run joined too late keeps it, harmlessly).
			cur.waitedSince(since)
		}
		if !cur.fixed.Load() {
			return cur
		}
	}
	r := b.pending
	if r == nil {
		r = &batchRun[R]{done: make(chan struct{})}
		b.pending = r
	}
	if waited {
		r.waitedSince(since)
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
