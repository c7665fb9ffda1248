package fencing

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
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
				// A silent owner is one frozen in the middle of a commit
				// (of another key, held at the pauser): it cannot release
				// while that commit is in flight, whatever it learns.
				p := newPauser("rel/held")
				a := newGuard(t, s, Config{Holder: "A", IntentLinger: time.Hour, Hooks: Hooks{AfterValidate: p.hook}})
				bind(t, ctx, a, 1)
				info, err := gput(ctx, a, "rel/k", "v1", Version{}) // its entry: (k, absent)
				if err != nil {
					t.Fatal(err)
				}
				held := make(chan error, 1)
				if tc.aWrites {
					close(p.release)
					held <- nil
				} else {
					go func() { _, err := gput(ctx, a, "rel/held", "x", Version{}); held <- err }()
					p.wait(t, ctx)
					defer func() { close(p.release); <-held }()
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

// TestALostCommitOnAKeyANewerEpochWroteIsFenced: A's commit of k loses its
// response (the store cannot say whether it was applied) while epoch 2
// takes over and writes k. A is fenced (ErrFenced, EROFS at the mount),
// not in doubt (EIO): the lost attempt can land only if A's base comes
// back, which epoch 2's record prevents for as long as A's journal keeps
// the entry — and it does, as an orphan that no release drops.
func TestALostCommitOnAKeyANewerEpochWroteIsFenced(t *testing.T) {
	a, _, _, err := lostCommit(t, memstore.PhaseBefore, true, objstore.ErrUnavailable)
	mustFenced(t, "A's commit whose response was lost after epoch 2 wrote the key", err, "")
	a.intents.mu.Lock()
	orphan := a.intents.jr != nil && a.intents.jr.orphans["lost/k"] != nil
	a.intents.mu.Unlock()
	if !orphan {
		t.Error("A's journal no longer names the lost commit's base: a release would drop it")
	}
}

// lostCommit runs A's commit of "A's commit" to lost/k (A bound to epoch 1,
// k at v1) whose answer is lost with loss: before the PUT is applied
// (PhaseBefore) or after (PhaseAfter). At that moment B binds epoch 2 (its
// sweep re-stamps k) and, with overwrite, writes "B's" over k. It returns
// A, the store, and A's result.
func lostCommit(t *testing.T, phase memstore.Phase, overwrite bool, loss error) (*Guard, *memstore.Store, objstore.ObjectInfo, error) {
	t.Helper()
	return lostCommitOver(t, phase, overwrite, loss, nil)
}

// lostCommitOver is lostCommit with k's v1 carrying the ETag-ABA record
// seed (nil: none).
func lostCommitOver(t *testing.T, phase memstore.Phase, overwrite bool, loss error, seed record) (*Guard, *memstore.Store, objstore.ObjectInfo, error) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	s := memstore.New()
	a := newGuard(t, s, Config{Holder: "A"})
	bind(t, ctx, a, 1)
	base, err := gput(ctx, a, "lost/k", "v1", Version{})
	if err != nil {
		t.Fatal(err)
	}
	if seed != nil {
		meta := maps.Clone(base.Meta)
		meta[MetaSwept] = seed.String()
		r, n := body("v1")
		if base, err = s.Put(ctx, "lost/k", r, n, objstore.PutOptions{Meta: meta, Cond: objstore.Condition{IfMatch: base.ETag}}); err != nil {
			t.Fatal(err)
		}
	}
	b := newGuard(t, s, Config{Holder: "B", ReleaseGrace: -1})
	var once sync.Once
	s.SetHook(func(hctx context.Context, ev memstore.Event) error {
		if ev.Phase != phase || ev.Op != memstore.OpPut || ev.Key != "lost/k" || ev.Err != nil || hctx.Value(holderKey{}) != "A" {
			return nil
		}
		var hookErr error
		once.Do(func() {
			bind(t, ctx, b, 2)
			if overwrite {
				if _, err := gput(ctx, b, "lost/k", "B's", VersionOf(readInfo(t, ctx, s, "lost/k"))); err != nil {
					t.Errorf("B's write: %v", err)
				}
			}
			hookErr = fmt.Errorf("%w: the answer was lost (test)", loss)
		})
		return hookErr
	})
	info, err := gput(context.WithValue(ctx, holderKey{}, "A"), a, "lost/k", "A's commit", VersionOf(base))
	return a, s, info, err
}

