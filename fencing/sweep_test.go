package fencing

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
)

// sweepFixture leaves epoch 1's intents on 8 keys (half existing, half
// absent), as a leader that died mid-writes would, and returns the keys
// and every base the intents name.
func sweepFixture(t *testing.T, ctx context.Context, s objstore.Store) ([]string, map[string]string) {
	t.Helper()
	a := newGuard(t, s, Config{Holder: "A"})
	bind(t, ctx, a, 1)
	a.mu.Lock()
	ts := tokenState{mode: ModeStrict, token: a.token, claim: a.claim}
	a.mu.Unlock()
	var keys []string
	bases := map[string]string{}
	for i := 0; i < 8; i++ {
		key := fmt.Sprintf("s/k%d", i)
		keys = append(keys, key)
		base := ""
		if i%2 == 0 {
			body := strings.Repeat(fmt.Sprintf("content %d ", i), 10)
			base = objstore.NormalizeETag(rawPut(t, ctx, s, key, body).ETag)
		}
		bases[key] = base
		// The intent of a write that never settles (the leader died).
		if _, err := a.intents.ensure(ctx, ts, key, base); err != nil {
			t.Fatal(err)
		}
	}
	return keys, bases
}

// keyState is what matters of a key after a sweep.
type keyState struct {
	Exists, Tombstone bool
	Content           string
}

func sweepOutcome(t *testing.T, ctx context.Context, s objstore.Store, keys []string, bases map[string]string) map[string]keyState {
	t.Helper()
	out := map[string]keyState{}
	for _, k := range keys {
		c, info, ok := read(t, ctx, s, k)
		st := keyState{Exists: ok, Tombstone: ok && IsTombstone(info)}
		if !st.Tombstone {
			st.Content = c
		}
		if ok && bases[k] != "" && objstore.NormalizeETag(info.ETag) == bases[k] {
			t.Errorf("%s still has the ETag %s an old writer holds", k, bases[k])
		}
		if !ok {
			t.Errorf("%s is absent after the sweep: an old create could land", k)
		}
		out[k] = st
	}
	if left := intentKeys(t, ctx, s, ""); len(left) != 0 {
		t.Errorf("intents left after a completed sweep: %v", left)
	}
	return out
}

func TestInterruptedSweepResumedEndsInTheSameState(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
		ctx := testCtx(t, 60*time.Second)

		// Reference: one uninterrupted sweep.
		ref := newStore()
		keys, refBases := sweepFixture(t, ctx, ref)
		bind(t, ctx, newGuard(t, ref, Config{Holder: "D"}), 2)
		want := sweepOutcome(t, ctx, ref, keys, refBases)

		for _, resumer := range []string{"newer epoch", "same binder"} {
			t.Run(resumer, func(t *testing.T) {
				s := newStore()
				keys, bases := sweepFixture(t, ctx, s)
				crash := errors.New("simulated crash mid-sweep")
				// Keys 0-3 are swept, then the sweeper "crashes" on 4-7.
				hook := func(ctx context.Context, key string) error {
					var i int
					fmt.Sscanf(key, "s/k%d", &i)
					if i < 4 {
						return nil
					}
					for j := 0; j < 4; j++ {
						for {
							info, err := s.Stat(ctx, keys[j])
							if err == nil && info.Meta[MetaEpoch] == "2" {
								break
							}
							select {
							case <-ctx.Done():
								return ctx.Err()
							case <-time.After(time.Millisecond):
							}
						}
					}
					return crash
				}
				b := newGuard(t, s, Config{Holder: "B", Hooks: Hooks{BeforeSweepKey: hook}})
				if _, err := b.Bind(ctx, 2); !errors.Is(err, crash) {
					t.Fatalf("interrupted Bind = %v, want the crash", err)
				}
				if st := b.Status(); st.State != StateSweeping || !strings.Contains(st.Reason, "sweep failed") {
					t.Errorf("after a failed sweep: %+v", st)
				}
				if _, err := gput(ctx, b, "other", "x", Version{}); !errors.Is(err, ErrUnverified) {
					t.Errorf("a mutation before the sweep completed = %v, want ErrUnverified", err)
				}
				swept := 0
				for _, k := range keys {
					if info, err := s.Stat(ctx, k); err == nil && info.Meta[MetaEpoch] == "2" {
						swept++
					}
				}
				if swept != 4 {
					t.Fatalf("%d keys swept before the crash, want 4", swept)
				}
				switch resumer {
				case "newer epoch":
					bind(t, ctx, newGuard(t, s, Config{Holder: "C"}), 3)
				case "same binder":
					b.cfg.Hooks = Hooks{}
					if got := bind(t, ctx, b, 2); got != 2 {
						t.Fatalf("re-bind got %d", got)
					}
				}
				got := sweepOutcome(t, ctx, s, keys, bases)
				for _, k := range keys {
					if got[k] != want[k] {
						t.Errorf("%s: %+v after the resumed sweep, %+v after an uninterrupted one", k, got[k], want[k])
					}
				}
			})
		}
	})
}

