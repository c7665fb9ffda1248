package lease

import "context"

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
	// Release gives the leadership up so that a waiting contender takes
	// over at once. Idempotent; an error wrapping ErrLost means it had
	// been lost already.
	Release(ctx context.Context) error
}

var (
	_ Leader = (*Lease)(nil)
	_ Leader = (*Election)(nil)
)