type holderKey struct{}

func readInfo(t *testing.T, ctx context.Context, s objstore.Store, key string) objstore.ObjectInfo {
	t.Helper()
	_, info, _ := read(t, ctx, s, key)
	return info
}

// TestACommitThatLandedBeforeANewerEpochsSweepIsFoundInTheSpilledRecord:
// as below (the rewrite overwritten since: unknown), on a key whose record
// already holds as many entries as metadata can, all younger than the
// sweep's: the entry naming A's write id is kept only in the record's
// spill, and the resolution must read it there (not answer fenced).
func TestACommitThatLandedBeforeANewerEpochsSweepIsFoundInTheSpilledRecord(t *testing.T) {
	var seed record
	for i := range maxRecordEntries - 1 {
		seed = seed.add(fmt.Sprintf("%032x", i+1), time.Now().Add(time.Minute))
	}
	_, s, _, err := lostCommitOver(t, memstore.PhaseAfter, true, objstore.ErrPrecondition, seed)
	ctx := testCtx(t, 10*time.Second)
	_, cur, _ := read(t, ctx, s, "lost/k")
	rec := parseRecord(cur.Meta[MetaSwept])
	if _, ok := rec.marker(); !ok {
		t.Fatalf("the key's record did not spill: %v", cur.Meta[MetaSwept])
	}
	if WriteIDOfUnknown(err) == "" || errors.Is(err, ErrFenced) {
		t.Fatalf("A's commit that landed and was replaced, recorded in the spill: %v; want an unknown outcome, not fenced", err)
	}
}

// TestACommitThatLandedBeforeANewerEpochsSweep: A's commit of k lands but
// its answer is lost (the retry's 412, or a reset) while epoch 2 binds and
// its takeover sweep rewrites k — A's content under a fresh ETag. While k
// is that rewrite, A's commit is stored (it returns the rewrite); once
// epoch 2 has overwritten it too, A's commit landed and its version is
// gone: an unknown outcome (EIO). Never a refusal (EROFS would say it
// never landed, and readers saw it).
func TestACommitThatLandedBeforeANewerEpochsSweep(t *testing.T) {
	for _, tc := range []struct {
		name      string
		loss      error
		overwrite bool // epoch 2 writes k after its sweep, before A's retry
	}{
		{"answer lost to a 412, the key still the sweep's rewrite: stored", objstore.ErrPrecondition, false},
		{"answer lost to a reset, the key still the sweep's rewrite: stored", objstore.ErrUnavailable, false},
		{"answer lost, the rewrite overwritten since: unknown", objstore.ErrPrecondition, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, s, info, err := lostCommit(t, memstore.PhaseAfter, tc.overwrite, tc.loss)
			ctx := testCtx(t, 10*time.Second)
			got, cur, _ := read(t, ctx, s, "lost/k")
			if tc.overwrite {
				if WriteIDOfUnknown(err) == "" || errors.Is(err, ErrFenced) {
					t.Fatalf("A's commit that landed and was replaced: %v; want an unknown outcome, not fenced", err)
				}
				if got != "B's" {
					t.Fatalf("the key holds %q, want B's write", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("A's commit that landed before the sweep: %v", err)
			}
			if got != "A's commit" || cur.Meta[MetaSweptFrom] == "" {
				t.Fatalf("the key holds %q %v: not the sweep's rewrite of A's commit", got, cur.Meta)
			}
			if info.ETag != cur.ETag {
				t.Errorf("A's commit returned version %s, the key holds %s", info.ETag, cur.ETag)
			}
		})
	}
}
