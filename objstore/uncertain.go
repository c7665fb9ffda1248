package objstore

import (
	"context"
	"errors"
	"fmt"
)

// UncertainError wraps the final error of a write that a store retried after
// an attempt whose outcome is unknown (its response was lost: a timeout, a
// reset connection, a 500). That earlier attempt may have been applied, so
// the final error — typically ErrPrecondition, because the retry found the
// write's own result in place — does not prove the write failed. Stores
// never resolve this themselves; the fencing layer resolves it by reading
// the key back and looking for its write id.
//
// Unwrap returns Err, so errors.Is(err, ErrPrecondition) still holds.
type UncertainError struct {
	Err      error // the final attempt's error (wraps a sentinel)
	Cause    error // the error of the attempt whose outcome is unknown
	Attempts int   // attempts made in total
}

func (e *UncertainError) Error() string {
	return fmt.Sprintf("%v (after %d attempts; an earlier attempt may have been applied: %v)", e.Err, e.Attempts, e.Cause)
}

func (e *UncertainError) Unwrap() error { return e.Err }

// MaybeApplied reports whether a failed write may nevertheless have been
// applied: err is an UncertainError, or a context error (the call was
// abandoned), or ErrUnavailable — unless the store says the request was
// certainly not applied (an error with a NotApplied method returning true:
// never sent, or refused, as a 503). For nil it returns false.
func MaybeApplied(err error) bool {
	if err == nil {
		return false
	}
	var u *UncertainError
	if errors.As(err, &u) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var na interface{ NotApplied() bool }
	if errors.As(err, &na) && na.NotApplied() {
		return false
	}
	return errors.Is(err, ErrUnavailable)
}
