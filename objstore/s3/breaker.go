package s3

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// Breaker tuning.
const (
	// brokenToOpen is how many requests in a row must break without an
	// answer (a reset, an EOF) before the storage counts as down; one
	// timeout or failed connect is enough.
	brokenToOpen = 3
	// probeFresh: a call while the storage is down joins a probe that
	// started at most this long before its operation began (or before it
	// arrived, without an operation) and is still running or failed at
	// most probeFresh ago, else starts one. So a FUSE call waits for at
	// most one probe, also when its request was queued behind another's.
	probeFresh = 50 * time.Millisecond
	// probeEvery is the pause between background probes while down.
	probeEvery = time.Second
)

// breaker knows whether the storage answers. It opens when requests fail
// without an answer (a timeout, a refused connection, or brokenToOpen
// broken connections in a row); while it is open a request is not sent:
// the call first waits for a probe (a HEAD of the bucket, bounded by
// quick) that started with the call (or joins one that started less than
// probeFresh before the call's operation began, see probeFresh), and fails at once with
// ErrUnavailable unless the probe got an answer. So calls fail fast while
// the storage is down, and the first call after it answers again goes
// through. Within one operation (objstore.WithRetryDeadline,
// WithOperation), once a call was refused, the operation's later calls are
// refused without a probe; so are the calls of work nobody waits for
// (objstore.Unwaited). A background loop also probes every probeEvery
// (bounded by slow, for links too slow for quick) and closes the breaker
// when the storage answers. Any HTTP answer, even an error status, closes it.
type breaker struct {
	probe       func(ctx context.Context) error // nil: the server answered
	quick, slow time.Duration
	m           *metrics
	log         *slog.Logger
	stop        chan struct{} // closed by Close
	// quiet: closed, and no broken request counted (the fast path of
	// every request reads only this).
	quiet atomic.Bool
	// heard: the storage has answered at least once. Until then a
	// failure is the caller's to report (a mount or a command that
	// cannot reach its bucket fails with that error), not news to log.
	heard atomic.Bool

	mu      sync.Mutex
	open    bool      // GUARDED_BY(mu)
	since   time.Time // when it opened; GUARDED_BY(mu)
	cause   error     // the failure that opened it; GUARDED_BY(mu)
	broken  int       // broken requests in a row; GUARDED_BY(mu)
	latest  *probeRun // the newest call-driven probe; GUARDED_BY(mu)
	looping bool      // the background loop runs; GUARDED_BY(mu)
	closed  bool      // Close was called; GUARDED_BY(mu)
}

type probeRun struct {
	start time.Time
	done  chan struct{}
	err   error     // set before done is closed
	end   time.Time // set before done is closed
}

// joinable reports whether a call at now, of an operation that began then
// (at now when it has none), may take r's outcome instead of starting a
// probe: r started at most probeFresh before the operation began, and it
// is still running or it failed while the operation was under way, at
// most probeFresh ago.
func (r *probeRun) joinable(began, now time.Time) bool {
	if r == nil || r.start.Before(began.Add(-probeFresh)) {
		return false
	}
	select {
	case <-r.done:
		return r.end.After(began) && !r.end.Before(now.Add(-probeFresh))
	default:
		return true
	}
}

func newBreaker(probe func(ctx context.Context) error, quick, slow time.Duration, m *metrics, log *slog.Logger) *breaker {
	b := &breaker{probe: probe, quick: quick, slow: slow, m: m, log: log, stop: make(chan struct{})}
	b.quiet.Store(true)
	return b
}

// allow returns nil when a request may be sent, else an ErrUnavailable
// *opError (certain: nothing was sent) or ctx's error.
func (b *breaker) allow(ctx context.Context, op string) error {
	if b.quiet.Load() {
		return nil
	}
	b.mu.Lock()
	if !b.open {
		b.mu.Unlock()
		return nil
	}
	if why := noWait(ctx); why != nil {
		since, cause := b.since, b.cause
		b.mu.Unlock()
		b.m.fastFailure(op)
		return b.refusal(op, since, cause, why)
	}
	now := time.Now()
	began := now
	if s, ok := objstore.OperationStart(ctx); ok && s.Before(now) {
		began = s
	}
	r := b.latest
	if !r.joinable(began, now) {
		r = &probeRun{start: now, done: make(chan struct{})}
		b.latest = r
		go b.run(r, b.quick)
	}
	b.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if r.err == nil {
		return nil
	}
	b.m.fastFailure(op)
	objstore.MarkUnreachable(ctx)
	b.mu.Lock()
	since, cause := b.since, b.cause
	b.mu.Unlock()
	return b.refusal(op, since, cause, r.err)
}

// noWait returns why a request of ctx fails at once, without waiting for a
// probe, while the storage is known down: a request of the same operation
// found no answer already (the operation fails anyway), or nobody waits for
// it (objstore.Unwaited). Otherwise nil.
func noWait(ctx context.Context) error {
	switch {
	case objstore.FoundUnreachable(ctx):
		return errors.New("an earlier request of the same operation got no answer")
	case objstore.IsUnwaited(ctx):
		return errors.New("background work does not wait for a probe")
	}
	return nil
}

// refusal is the error of a request not sent because the storage is down.
func (b *breaker) refusal(op string, since time.Time, cause, why error) error {
	return &opError{sentinel: objstore.ErrUnavailable, certain: true, noRetry: true,
		msg: fmt.Sprintf("s3 %s: not sent: the storage has not answered since %s (%v; then: %v)",
			op, since.Format(time.TimeOnly), cause, why)}
}

func (b *breaker) run(r *probeRun, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	r.err = b.probe(ctx)
	if r.err == nil {
		b.answered()
	}
	r.end = time.Now()
	close(r.done)
}

// answered records an answer from the server: the breaker closes.
func (b *breaker) answered() {
	if !b.heard.Load() {
		b.heard.Store(true)
	}
	if b.quiet.Load() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.broken = 0
	defer b.quiet.Store(true)
	if b.open {
		b.log.Info("s3: the storage answers again", "down_for", time.Since(b.since).Round(time.Millisecond))
		b.open, b.cause, b.latest = false, nil, nil
		b.m.reachable(true)
	}
}

// failed records a request that got no answer. down: a timeout or a failed
// connect (the storage is down now); otherwise a broken connection.
func (b *breaker) failed(err error, down bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.quiet.Store(false)
	b.broken++
	if b.open || (!down && b.broken < brokenToOpen) {
		return
	}
	b.open, b.since, b.cause, b.latest = true, time.Now(), err, nil
	b.m.reachable(false)
	level := slog.LevelWarn
	if !b.heard.Load() {
		level = slog.LevelDebug
	}
	b.log.Log(context.Background(), level, "s3: the storage does not answer; requests fail at once until a probe gets an answer", "err", err)
	if !b.looping && !b.closed {
		b.looping = true
		go b.loop()
	}
}

// loop probes in the background while the breaker is open.
func (b *breaker) loop() {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		b.mu.Lock()
		if !b.open {
			b.looping = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		r := &probeRun{start: time.Now(), done: make(chan struct{})}
		b.run(r, b.slow)
	}
}

// isOpen reports whether the storage is known to be down.
func (b *breaker) isOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}

// close stops the background loop.
func (b *breaker) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.stop)
	}
}
