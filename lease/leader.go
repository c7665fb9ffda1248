package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"
)

// Leader is a held leadership that carries a fencing token, whoever chose
// the leader: *Lease (the lease object on the bucket, the embedded default)
// and *Election (an etcd election) implement it, so that a supervisor such
// as `fencefs run`, its metrics and its /healthz work the same with either.
//
// The token is what protects the storage: a Leader that reports Held may
// already have been replaced (a process frozen past its TTL cannot know),
// and then the newer leader's token makes the storage refuse this one's
// writes.
type Leader interface {
	// Name is the lease's or the election's name.
	Name() string
	// Token is the fencing token bound for this leadership (0: none).
	Token() uint64
	// Held reports whether this process still leads by its own reckoning:
	// not lost, not released, its own deadline not passed.
	Held() bool
	// Lost is closed when the leadership is lost (not by Release); Err
	// then wraps ErrLost and says why.
	Lost() <-chan struct{}
	// Err is nil while held, wraps ErrLost after a loss, and is
	// ErrReleased after Release.
	Err() error
	// Confirm asks the coordinator now whether this process still leads
	// (the S3 lease: a renewal; etcd: a linearizable read of the leader
	// key; ZooKeeper: a sync and a read of the leader znode). nil: it
	// does, as of a moment after the call began. An error wrapping
	// ErrLost: it does not, and the holding has ended (Lost is closed).
	// ErrReleased after Release. Any other error: the coordinator could
	// not tell (unreachable, ctx ended); the holding is unchanged, and
	// Held turns false at its own deadline if that goes on.
	Confirm(ctx context.Context) error
	// Release gives the leadership up so that a waiting contender takes
	// over at once. Idempotent; an error wrapping ErrLost means it had
	// been lost already.
	Release(ctx context.Context) error
}

var (
	_ Leader = (*Lease)(nil)
	_ Leader = (*Election)(nil)
)

// holding is the state a Lease and an Election share: the name held, the
// logger and metrics, and how the holding ended. It gives both their Name,
// Lost and Err.
type holding struct {
	name    string
	log     *slog.Logger
	met     *metrics
	lostMsg string        // logged on a loss: "lease lost", "leadership lost"
	lost    chan struct{} // closed on loss

	endMu sync.Mutex
	err   error // GUARDED_BY(endMu): why the holding ended; nil while held
}

// Name returns the lease's or the election's name.
func (h *holding) Name() string { return h.name }

// Lost returns a channel closed when the holding is lost (Err then wraps
// ErrLost). It is not closed by Release.
func (h *holding) Lost() <-chan struct{} { return h.lost }

// Err returns nil while held, an error wrapping ErrLost after a loss, or
// ErrReleased after Release.
func (h *holding) Err() error {
	h.endMu.Lock()
	defer h.endMu.Unlock()
	return h.err
}

// end records err as why the holding ended, unless it had ended already
// (the first reason wins): then it returns that earlier reason and changes
// nothing. A loss (err wraps ErrLost) is counted and closes Lost; a release
// (ErrReleased) does not close it.
func (h *holding) end(err error) (earlier error) {
	h.endMu.Lock()
	defer h.endMu.Unlock()
	if h.err != nil {
		return h.err
	}
	h.err = err
	lost := errors.Is(err, ErrLost)
	h.met.ended(lost) // before Lost: whoever wakes on it sees the metrics
	if lost {
		close(h.lost)
	}
	return nil
}

// lose ends the holding with err, a loss, and logs it (the first reason
// wins).
func (h *holding) lose(err error) {
	if h.end(err) == nil {
		h.log.Info(h.lostMsg, "reason", err)
	}
}

// watcher is what an election won shares: the goroutine that watches for
// its loss, and a Release that runs once.
type watcher struct {
	cancel  context.CancelFunc // stops the watch
	watched chan struct{}      // closed when the watch has exited

	mu       sync.Mutex
	released bool  // GUARDED_BY(mu)
	relErr   error // GUARDED_BY(mu): the first Release's result
}

// startWatch runs watch in its own goroutine until release.
func (w *watcher) startWatch(watch func(ctx context.Context)) {
	w.watched = make(chan struct{})
	bg, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go func() {
		defer close(w.watched)
		watch(bg)
	}()
}

// release is an election's Release: the first call ends h (ErrReleased),
// stops the watch and waits for it, then resigns — resign is given the
// loss that had ended h before, nil if none, and returns Release's
// result; "resigned" is logged when it is nil. Later calls return the
// first call's result.
func (w *watcher) release(h *holding, resign func(lostErr error) error) error {
	w.mu.Lock()
	if w.released {
		defer w.mu.Unlock()
		return w.relErr
	}
	w.released = true
	w.mu.Unlock()
	lostErr := h.end(ErrReleased)
	w.cancel()
	<-w.watched
	err := resign(lostErr)
	if err == nil {
		h.log.Info("resigned")
	}
	w.mu.Lock()
	w.relErr = err
	w.mu.Unlock()
	return err
}

// start makes h the holding of an election name just won, acquired how.
func (h *holding) start(name string, log *slog.Logger, met *metrics, how string) {
	h.name, h.log, h.met, h.lostMsg = name, log, met, "leadership lost"
	h.lost = make(chan struct{})
	met.acquired(how)
}

// bindElected binds token through bind for l, an election just won whose
// holding is h; ctx is cancelled if l is lost meanwhile. If the bind
// fails, l is released (within release) and the error says why: the
// bind's ErrTokenSource as is, a loss, or the bind's error.
func bindElected(ctx context.Context, l Leader, h *holding, token uint64, bind func(context.Context, uint64) error, release time.Duration) error {
	bindCtx, cancelBind := h.whileHeld(ctx)
	defer cancelBind()
	if err := bind(bindCtx, token); err != nil {
		relCtx, cancel := context.WithTimeout(context.Background(), release)
		defer cancel()
		_ = l.Release(relCtx)
		switch lerr := l.Err(); {
		case errors.Is(err, ErrTokenSource):
			return err // names the token already
		case errors.Is(lerr, ErrLost):
			return fmt.Errorf("%w while binding token %d", lerr, token)
		}
		return fmt.Errorf("binding token %d: %w", token, err)
	}
	h.met.setToken(token)
	h.met.wrote()
	return nil
}

// whileHeld returns a context derived from ctx that is also cancelled when
// the holding is lost (for binding a token, which a loss makes worthless).
func (h *holding) whileHeld(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-h.lost:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// defaultHolder is the holder's description when none is given:
// "hostname:pid".
func defaultHolder() string {
	host, _ := os.Hostname()
	return host + ":" + strconv.Itoa(os.Getpid())
}

// orDiscard returns log, or a logger that discards everything when log is
// nil.
func orDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}