func TestSweepRewritesMultipartAndLargeObjects(t *testing.T) {
	// A one-part multipart object can only become plain, which needs its
	// content; a large one gets another part count server-side.
	eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
		ctx := testCtx(t, 60*time.Second)
		s := newStore()
		a := newGuard(t, s, Config{Holder: "A"})
		bind(t, ctx, a, 1)
		small := strings.Repeat("s", 1000)
		big := strings.Repeat("b", 6<<20) // two parts are possible above 5 MiB
		one, err := s.Put(ctx, "mp/one", strings.NewReader(small), int64(len(small)), objstore.PutOptions{Shape: objstore.ShapeMultipart, Parts: 1})
		if err != nil {
			t.Fatal(err)
		}
		large, err := s.Put(ctx, "mp/large", strings.NewReader(big), int64(len(big)), objstore.PutOptions{Shape: objstore.ShapeMultipart, Parts: 1})
		if err != nil {
			t.Fatal(err)
		}
		a.mu.Lock()
		ts := tokenState{mode: ModeStrict, token: a.token, claim: a.claim}
		a.mu.Unlock()
		plainOfSmall, _ := objstore.ETagOf(strings.NewReader(small), int64(len(small)), nil)
		// The intents name the current ETags and, for the small object, a
		// plain base too: the rewrite must avoid both forms.
		for key, b := range map[string][]string{"mp/one": {one.ETag, "0123456789abcdef0123456789abcdef"}, "mp/large": {large.ETag}} {
			for _, base := range b {
				if _, err := a.intents.ensure(ctx, ts, key, objstore.NormalizeETag(base)); err != nil {
					t.Fatal(err)
				}
			}
		}
		bind(t, ctx, newGuard(t, s, Config{Holder: "B"}), 2)
		for key, want := range map[string]string{"mp/one": small, "mp/large": big} {
			got, info, _ := read(t, ctx, s, key)
			if got != want {
				t.Fatalf("%s content changed by the sweep", key)
			}
			rec := parseRecord(info.Meta[MetaSwept])
			for _, e := range rec {
				if e.ETag == objstore.NormalizeETag(info.ETag) {
					t.Errorf("%s: ETag %s is in its own record", key, info.ETag)
				}
			}
			if key == "mp/one" && objstore.NormalizeETag(info.ETag) != plainOfSmall {
				t.Errorf("mp/one swept to %s, want the plain %s (the only fresh shape)", info.ETag, plainOfSmall)
			}
			if key == "mp/large" {
				if n, ok := objstore.IsMultipartETag(info.ETag); !ok || n < 2 {
					t.Errorf("mp/large swept to %s, want another part count", info.ETag)
				}
			}
		}
	})
}

func TestTombstoneDeletesOnBackendsIgnoringDeleteConditions(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	s := memstore.NewWithOptions(memstore.Options{IgnoreDeleteConditions: true})
	p := newPauser("t/f")
	a := newGuard(t, s, Config{Holder: "A", TombstoneDeletes: true, Hooks: Hooks{AfterValidate: p.hook}})
	p.armed.Store(false)
	bind(t, ctx, a, 1)
	info, err := gput(ctx, a, "t/f", "A", Version{})
	if err != nil {
		t.Fatal(err)
	}
	p.armed.Store(true)
	aErr := make(chan error, 1)
	go func() { aErr <- a.Delete(ctx, "t/f", VersionOf(info)) }()
	p.wait(t, ctx)
	b := newGuard(t, s, Config{Holder: "B", TombstoneDeletes: true})
	bind(t, ctx, b, 2)
	_, cur, _ := read(t, ctx, s, "t/f")
	if _, err := gput(ctx, b, "t/f", "B", VersionOf(cur)); err != nil {
		t.Fatal(err)
	}
	close(p.release)
	mustFenced(t, "A's delayed delete", <-aErr, "")
	if got, _, ok := read(t, ctx, s, "t/f"); !ok || got != "B" {
		t.Fatalf("A's delete removed B's file: %q %v", got, ok)
	}
	// B's own delete is a tombstone: hidden, recognisable, stamped.
	_, cur, _ = read(t, ctx, s, "t/f")
	if err := b.Delete(ctx, "t/f", VersionOf(cur)); err != nil {
		t.Fatal(err)
	}
	_, tomb, ok := read(t, ctx, s, "t/f")
	if !ok || !IsTombstone(tomb) || tomb.Meta[MetaEpoch] != "2" || tomb.Size != TombstoneSize {
		t.Fatalf("delete left %+v", tomb)
	}
	// Creating over it works with the tombstone as base, and also when the
	// caller saw "absent" (a listing hides tombstones).
	if _, err := gput(ctx, b, "t/f", "again", VersionOf(tomb)); err != nil {
		t.Fatalf("create over a tombstone: %v", err)
	}
	_, cur, _ = read(t, ctx, s, "t/f")
	if err := b.Delete(ctx, "t/f", VersionOf(cur)); err != nil {
		t.Fatal(err)
	}
	if _, err := gput(ctx, b, "t/f", "third", Version{}); err != nil {
		t.Fatalf("create where a tombstone hides: %v", err)
	}
	if got, _, _ := read(t, ctx, s, "t/f"); got != "third" {
		t.Errorf("got %q", got)
	}
	// Deleting an already deleted key (someone else's tombstone) succeeds.
	_, cur, _ = read(t, ctx, s, "t/f")
	if err := b.Delete(ctx, "t/f", VersionOf(cur)); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, "t/f", VersionOf(cur)); err != nil {
		t.Errorf("deleting a deleted key = %v, want success", err)
	}
}

