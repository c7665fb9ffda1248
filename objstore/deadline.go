package objstore

import (
	"context"
	"sync/atomic"
	"time"
)

type budgetKey struct{}

// budget is what WithRetryDeadline puts in a context: one caller-level
// operation's retry deadline, and whether the storage was already found
// unreachable during it.
type budget struct {
	deadline    time.Time    // zero: none (WithOperation)
	start       time.Time    // when the operation began
	unreachable *atomic.Bool // shared by nested budgets of one operation
	uncertain   *atomic.Bool // likewise; see MarkUncertainAttempt
}

// WithRetryDeadline returns a context under which a Store retries transient
// failures (ErrUnavailable, ErrConflict) only until t: no new attempt of a
// request starts after t. An attempt already under way is not cut by it (an
// upload that keeps moving bytes runs to its end; a stalled one is ended by
// the store's own idle timeout). It is how one caller-level operation — a
// fencing mutation, made of several requests — gets one retry budget instead
// of one per request. A deadline already in ctx that is earlier wins.
//
// The context also carries what the store learned during the operation:
// once a request of it found the storage unreachable (see MarkUnreachable),
// the operation's later requests fail at once while the storage is still
// known down, instead of each waiting for the store to check again.
func WithRetryDeadline(ctx context.Context, t time.Time) context.Context {
	old, ok := ctx.Value(budgetKey{}).(*budget)
	if ok && !old.deadline.IsZero() && !t.Before(old.deadline) {
		return ctx
	}
	b := &budget{deadline: t, start: time.Now(), unreachable: new(atomic.Bool), uncertain: new(atomic.Bool)}
	if ok {
		b.start, b.unreachable = old.start, old.unreachable
		if !old.deadline.IsZero() {
			// Nested in a retry budget: one outcome too. Inside a plain
			// operation (WithOperation) each retry budget has its own.
			b.uncertain = old.uncertain
		}
	}
	return context.WithValue(ctx, budgetKey{}, b)
}

// WithOperation returns a context that makes everything done under it one
// operation, as WithRetryDeadline does, without a retry deadline of its own:
// once a request of it found the storage unreachable, its later requests
// fail at once while the storage is still known down. A FUSE call is one
// operation, so that it waits for the store to check the storage at most
// once. A context that already has an operation is returned as is.
func WithOperation(ctx context.Context) context.Context {
	return WithOperationSince(ctx, time.Now())
}

// WithOperationSince is WithOperation for work done on behalf of callers
// that have waited since start (a group commit queued behind another): a
// store may answer it with what it found out about the storage since then.
func WithOperationSince(ctx context.Context, start time.Time) context.Context {
	if _, ok := ctx.Value(budgetKey{}).(*budget); ok {
		return ctx
	}
	return context.WithValue(ctx, budgetKey{}, &budget{start: start, unreachable: new(atomic.Bool), uncertain: new(atomic.Bool)})
}

// OperationStart returns when the operation of ctx (WithOperation,
// WithRetryDeadline) began, if it has one.
func OperationStart(ctx context.Context) (time.Time, bool) {
	b, ok := ctx.Value(budgetKey{}).(*budget)
	if !ok {
		return time.Time{}, false
	}
	return b.start, true
}

// RetryDeadline returns the retry deadline set by WithRetryDeadline, if any.
func RetryDeadline(ctx context.Context) (time.Time, bool) {
	b, ok := ctx.Value(budgetKey{}).(*budget)
	if !ok || b.deadline.IsZero() {
		return time.Time{}, false
	}
	return b.deadline, true
}

// Cleanup returns the context of the cleanup of an operation of ctx that
// failed (aborting the upload it started): ctx's values without its
// cancellation, bounded by d, and an operation of its own with the retry
// deadline d. What the failed operation found out must not keep its
// cleanup from being tried and retried: its retry budget may be spent (an
// old leader resumed after a freeze), the storage found unreachable (its
// later requests would fail at once while the breaker is open), or it may
// be background work that waits for no probe (Unwaited). The caller calls
// cancel.
func Cleanup(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	now := time.Now()
	c := context.WithValue(context.WithoutCancel(ctx), unwaitedKey{}, false)
	c = context.WithValue(c, budgetKey{}, &budget{deadline: now.Add(d), start: now, unreachable: new(atomic.Bool), uncertain: new(atomic.Bool)})
	return context.WithTimeout(c, d)
}

type unwaitedKey struct{}

// Unwaited returns a context for work that no caller waits for (a
// background write that a later one can redo): while the store knows the
// storage is down, its requests fail at once instead of waiting for the
// store to check the storage again, so that it never holds up a caller's
// request queued behind it.
func Unwaited(ctx context.Context) context.Context {
	return context.WithValue(ctx, unwaitedKey{}, true)
}

// IsUnwaited reports whether ctx was made by Unwaited.
func IsUnwaited(ctx context.Context) bool {
	v, _ := ctx.Value(unwaitedKey{}).(bool)
	return v
}

// MarkUnreachable records, for the operation of ctx (WithRetryDeadline),
// that the storage did not answer. Without an operation it does nothing.
// Stores call it; see WithRetryDeadline.
func MarkUnreachable(ctx context.Context) {
	if b, ok := ctx.Value(budgetKey{}).(*budget); ok {
		b.unreachable.Store(true)
	}
}

// FoundUnreachable reports whether MarkUnreachable was called for the
// operation of ctx.
func FoundUnreachable(ctx context.Context) bool {
	b, ok := ctx.Value(budgetKey{}).(*budget)
	return ok && b.unreachable.Load()
}

// MarkUncertainAttempt records that a write attempt of the operation of ctx
// (see WithRetryDeadline) ended without a certain outcome — its response
// was lost — so that, whatever the operation's final result, that attempt
// may still be applied later by the server. Stores call it; a no-op
// without a retry deadline in ctx.
func MarkUncertainAttempt(ctx context.Context) {
	if b, ok := ctx.Value(budgetKey{}).(*budget); ok {
		b.uncertain.Store(true)
	}
}

// HadUncertainAttempt reports whether MarkUncertainAttempt was called for
// the operation of ctx.
func HadUncertainAttempt(ctx context.Context) bool {
	b, ok := ctx.Value(budgetKey{}).(*budget)
	return ok && b.uncertain.Load()
}
