package fencing

// The errors the Guard returns: each wraps one of the sentinels (api.go).

import (
	"errors"
	"fmt"
)

// fenceError is an error that wraps a domain sentinel (and the storage
// error that caused it, if any) and carries a full human-readable message.
type fenceError struct {
	sentinel error
	msg      string
	cause    error
	reason   string // ErrFenced: why (what latchFenced records)
}

func (e *fenceError) Error() string { return e.msg }
func (e *fenceError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.sentinel}
	}
	return []error{e.sentinel, e.cause}
}

func fencedErr(op, key, reason string) error {
	if op == "" {
		op = "intent"
	}
	return &fenceError{sentinel: ErrFenced, msg: fmt.Sprintf("fenced: %s (%s %s)", reason, op, key), reason: reason}
}

// fencedReason returns the reason an ErrFenced built by fencedErr gives
// ("" for any other error).
func fencedReason(err error) string {
	var fe *fenceError
	if errors.As(err, &fe) {
		return fe.reason
	}
	return ""
}

func staleErr(op, key, reason string) error {
	return &fenceError{sentinel: ErrStale, msg: fmt.Sprintf("stale: %s %s: %s", op, key, reason)}
}

// unverifiedErr builds an ErrUnverified with the message fmt.Errorf(format,
// args...) gives; the errors the format wraps with %w are kept as causes,
// so errors.Is also sees storage sentinels and context errors through it.
func unverifiedErr(format string, args ...any) error {
	w := fmt.Errorf(format, args...)
	e := &fenceError{sentinel: ErrUnverified, msg: "cannot verify the epoch: " + w.Error()}
	switch w.(type) {
	case interface{ Unwrap() error }, interface{ Unwrap() []error }:
		e.cause = w
	}
	return e
}