func TestGCRemovesOnlyGarbage(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
		ctx := testCtx(t, 30*time.Second)
		s := newStore()
		keys, _ := sweepFixture(t, ctx, s) // epoch 1 intents, never settled
		// Epoch 2's sweep fails half-way: nothing of epoch 1 is garbage yet.
		b := newGuard(t, s, Config{Holder: "B", Hooks: Hooks{BeforeSweepKey: func(context.Context, string) error { return errors.New("crash") }}})
		if _, err := b.Bind(ctx, 2); err == nil {
			t.Fatal("the crash hook did not fire")
		}
		countIntents := func() int {
			n := 0
			_ = s.List(ctx, newLayout("").intentsPrefix(), "", func(objstore.Entry) error { n++; return nil })
			return n
		}
		before := countIntents()
		res, err := GC(ctx, s, GCOptions{})
		if err != nil || res.Intents != 0 || countIntents() != before {
			t.Fatalf("gc removed intents no completed sweep covers: %+v %v", res, err)
		}
		// Epoch 3 completes; a late intent of epoch 1 appears after its listing.
		c := newGuard(t, s, Config{Holder: "C"})
		bind(t, ctx, c, 3)
		late := newLayout("").intent(1, "late")
		rawPut(t, ctx, s, late, `{"format":1,"epoch":1,"keys":[{"key":"s/k0","bases":[""]}]}`)
		// A live intent of epoch 3 (a write in progress) must stay.
		release := reserved(t, ctx, c, Intent{Key: "s/k1"})
		defer release()
		var reported []GCItem
		dry, err := GC(ctx, s, GCOptions{DryRun: true, Report: func(it GCItem) { reported = append(reported, it) }})
		if err != nil || dry.Intents != 1 || len(reported) != 1 || reported[0].Key != late {
			t.Fatalf("dry run: %+v %v %+v", dry, err, reported)
		}
		if _, err := s.Stat(ctx, late); err != nil {
			t.Fatalf("dry run removed %s", late)
		}
		if res, err := GC(ctx, s, GCOptions{}); err != nil || res.Intents != 1 {
			t.Fatalf("gc: %+v %v", res, err)
		}
		if _, err := s.Stat(ctx, late); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("the stale intent is still there: %v", err)
		}

		// Tombstones: the sweep's tombstones carry a young record and stay;
		// with a clock past the validity they go.
		var tombs []string
		for _, k := range keys {
			if info, err := s.Stat(ctx, k); err == nil && IsTombstone(info) {
				tombs = append(tombs, k)
			}
		}
		if len(tombs) != 4 {
			t.Fatalf("tombstones after the sweep: %v", tombs)
		}
		res, err = GC(ctx, s, GCOptions{TombstonesBefore: time.Now().Add(time.Hour)})
		if err != nil || res.Tombstones != 0 {
			t.Fatalf("gc removed young tombstones: %+v %v", res, err)
		}
		later := func() time.Time { return time.Now().Add(time.Hour) }
		res, err = GC(ctx, s, GCOptions{TombstonesBefore: later(), Now: later})
		if err != nil || res.Tombstones != 4 {
			t.Fatalf("gc of old tombstones: %+v %v", res, err)
		}
		for _, k := range tombs {
			if _, err := s.Stat(ctx, k); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("%s: %v", k, err)
			}
		}
		// The register and reservations are never touched.
		reg, recent, err := ReadRegister(ctx, s, "")
		if err != nil || reg.Epoch != 3 {
			t.Errorf("register after gc: %+v %v", reg, err)
		}
		sort.Slice(recent, func(i, j int) bool { return recent[i] < recent[j] })
		if !equalU64(recent, []uint64{1, 2, 3}) {
			t.Errorf("reservations after gc: %v", recent)
		}
	})
}
