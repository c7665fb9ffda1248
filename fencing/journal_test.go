package fencing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
)

// staleRegister is a store whose conditional register reads always answer
// "not modified": the Guard using it never learns a newer epoch from the
// register, only from its sealed journal.
type staleRegister struct{ objstore.Store }

func (s staleRegister) Get(ctx context.Context, key string, opts objstore.GetOptions) (io.ReadCloser, objstore.ObjectInfo, error) {
	if strings.HasSuffix(key, ProtocolDir+"/"+registerName) && opts.IfNoneMatch != "" {
		return nil, objstore.ObjectInfo{}, objstore.ErrNotModified
	}
	return s.Store.Get(ctx, key, opts)
}

// TestJournalSealedByANewerBinderFencesItsOwner checks the journal's own
// guarantee, without help from the register: once a newer binder sealed
// the journal (its sweep then crashed, leaving it sealed; or completed and
// removed it), the owner's next journal write is refused, the owner is
// fenced, and its commit never reaches the bucket.
func TestJournalSealedByANewerBinderFencesItsOwner(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
		for _, tc := range []struct {
			name, why string
			crash     bool
		}{
			{"sweep crashed after sealing", "sealed by epoch 2", true},
			{"sweep completed", "it removed our intent journal", false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := testCtx(t, 30*time.Second)
				s := newStore()
				a := newGuard(t, staleRegister{s}, Config{Holder: "A"})
				bind(t, ctx, a, 1)
				if _, err := gput(ctx, a, "j/a", "a1", Version{}); err != nil {
					t.Fatal(err)
				}
				var hooks Hooks
				if tc.crash {
					hooks.BeforeSweepKey = func(context.Context, string) error { return errors.New("crash") }
				}
				b := newGuard(t, s, Config{Holder: "B", Hooks: hooks})
				if _, err := b.Bind(ctx, 2); (err != nil) != tc.crash {
					t.Fatalf("B's Bind = %v", err)
				}

				_, err := gput(ctx, a, "j/b", "late", Version{})
				mustFenced(t, "A's commit after B sealed its journal", err, tc.why)
				if _, _, ok := read(t, ctx, s, "j/b"); ok {
					t.Fatal("j/b exists: A's commit landed after the seal")
				}
				if st := a.Status(); st.State != StateFenced {
					t.Errorf("A after the refused journal write: %+v, want fenced", st)
				}
				if !tc.crash {
					// B swept what A's journal named.
					if _, info, _ := read(t, ctx, s, "j/a"); info.Meta[MetaEpoch] != "2" {
						t.Errorf("j/a after B's sweep is stamped %q, want 2", info.Meta[MetaEpoch])
					}
				}
			})
		}
	})
}

// TestBinderSealsBeforeItRaises checks the order of a takeover: the older
// journals are sealed before the register shows the newer epoch, so a
// binder that dies right after its raise (here: its register write is the
// last thing it does) has already fenced the older writer, whose next
// mutation is refused even though nobody swept.
func TestBinderSealsBeforeItRaises(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	s := memstore.New()
	a := newGuard(t, staleRegister{s}, Config{Holder: "A"})
	bind(t, ctx, a, 1)
	reg := newLayout("").register()
	journal := intentNameOf(t, a)
	var raises atomic.Int32
	s.SetHook(func(ctx context.Context, ev memstore.Event) error {
		if ev.Op == memstore.OpPut && ev.Phase == memstore.PhaseBefore && ev.Key == reg {
			raises.Add(1)
			return errors.New("binder died") // the raise never happens
		}
		return nil
	})
	b := newGuard(t, s, Config{Holder: "B"})
	if _, err := b.Bind(ctx, 2); err == nil {
		t.Fatal("B's bind succeeded without its register write")
	}
	s.SetHook(nil)
	if raises.Load() != 1 {
		t.Fatalf("%d register writes attempted, want 1", raises.Load())
	}
	// Nothing of B's ran after its failed raise: a seal now was made before.
	d, _, err := objects{store: s}.readIntent(ctx, journal)
	if err != nil || d.Sealed == nil || d.Sealed.Epoch != 2 {
		t.Fatalf("A's journal after B died at its raise: %+v, %v; want sealed by epoch 2", d, err)
	}
	_, err = gput(ctx, a, "j/x", "late", Version{})
	mustFenced(t, "a mutation after B sealed, before any raise", err, "sealed by epoch 2")
	if _, _, ok := read(t, ctx, s, "j/x"); ok {
		t.Fatal("j/x landed after A's journal was sealed")
	}
}

// intentNameOf returns g's journal object name.
func intentNameOf(t *testing.T, g *Guard) string {
	t.Helper()
	g.intents.mu.Lock()
	defer g.intents.mu.Unlock()
	if g.intents.jr == nil {
		t.Fatal("no journal")
	}
	return g.intents.jr.name
}

