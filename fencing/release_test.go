package fencing

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// TestASealedOwnerThatIsAliveReleasesItsSettledEntries: A committed k and
// its settled entry is still in its journal (a long linger stands in for a
// trim not yet written) when B binds. When A learns of the seal (its next
// journal write fails) within the grace, its release names no entry: B's
// sweep leaves k alone (no rewrite, no record) and deletes the release.
// (A may also learn it from a register read: it latches fenced either
// way.) When A stays silent, B's sweep treats the entry as a commit in flight:
// k is rewritten and its base recorded.
func TestASealedOwnerThatIsAliveReleasesItsSettledEntries(t *testing.T) {
	for _, tc := range []struct {
		name      string
		aWrites   bool // A writes again during B's grace
		wantSwept bool
	}{
		{"an owner that learns of the seal releases its settled entries", true, false},
		{"a silent owner's entries are all swept", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
				ctx := testCtx(t, 60*time.Second)
				s := newStore()
				a := newGuard(t, s, Config{Holder: "A", IntentLinger: time.Hour})
				bind(t, ctx, a, 1)
				info, err := gput(ctx, a, "rel/k", "v1", Version{}) // its entry: (k, absent)
				if err != nil {
					t.Fatal(err)
				}
				b := newGuard(t, s, Config{Holder: "B", ReleaseGrace: 5 * time.Second})
				bound := make(chan error, 1)
				start := time.Now()
				go func() {
					_, err := b.Bind(ctx, 2)
					bound <- err
				}()
				if tc.aWrites {
					// A's next commit meets the seal (or the raise): fenced.
					waitFor(t, ctx, func() bool { return sealed(ctx, s, a) })
					_, err := gput(ctx, a, "rel/other", "x", Version{})
					mustFenced(t, "A's commit after the seal", err, "")
				}
				if err := <-bound; err != nil {
					t.Fatalf("B's bind: %v", err)
				}
				took := time.Since(start)
				_, got, _ := read(t, ctx, s, "rel/k")
				swept := got.Meta[MetaEpoch] == "2"
				if swept != tc.wantSwept {
					t.Fatalf("k swept by B = %v (stamp %s, record %q), want %v", swept, got.Meta[MetaEpoch], got.Meta[MetaSwept], tc.wantSwept)
				}
				if !swept && objstore.NormalizeETag(got.ETag) != objstore.NormalizeETag(info.ETag) {
					t.Fatalf("k changed: %s → %s", info.ETag, got.ETag)
				}
				if swept && !parseRecord(got.Meta[MetaSwept]).has("") {
					t.Fatalf("the swept k's record %q does not name A's base (absent: A created it)", got.Meta[MetaSwept])
				}
				if !tc.aWrites && took < 5*time.Second {
					t.Errorf("B bound after %v without a release: it did not wait the grace", took)
				}
				n := 0
				_ = s.List(ctx, newLayout("").releasedPrefix(), "", func(objstore.Entry) error { n++; return nil })
				if n != 0 {
					t.Errorf("%d releases left after the sweep", n)
				}
			})
		})
	}
}

// sealed reports whether a's current journal is sealed in the store.
func sealed(ctx context.Context, s objstore.Store, a *Guard) bool {
	a.intents.mu.Lock()
	jr := a.intents.jr
	a.intents.mu.Unlock()
	if jr == nil {
		return false
	}
	d, _, err := objects{store: s}.readIntent(ctx, jr.name)
	if errors.Is(err, objstore.ErrNotFound) {
		return true // swept already
	}
	return err == nil && d.Sealed != nil
}
