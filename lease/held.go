package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencefs/fencefs/internal/ctxsleep"
)

// A held lease: its renewal in the background, what it tells its holder,
// recording a token, and release. Acquiring it is in lease.go.

// renewLoop renews the lease until stop or loss.
func (l *Lease) renewLoop() {
	defer close(l.done)
	defer l.cancelBG()
	var retryAt time.Time
	for {
		l.mu.Lock()
		basis := l.cur.basis
		l.mu.Unlock()
		at, giveUp := nextWake(basis, l.ttl, retryAt)
		t := time.NewTimer(time.Until(at))
		select {
		case <-l.stop:
			t.Stop()
			return
		case <-l.lost: // lost through Renew or RecordToken
			t.Stop()
			return
		case <-t.C:
		}
		if giveUp || !held(basis, l.ttl, time.Now()) {
			l.lose(fmt.Errorf("%w: not renewed within %v (TTL %v minus the safety margin)", ErrLost, l.ttl-margin(l.ttl), l.ttl))
			return
		}
		ctx, cancel := context.WithDeadline(l.bg, holdDeadline(basis, l.ttl))
		l.wmu.Lock()
		err := l.writeLocked(ctx, false)
		l.wmu.Unlock()
		cancel()
		switch {
		case err == nil:
			l.met.renewal("ok")
			retryAt = time.Time{}
		case errors.Is(err, ErrLost):
			l.met.renewal("lost")
			l.lose(err)
			return
		case l.bg.Err() != nil:
			return // stopping
		default:
			l.met.renewal("error")
			l.log.Warn("renewing the lease failed; retrying", "err", err)
			retryAt = time.Now().Add(retryDelay(l.ttl))
		}
	}
}

// stopRenewer stops the renewal goroutine and waits for it (idempotent).
func (l *Lease) stopRenewer() {
	l.stopOnce.Do(func() {
		close(l.stop)
		l.cancelBG()
	})
	<-l.done
}

// ID returns the random id of this acquisition, as written in the object.
func (l *Lease) ID() string { return l.id }

// TTL returns the lease's TTL.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Acquisition says how the lease was acquired.
func (l *Lease) Acquisition() Acquisition { return l.acq }

// Token returns the fencing token bound for the lease (0 when none).
func (l *Lease) Token() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.token
}

// Held reports whether the lease is still this holder's by its own
// reckoning: not lost, not released, and its deadline (the start of the
// last successful renewal + TTL − TTL/5) not passed. It reads the clock, so
// it turns false at the deadline even before the renewer notices. A true
// result may be stale by the time the caller acts on it: writes must rely
// on the fencing token.
func (l *Lease) Held() bool {
	if l.Err() != nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return held(l.cur.basis, l.ttl, time.Now())
}

// Renew renews the lease now (the background renewal goes on as well), for
// callers about to start something long who want the full TTL ahead of
// them. Errors: ErrLost (and the lease ends), ErrReleased, or a storage
// error after which the lease is unchanged.
func (l *Lease) Renew(ctx context.Context) error {
	return l.writeNow(ctx, 0)
}

// Confirm renews the lease now: a conditional write that fails when
// someone else took the lease over (Leader.Confirm). A lease whose own
// deadline has passed is lost, whatever the storage says.
func (l *Lease) Confirm(ctx context.Context) error {
	err := l.Renew(ctx)
	if err != nil && l.Err() == nil && !l.Held() {
		l.lose(fmt.Errorf("%w: not renewed within %v (TTL %v minus the safety margin)", ErrLost, l.ttl-margin(l.ttl), l.ttl))
		return l.Err()
	}
	return err
}

// RecordToken records tok as the lease's fencing token in the lease object,
// for callers that bind a token themselves after Acquire. If the write
// fails transiently it returns the error, and the next renewal records the
// token. Errors: ErrLost, ErrReleased, storage errors.
func (l *Lease) RecordToken(ctx context.Context, tok uint64) error {
	if tok == 0 {
		return fmt.Errorf("lease %q: token 0 is not a token", l.name)
	}
	return l.writeNow(ctx, tok)
}

// writeNow writes the lease object now, setting the token when tok != 0.
func (l *Lease) writeNow(ctx context.Context, tok uint64) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	if tok != 0 {
		l.token = tok
		l.met.setToken(tok)
	}
	deadline := holdDeadline(l.cur.basis, l.ttl)
	l.mu.Unlock()
	// A write after the deadline would be pointless: the lease counts as
	// lost by then.
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	err := l.writeLocked(ctx, false)
	if errors.Is(err, ErrLost) {
		l.lose(err)
	}
	return err
}

// Release stops renewing and marks the lease released (a conditional write),
// so that a waiting contender takes it at once. Transient storage errors are
// retried until ctx is done; if the release cannot be written the lease
// expires after its TTL. It returns nil when the lease was released (also
// after a loss by deadline, if no one took it over meanwhile), an error
// wrapping ErrLost when someone else holds it, or the last storage error.
// Idempotent; safe to call concurrently with the other methods.
func (l *Lease) Release(ctx context.Context) error {
	l.stopRenewer()
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	switch lerr := l.Err(); {
	case released:
		return nil
	case lerr != nil && !errors.Is(lerr, ErrLost):
		return lerr
	}
	// After a loss by deadline our version may still be current: releasing
	// it (If-Match) hands over at once; if someone took over, it is refused.
	var err error
	for attempt := 0; ; attempt++ {
		err = l.writeLocked(ctx, true)
		if err == nil || errors.Is(err, ErrLost) || ctx.Err() != nil || permanent(err) {
			break
		}
		if ctxsleep.Sleep(ctx, min(time.Duration(attempt+1)*50*time.Millisecond, time.Second)) != nil {
			break
		}
	}
	switch {
	case err == nil:
		l.end(ErrReleased)
		l.mu.Lock()
		l.released = true
		l.mu.Unlock()
		l.log.Info("lease released")
		return nil
	case errors.Is(err, ErrLost):
		l.end(err)
		return l.Err()
	}
	return fmt.Errorf("lease %q: release: %w (it expires after its TTL %v)", l.name, err, l.ttl)
}
