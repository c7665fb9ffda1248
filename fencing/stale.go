package fencing

import (
	"context"
	"errors"

	"github.com/fencefs/fencefs/objstore"
)

// Stale decides what a precondition failure means that a caller met
// outside the Guard's own commits: a read pinned to the version it is about
// to change (the staging GET of an append, a truncate or a write into an
// existing file), a name whose object went, a commit's stale answer handed
// back to be mapped. A thawed leader meets these first, because the newer
// leader changed the object it had cached; the answer must then be the
// refusal of a stale leader (ErrFenced, EROFS), not ESTALE.
//
// cause that is neither ErrStale nor objstore.ErrPrecondition is returned
// unchanged, as is every cause in mode off or while no token is bound.
// Otherwise Stale reads the register (a validation round that starts after
// this call): a newer epoch latches the Guard fenced and returns ErrFenced
// naming it; a register that cannot be read returns ErrUnverified (EIO: it
// cannot tell a stale leader from a stale object); otherwise cause, which
// then means a change by this epoch, an older one, or a client outside the
// fence. A Guard latched fenced returns ErrFenced at once. Safe for
// concurrent use; it does I/O and honours ctx.
func (g *Guard) Stale(ctx context.Context, op, key string, cause error) error {
	if !errors.Is(cause, ErrStale) && !errors.Is(cause, objstore.ErrPrecondition) {
		return cause
	}
	g.mu.Lock()
	ts := tokenState{mode: g.cfg.Mode, token: g.token, claim: g.claim}
	state := g.state
	g.mu.Unlock()
	switch {
	case ts.mode == ModeOff, state == StateUnbound:
		return cause
	case state == StateFenced:
		return g.fencedNow(op, key)
	}
	if err := g.validate(ctx, ts, op, key); err != nil {
		return err
	}
	return cause
}