// TestConcurrentCommitsShareJournalWrites checks the group commit: commits
// arriving while a journal write is in flight join the next one.
func TestConcurrentCommitsShareJournalWrites(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	s := memstore.New()
	a := newGuard(t, s, Config{Holder: "A"})
	bind(t, ctx, a, 1)
	writes := countJournalWrites(s, 20*time.Millisecond) // keep each write in flight while the others arrive
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = gput(ctx, a, fmt.Sprintf("g/f%02d", i), "x", Version{})
		}()
	}
	wg.Wait()
	s.SetHook(nil)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if w := writes.Load(); w > 3 {
		t.Errorf("%d concurrent commits made %d journal writes; want them to share (at most 3)", n, w)
	}
	if k := countIntents(t, ctx, s); k != n {
		t.Errorf("the journal names %d keys, want %d (intents linger)", k, n)
	}
}

// TestLostJournalWriteResponseIsRecognisedAsOurs checks that a journal
// write whose response was lost is not mistaken for a seal: the retry is
// refused (the ETag moved), the journal holds our write, the commit goes on.
func TestLostJournalWriteResponseIsRecognisedAsOurs(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	s := memstore.New()
	a := newGuard(t, s, Config{Holder: "A"})
	bind(t, ctx, a, 1)
	var lost atomic.Bool
	s.SetHook(func(ctx context.Context, ev memstore.Event) error {
		if ev.Op == memstore.OpPut && ev.Phase == memstore.PhaseAfter && ev.Err == nil &&
			strings.Contains(ev.Key, "/intents/") && lost.CompareAndSwap(false, true) {
			return objstore.ErrUnavailable // applied; the response is "lost"
		}
		return nil
	})
	if _, err := gput(ctx, a, "l/k", "v", Version{}); err != nil {
		t.Fatalf("commit after a lost journal response: %v", err)
	}
	s.SetHook(nil)
	if !lost.Load() {
		t.Fatal("the hook never fired")
	}
	if got, _, ok := read(t, ctx, s, "l/k"); !ok || got != "v" {
		t.Errorf("l/k = %q, %v", got, ok)
	}
	if st := a.Status(); st.State != StateActive {
		t.Errorf("after a lost journal response: %+v, want active", st)
	}
}

// TestJournalWriteWithAnUnknownOutcomeIsNeverTakenForALaterOne checks the
// journal's sequence numbers: a write that landed while every response was
// lost fails its commit (nothing is known), and the next write — with other
// content — is not mistaken for it: it writes over it, and the journal then
// names the later commit's key.
func TestJournalWriteWithAnUnknownOutcomeIsNeverTakenForALaterOne(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	s := memstore.New()
	a := newGuard(t, s, Config{Holder: "A"})
	bind(t, ctx, a, 1)
	var writes atomic.Int32
	var broken atomic.Bool
	broken.Store(true)
	s.SetHook(func(ctx context.Context, ev memstore.Event) error {
		if broken.Load() && ev.Op == memstore.OpGet && strings.Contains(ev.Key, "/intents/") && writes.Load() >= 1 {
			return objstore.ErrUnavailable // reading the journal back fails too: nothing is known
		}
		if !broken.Load() || ev.Op != memstore.OpPut || !strings.Contains(ev.Key, "/intents/") {
			return nil
		}
		if ev.Phase == memstore.PhaseAfter && writes.Add(1) == 1 {
			return objstore.ErrUnavailable // the first attempt lands; its response is lost
		}
		if ev.Phase == memstore.PhaseBefore && writes.Load() >= 1 {
			return objstore.ErrUnavailable // every retry fails before applying
		}
		return nil
	})
	if _, err := gput(ctx, a, "u/first", "1", Version{}); !errors.Is(err, ErrUnverified) {
		t.Fatalf("commit whose journal write has an unknown outcome = %v, want ErrUnverified", err)
	}
	if _, _, ok := read(t, ctx, s, "u/first"); ok {
		t.Fatal("u/first was committed without a known journal write")
	}
	broken.Store(false)
	if _, err := gput(ctx, a, "u/second", "2", Version{}); err != nil {
		t.Fatalf("the next commit: %v", err)
	}
	if !slices.Contains(intentKeys(t, ctx, s, ""), "u/second") {
		t.Errorf("the journal names %v, not u/second: a write with other content was taken for ours", intentKeys(t, ctx, s, ""))
	}
}

