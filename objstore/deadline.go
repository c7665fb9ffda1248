package objstore

import (
	"context"
	"time"
)

type retryDeadlineKey struct{}

// WithRetryDeadline returns a context under which a Store retries transient
// failures (ErrUnavailable, ErrConflict) only until t: no new attempt of a
// request starts after t. An attempt already under way is not cut by it (an
// upload that keeps moving bytes runs to its end; a stalled one is ended by
// the store's own idle timeout). It is how one caller-level operation — a
// fencing mutation, made of several requests — gets one retry budget instead
// of one per request. A deadline already in ctx that is earlier wins.
func WithRetryDeadline(ctx context.Context, t time.Time) context.Context {
	if old, ok := RetryDeadline(ctx); ok && !t.Before(old) {
		return ctx
	}
	return context.WithValue(ctx, retryDeadlineKey{}, t)
}

// RetryDeadline returns the retry deadline set by WithRetryDeadline, if any.
func RetryDeadline(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(retryDeadlineKey{}).(time.Time)
	return t, ok
}
