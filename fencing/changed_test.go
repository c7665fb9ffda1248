package fencing

import (
	"context"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
)

// TestChangedFiresWhenTheStatusChangesAndOnlyThen: the channel taken from
// Changed is closed by a bind, by the fenced latch (learnt by a refresh or
// by a mutation), by a newer epoch in the register and by Close, and by
// nothing that leaves Status as it was (mutations, refusals, a refresh
// finding nothing new, binding the active token again). The channel taken
// afterwards is open: a watcher that calls Changed again waits for the
// next change instead of spinning, also once the Guard is closed.
func TestChangedFiresWhenTheStatusChangesAndOnlyThen(t *testing.T) {
	type env struct {
		ctx context.Context
		s   objstore.Store
		g   *Guard
	}
	bound := func(t *testing.T, e env) { bind(t, e.ctx, e.g, 1) }
	// fencedBy binds a newer epoch under A (without waiting for A's
	// release of its journal entries).
	fencedBy := func(t *testing.T, e env) {
		bound(t, e)
		bind(t, e.ctx, newGuard(t, e.s, Config{Holder: "B", ReleaseGrace: -1}), 2)
	}
	fenced := func(t *testing.T, e env) {
		fencedBy(t, e)
		mustFenced(t, "refresh after B bound", e.g.Refresh(e.ctx), "")
	}
	put := func(t *testing.T, e env) error {
		_, err := gput(e.ctx, e.g, "changed/k", "x", Version{})
		return err
	}
	for _, tc := range []struct {
		name    string
		arrange func(t *testing.T, e env) // before the channel is taken
		act     func(t *testing.T, e env)
		fires   bool
	}{
		{"a bind fires", func(*testing.T, env) {}, bound, true},
		{"the fenced latch found by a refresh fires", fencedBy, func(t *testing.T, e env) {
			mustFenced(t, "refresh", e.g.Refresh(e.ctx), "")
		}, true},
		{"the fenced latch found by a mutation fires", fencedBy, func(t *testing.T, e env) {
			mustFenced(t, "put", put(t, e), "")
		}, true},
		{"a newer epoch seen while unbound fires", func(t *testing.T, e env) {
			if _, err := Raise(e.ctx, e.s, Config{Holder: "cli"}, 0); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, e env) {
			if err := e.g.Refresh(e.ctx); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"close fires", bound, func(t *testing.T, e env) {
			if err := e.g.Close(e.ctx); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"a mutation does not fire", bound, func(t *testing.T, e env) {
			if err := put(t, e); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"a refresh that finds nothing new does not fire", bound, func(t *testing.T, e env) {
			if err := e.g.Refresh(e.ctx); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"binding the active token again does not fire", bound, bound, false},
		{"a refusal of a fenced guard does not fire", fenced, func(t *testing.T, e env) {
			mustFenced(t, "put", put(t, e), "")
			mustFenced(t, "refresh", e.g.Refresh(e.ctx), "")
			if _, err := e.g.Admit("write"); err == nil {
				t.Fatal("Admit on a fenced guard succeeded")
			}
		}, false},
		{"nothing happening does not fire", bound, func(t *testing.T, e env) {
			time.Sleep(50 * time.Millisecond) // background work may run meanwhile
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := memstore.New()
			e := env{ctx: testCtx(t, 30*time.Second), s: s, g: newGuard(t, s, Config{Holder: "A"})}
			tc.arrange(t, e)
			ch := e.g.Changed()
			before := e.g.Status()
			tc.act(t, e)
			after := e.g.Status()
			// Whatever closes the channel does so before the call that
			// made the change returns.
			if got := isClosed(ch); got != tc.fires {
				t.Fatalf("fired = %v, want %v (status %+v → %+v)", got, tc.fires, before, after)
			}
			if isClosed(e.g.Changed()) {
				t.Fatal("the channel taken after the change is closed already")
			}
		})
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