// TestReserveWritesSeveralIntentsInOneJournalWrite checks what Reserve is
// for: a rename's copy to the destination and delete of the source, both
// reserved, cost one journal write between them.
func TestReserveWritesSeveralIntentsInOneJournalWrite(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	s, a, src := boundWithSource(t, ctx)
	writes := countJournalWrites(s, 0)
	release := a.Reserve(ctx, Intent{Key: "r/dst"}, Intent{Key: "r/src", Base: VersionOf(src)})
	if _, err := a.Copy(ctx, "r/src", src.ETag, "r/dst", Version{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(ctx, "r/src", VersionOf(src)); err != nil {
		t.Fatal(err)
	}
	release()
	s.SetHook(nil)
	if w := writes.Load(); w != 1 {
		t.Errorf("reserved copy + delete made %d journal writes, want 1", w)
	}
	if got, _, ok := read(t, ctx, s, "r/dst"); !ok || got != "content" {
		t.Errorf("r/dst = %q, %v", got, ok)
	}
}

// TestReservedIntentsAreSweptByANewerBinder checks that a reservation is as
// binding as a commit's own intent: when a newer binder takes over between
// the reservation and the mutations, those mutations are refused (their
// keys were swept), not landed on the strength of the earlier journal
// write.
func TestReservedIntentsAreSweptByANewerBinder(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
		ctx := testCtx(t, 30*time.Second)
		s := newStore()
		a := newGuard(t, staleRegister{s}, Config{Holder: "A"}) // learns nothing from the register
		bind(t, ctx, a, 1)
		src, err := gput(ctx, a, "r/src", "content", Version{})
		if err != nil {
			t.Fatal(err)
		}
		release := reserved(t, ctx, a, Intent{Key: "r/dst"}, Intent{Key: "r/src", Base: VersionOf(src)})
		defer release()
		b := newGuard(t, s, Config{Holder: "B"})
		bind(t, ctx, b, 2)

		_, err = a.Copy(ctx, "r/src", src.ETag, "r/dst", Version{}, nil)
		mustFenced(t, "A's reserved copy after B's takeover", err, "")
		err = a.Delete(ctx, "r/src", VersionOf(src))
		mustFenced(t, "A's reserved delete after B's takeover", err, "")
		// B's sweep found r/dst in A's sealed journal (only the reservation
		// put it there) and closed it with a tombstone.
		if _, info, ok := read(t, ctx, s, "r/dst"); !ok || !isTombstone(info) || info.Meta[MetaEpoch] != "2" {
			t.Errorf("r/dst = exists %v, meta %v; want B's tombstone (epoch 2), not A's copy", ok, info.Meta)
		}
		if got, info, ok := read(t, ctx, s, "r/src"); !ok || got != "content" || info.Meta[MetaEpoch] != "2" {
			t.Errorf("r/src = %q (exists %v, epoch %q), want the content re-stamped by B's sweep", got, ok, info.Meta[MetaEpoch])
		}
	})
}

// TestReserveIsANoOpOutsideStrictMode checks that Reserve writes nothing in
// fast and off modes and leaves the mutations to their own protocol.
func TestReserveIsANoOpOutsideStrictMode(t *testing.T) {
	for _, mode := range []Mode{ModeFast, ModeOff} {
		t.Run(string(mode), func(t *testing.T) {
			ctx := testCtx(t, 20*time.Second)
			s := memstore.New()
			a := newGuard(t, s, Config{Holder: "A", Mode: mode})
			if mode != ModeOff {
				bind(t, ctx, a, 1)
			}
			release := a.Reserve(ctx, Intent{Key: "r/dst"})
			if _, err := gput(ctx, a, "r/dst", "x", Version{}); err != nil {
				t.Fatal(err)
			}
			release()
			if n := countIntents(t, ctx, s); n != 0 {
				t.Errorf("%d intents in %s mode, want 0", n, mode)
			}
		})
	}
}

// reserved is g.Reserve followed by a wait for the journal write it
// started (Reserve does not wait): the intents are then in the journal.
func reserved(t testing.TB, ctx context.Context, g *Guard, intents ...Intent) (release func()) {
	t.Helper()
	release = g.Reserve(ctx, intents...)
	if err := g.intents.syncJournal(ctx); err != nil {
		t.Fatalf("the reservation's journal write: %v", err)
	}
	return release
}

// countJournalWrites counts the writes of intent objects to s from now on
// (until s.SetHook(nil)), holding each one for delay before it applies.
func countJournalWrites(s *memstore.Store, delay time.Duration) *atomic.Int32 {
	var writes atomic.Int32
	s.SetHook(func(ctx context.Context, ev memstore.Event) error {
		if ev.Op == memstore.OpPut && ev.Phase == memstore.PhaseBefore && strings.Contains(ev.Key, "/intents/") {
			writes.Add(1)
			time.Sleep(delay)
		}
		return nil
	})
	return &writes
}
