package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// Inspect is for the tests only: what a lease object holds, read without
// taking part in the lease.

// Info describes a lease object, as Inspect reads it.
type Info struct {
	Name string
	// Holder is the holder's descriptive name (Options.Holder); ID is the
	// random id of the acquisition, unique per Acquire.
	Holder, ID string
	// Token is the fencing token the holder recorded (0: none yet).
	Token uint64
	TTL   time.Duration
	// Seq counts the writes of the object (all holders).
	Seq uint64
	// RenewedAt and AcquiredAt are the writer's wall clock: informational.
	RenewedAt, AcquiredAt time.Time
	Released              bool
	// ETag is the object's current version.
	ETag string
}

// Inspect reads the lease name of the fence domain without taking part in
// it. Errors: objstore.ErrNotFound when the lease was never acquired,
// ErrFormat for an object this package cannot read, storage errors.
func Inspect(ctx context.Context, store objstore.Store, domain, name string) (Info, error) {
	if err := ValidName(name); err != nil {
		return Info{}, err
	}
	key := Key(domain, name)
	v, err := readView(ctx, store, key)
	if err != nil {
		return Info{}, err
	}
	if !v.exists {
		return Info{}, fmt.Errorf("lease %q: %w", name, objstore.ErrNotFound)
	}
	if v.rec == nil {
		return Info{}, fmt.Errorf("%w: %s is not a lease record", ErrFormat, key)
	}
	r := v.rec
	return Info{Name: r.Name, Holder: r.Holder, ID: r.ID, Token: r.Token, TTL: r.ttl(), Seq: r.Seq,
		RenewedAt: r.RenewedAt, AcquiredAt: r.AcquiredAt, Released: r.Released, ETag: v.etag}, nil
}
