package fencing

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// journalNames reports whether the journal object name currently names
// (key, base).
func journalNames(t *testing.T, ctx context.Context, s objstore.Store, name, key, base string) bool {
	t.Helper()
	d, _, err := objects{store: s}.readIntent(ctx, name)
	if err != nil {
		t.Fatalf("reading the journal %s: %v", name, err)
	}
	for _, e := range d.Keys {
		if e.Key == key && slices.Contains(e.Bases, base) {
			return true
		}
	}
	return false
}

// TestAnIntentOfAnOlderBindingNeverDisplacesANewerOne: an intent asked for
// with a binding read before a Bind to epoch 2 (epoch 1), arriving while a
// mutation of epoch 2 has its intent for the same key written and is about
// to commit, is refused. It must not take the key's place in the journal: every later journal
// write must still name the key while its commit is in flight, so that a
// newer binder's seal names it, its sweep changes the key, and the paused
// commit is refused instead of landing after the takeover.
func TestAnIntentOfAnOlderBindingNeverDisplacesANewerOne(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
		ctx := testCtx(t, 30*time.Second)
		s := newStore()
		const key, other = "late/k", "late/other"
		base := VersionOf(rawPut(t, ctx, s, key, "v0"))
		p := newPauser(key)
		a := newGuard(t, s, Config{Holder: "A", Hooks: Hooks{AfterValidate: p.hook}})
		bind(t, ctx, a, 1)
		stale, ok := a.activeState() // the binding read before the Bind
		if !ok {
			t.Fatal("A is not active after its bind")
		}
		bind(t, ctx, a, 2) // falls in before the goroutine runs

		aErr := make(chan error, 1)
		go func() {
			_, err := gput(ctx, a, key, "A late", base)
			aErr <- err
		}()
		released := false
		defer func() {
			if !released {
				close(p.release)
				<-aErr
			}
		}()
		p.wait(t, ctx) // epoch 2's intent for key is written; its commit is next

		if ki, err := a.intents.ensure(ctx, stale, key, base.ETag); err == nil {
			a.intents.settle(ki, true)
			t.Error("an intent of an older binding was taken")
		}
		if _, err := gput(ctx, a, other, "x", Version{}); err != nil {
			t.Fatalf("a commit of epoch 2 on %s: %v", other, err)
		}
		if !journalNames(t, ctx, s, intentNameOf(t, a), key, base.ETag) {
			t.Errorf("A's journal no longer names (%s, %s) while its commit is in flight", key, base.ETag)
		}

		b := newGuard(t, s, Config{Holder: "B"})
		bind(t, ctx, b, 3)
		close(p.release)
		released = true
		mustFenced(t, "A's paused commit after B took over", <-aErr, "")
		if got, info, _ := read(t, ctx, s, key); got == "A late" {
			t.Fatalf("%s is %q stamped by epoch %s: A's commit landed after B's takeover", key, got, info.Meta[MetaEpoch])
		}
	})
}
