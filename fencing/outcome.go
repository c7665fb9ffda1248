package fencing

// Outcomes that stay unknown: a commit whose response was lost, even after
// the store's retries and the write-id check of the mutation itself, is
// reported with the write id it carried, so that the caller can recognise
// it later (it may have landed: a Complete the server finished after the
// connection was cut) instead of taking its own earlier write for someone
// else's.

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencefs/fencefs/objstore"
)

// UnknownOutcomeError is the error of a mutation whose outcome is unknown:
// its commit may or may not have landed. WID is the write id the commit
// stamped; Landed tells later whether the key holds it.
type UnknownOutcomeError struct {
	Key, WID string
	Err      error
}

func (e *UnknownOutcomeError) Error() string { return e.Err.Error() }
func (e *UnknownOutcomeError) Unwrap() error { return e.Err }

// unknownOutcome wraps err, the error of m whose outcome is unknown.
func unknownOutcome(m *mutation, err error) error {
	return &UnknownOutcomeError{Key: m.key, WID: m.wid, Err: err}
}

// WriteIDOfUnknown returns the write id of a mutation whose error err says
// its outcome is unknown, or "" for any other error.
func WriteIDOfUnknown(err error) string {
	var u *UnknownOutcomeError
	if errors.As(err, &u) {
		return u.WID
	}
	return ""
}

// Landed reports whether key holds the write whose id is wid (the write id
// of an UnknownOutcomeError): landed=true with the object's current info
// when it does, false when the key holds anything else or nothing. A
// storage error leaves the question open.
func (g *Guard) Landed(ctx context.Context, key, wid string) (info objstore.ObjectInfo, landed bool, err error) {
	if wid == "" {
		return objstore.ObjectInfo{}, false, nil
	}
	cur, exists, err := g.head(ctx, key)
	if err != nil {
		return objstore.ObjectInfo{}, false, fmt.Errorf("is write %s of %s stored: %w", wid, key, err)
	}
	if !exists || stampOf(cur.Meta).WID != wid {
		return objstore.ObjectInfo{}, false, nil
	}
	g.log.Info("a commit whose outcome was unknown had landed", "key", key, "wid", wid, "etag", cur.ETag)
	return cur, true, nil
}
