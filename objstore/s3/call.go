package s3

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/fencefs/fencefs/internal/ctxsleep"
	"github.com/fencefs/fencefs/objstore"
)

// Backoff between attempts: exponential from retryBase, capped, jittered.
const (
	retryBase = 50 * time.Millisecond
	retryCap  = 2 * time.Second
)

// call runs one S3 request with retries; this is the one place of fencefs
// where transient storage failures are retried. fn makes one attempt and
// returns nil, a context error or a classified *opError.
//
// Retryable failures (ErrUnavailable, ErrConflict) are retried with
// jittered exponential backoff until the retry deadline — the earlier of
// Config.RetryDeadline after the call started and objstore.RetryDeadline
// of ctx — and at most s.maxRetries times when that is set. No attempt
// starts after the deadline; a running attempt is not cut by it. While the
// breaker counts the storage as down, an attempt is not sent and the call
// fails at once (see breaker). For a write, a failed attempt whose outcome
// is unknown makes any later failure an *objstore.UncertainError (see the
// package documentation).
//
// A refusal of the credentials (ErrAuth) when they come from a source that
// can be read again (a credentials file, STS, instance metadata; see
// credentials.go) is retried once at once, with the credentials read
// again: it was certainly not applied, and it may have been signed with
// keys rotated meanwhile. It never counts against s.maxRetries.
func (s *Store) call(ctx context.Context, op string, write bool, fn func(ctx context.Context) error) error {
	var uncertain error
	authRetries := 0 // 0 or 1
	deadline := time.Now().Add(s.cfg.RetryDeadline)
	if d, ok := objstore.RetryDeadline(ctx); ok && d.Before(deadline) {
		deadline = d
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return s.final(err, uncertain, attempt)
		}
		if err := s.brk.allow(ctx, op); err != nil {
			return s.final(err, uncertain, attempt)
		}
		start := time.Now()
		err := fn(ctx)
		s.m.request(op, err, time.Since(start))
		if err == nil {
			s.brk.answered()
			return nil
		}
		var oe *opError
		if !errors.As(err, &oe) {
			// A context error: the call is abandoned.
			if write {
				objstore.MarkUncertainAttempt(ctx)
			}
			return s.final(err, uncertain, attempt+1)
		}
		if oe.answered {
			s.brk.answered()
		} else if oe.sentinel == objstore.ErrUnavailable && ctx.Err() == nil {
			s.brk.failed(err, oe.down)
			if oe.down {
				objstore.MarkUnreachable(ctx)
			}
		}
		if write && !oe.certain {
			objstore.MarkUncertainAttempt(ctx)
			if uncertain == nil {
				uncertain = err
			}
		}
		if oe.sentinel == objstore.ErrAuth && s.credsRenew && authRetries == 0 {
			authRetries++
			s.creds.Expire()
			s.m.retry(op)
			s.log.Warn("s3: credentials refused; retrying once with credentials read again", "op", op, "credentials", s.credsFrom, "err", err)
			continue
		}
		retries := attempt - authRetries
		if !oe.retryable() || s.maxRetries >= 0 && retries >= s.maxRetries {
			return s.final(err, uncertain, attempt+1)
		}
		d := retryBase << retries
		if d > retryCap || d <= 0 {
			d = retryCap
		}
		d = d/2 + rand.N(d/2+1)
		left := time.Until(deadline)
		if left <= 0 {
			return s.final(err, uncertain, attempt+1)
		}
		d = min(d, left)
		s.m.retry(op)
		s.log.Debug("s3: retrying", "op", op, "attempt", attempt+1, "delay", d, "err", err)
		if err := ctxsleep.Sleep(ctx, d); err != nil {
			return s.final(err, uncertain, attempt+1)
		}
	}
}

func (s *Store) final(err, uncertain error, attempts int) error {
	if uncertain == nil || err == uncertain && attempts <= 1 {
		return err
	}
	return &objstore.UncertainError{Err: err, Cause: uncertain, Attempts: attempts}
}
