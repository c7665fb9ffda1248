package fencing

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

func TestStaleIsFencedOnlyWhenANewerEpochHoldsTheBucket(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
		ctx := testCtx(t, 30*time.Second)
		s := newStore()
		pinned := fmt.Errorf("stage k: %w", objstore.ErrPrecondition)
		other := fmt.Errorf("stage k: %w", objstore.ErrUnavailable)

		unbound := newGuard(t, s, Config{Holder: "U"})
		if err := unbound.Stale(ctx, "write", "k", pinned); err != pinned {
			t.Errorf("unbound Stale = %v, want the cause unchanged", err)
		}
		off := newGuard(t, s, Config{Holder: "O", Mode: ModeOff})
		if err := off.Stale(ctx, "write", "k", pinned); err != pinned {
			t.Errorf("mode off Stale = %v, want the cause unchanged", err)
		}

		a := newGuard(t, s, Config{Holder: "A"})
		bind(t, ctx, a, 17)
		// Changed by this epoch or a client outside the fence: stale.
		if err := a.Stale(ctx, "write", "k", pinned); err != pinned {
			t.Errorf("Stale with no newer epoch = %v, want the cause unchanged", err)
		}
		if err := a.Stale(ctx, "write", "k", other); err != other {
			t.Errorf("Stale of a non-precondition error = %v, want it unchanged", err)
		}
		// A newer leader took over; A does not know yet.
		b := newGuard(t, s, Config{Holder: "B"})
		bind(t, ctx, b, 18)
		if st := a.Status(); st.State != StateActive {
			t.Fatalf("A learned of B before asking: %+v", st)
		}
		for _, cause := range []error{pinned, staleErr("put", "k", "changed since it was read")} {
			err := a.Stale(ctx, "write", "k", cause)
			if !errors.Is(err, ErrFenced) || errors.Is(err, ErrStale) {
				t.Errorf("Stale(%v) after a takeover = %v, want ErrFenced", cause, err)
			}
		}
		if st := a.Status(); st.State != StateFenced || st.Epoch != 18 {
			t.Errorf("A after Stale: %+v, want latched fenced at epoch 18", st)
		}
		if _, err := gput(ctx, a, "k2", "stale leader", Version{}); !errors.Is(err, ErrFenced) {
			t.Errorf("A's next mutation = %v, want ErrFenced", err)
		}
	})
}
