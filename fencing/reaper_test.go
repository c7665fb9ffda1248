package fencing

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeClock is a settable clock for Config.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

const testValidity = 10 * time.Minute

// manualReaper keeps g's background loop from starting, so that the test
// runs every round itself (call before Bind).
func manualReaper(g *Guard) *Guard {
	g.tombs.once.Do(func() {})
	return g
}

// knownTombstones returns the tombstones g tracks, sorted by key.
func (g *Guard) knownTombstones() []tombEntry {
	r := g.tombs
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]tombEntry, 0, len(r.known))
	for _, e := range r.known {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// crashedCreates leaves epoch 1's intents for creates of n absent keys
// t/f0 … (a mount killed with files open), abandons that Guard, and returns
// the keys.
func crashedCreates(t *testing.T, ctx context.Context, s objstore.Store, n int) []string {
	t.Helper()
	a, err := New(s, Config{Holder: "A", IntentLinger: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	bind(t, ctx, a, 1)
	a.mu.Lock()
	ts := tokenState{mode: ModeStrict, token: a.token, claim: a.claim}
	a.mu.Unlock()
	var keys []string
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("t/f%d", i)
		if _, err := a.intents.ensure(ctx, ts, key, ""); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	a.cancel() // killed: no Close
	return keys
}

// tombstonesAt reports which of keys hold a tombstone in s.
func tombstonesAt(t *testing.T, ctx context.Context, s objstore.Store, keys []string) []string {
	t.Helper()
	var out []string
	for _, k := range keys {
		if _, info, ok := read(t, ctx, s, k); ok && IsTombstone(info) {
			out = append(out, k)
		}
	}
	return out
}

func ledgers(t *testing.T, ctx context.Context, s objstore.Store) []string {
	t.Helper()
	var out []string
	if err := s.List(ctx, newLayout("").ledgersPrefix(), "", func(e objstore.Entry) error {
		out = append(out, strings.TrimPrefix(e.Key, newLayout("").ledgersPrefix()))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReaperRemovesSweepTombstonesAfterTheValidityAndNeverBefore restarts
// a killed mount with the same holder and token: its sweep tombstones the
// five creates the dead instance had in flight, and the reaper removes
// them once they are SignedRequestValidity old, not a second earlier; the
// gauges follow.
func TestReaperRemovesSweepTombstonesAfterTheValidityAndNeverBefore(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	s := memstore.New()
	keys := crashedCreates(t, ctx, s, 5)
	clk := newFakeClock()
	reg := prometheus.NewRegistry()
	b := manualReaper(newGuard(t, s, Config{Holder: "A", SignedRequestValidity: testValidity, Now: clk.Now, Registerer: reg}))
	bind(t, ctx, b, 1)
	if got := tombstonesAt(t, ctx, s, keys); len(got) != 5 {
		t.Fatalf("the sweep left tombstones at %v, want all of %v", got, keys)
	}
	gauge := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				m := mf.GetMetric()[0]
				return m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	for _, step := range []struct {
		advance  time.Duration
		want     int
		wantAge  float64
		wantLeft int // ledgers in the bucket
	}{
		{0, 5, 0, 1},
		{testValidity - time.Second, 5, (testValidity - time.Second).Seconds(), 1},
		{time.Second, 0, 0, 0},
	} {
		clk.Add(step.advance)
		b.tombs.reapOnce(ctx)
		if got := tombstonesAt(t, ctx, s, keys); len(got) != step.want {
			t.Fatalf("after %v: tombstones at %v, want %d", step.advance, got, step.want)
		}
		if n := gauge("fencefs_fencing_tombstones"); n != float64(step.want) {
			t.Errorf("after %v: fencefs_fencing_tombstones = %v, want %d", step.advance, n, step.want)
		}
		if age := gauge("fencefs_fencing_tombstone_oldest_age_seconds"); age != step.wantAge {
			t.Errorf("after %v: oldest age = %v, want %v", step.advance, age, step.wantAge)
		}
		if l := ledgers(t, ctx, s); len(l) != step.wantLeft {
			t.Errorf("after %v: ledgers %v, want %d", step.advance, l, step.wantLeft)
		}
	}
	if n := gauge("fencefs_fencing_tombstones_removed_total"); n != 5 {
		t.Errorf("fencefs_fencing_tombstones_removed_total = %v, want 5", n)
	}
}

// TestReaperNeverDeletesAKeyWrittenAfterItsTombstone writes the key over
// the tombstone (by this mount, or by a plain S3 client) before it is due:
// the reaper leaves the new object alone, on a store with conditional
// DELETE (If-Match on the tombstone's ETag) and, with ReapAlways, on one
// whose DELETE ignores conditions (HEAD first). With ReapAuto on such a
// store tombstones are not removed at all.
func TestReaperNeverDeletesAKeyWrittenAfterItsTombstone(t *testing.T) {
	for _, tc := range []struct {
		name          string
		ignoreDelCond bool
		reap          Reap
		wantReaped    bool // the untouched tombstones go
	}{
		{"conditional DELETE, auto", false, ReapAuto, true},
		{"DELETE ignores If-Match, always", true, ReapAlways, true},
		{"DELETE ignores If-Match, auto keeps tombstones", true, ReapAuto, false},
		{"reaping off", false, ReapOff, false},
	} {
		stores := map[string]func(t *testing.T) objstore.Store{
			"memstore": func(*testing.T) objstore.Store {
				return memstore.NewWithOptions(memstore.Options{IgnoreDeleteConditions: tc.ignoreDelCond})
			},
		}
		if !tc.ignoreDelCond {
			// The real gateway's answer to DELETE If-Match on a key
			// written again is what makes the removal exact.
			stores["gateway"] = func(t *testing.T) objstore.Store {
				gw := gateway.ForTest(t)
				return gatewayStore(t, gw, gateway.NewBucket(t, gw))
			}
		}
		for storeName, newStore := range stores {
			t.Run(tc.name+"/"+storeName, func(t *testing.T) {
				ctx := testCtx(t, time.Minute)
				s := newStore(t)
				keys := crashedCreates(t, ctx, s, 3)
				clk := newFakeClock()
				b := manualReaper(newGuard(t, s, Config{Holder: "A", SignedRequestValidity: testValidity, Now: clk.Now,
					TombstoneDeletes: tc.ignoreDelCond, ReapTombstones: tc.reap}))
				bind(t, ctx, b, 1)
				// t/f0 is created again through the Guard, t/f1 by a plain
				// client over the tombstone; t/f2 stays deleted.
				_, info, _ := read(t, ctx, s, keys[0])
				if _, err := gput(ctx, b, keys[0], "mine", VersionOf(info)); err != nil {
					t.Fatal(err)
				}
				if known := b.knownTombstones(); len(known) != 2 {
					t.Errorf("known after the create over t/f0: %+v, want t/f1 and t/f2", known)
				}
				rawPut(t, ctx, s, keys[1], "someone else's")
				clk.Add(testValidity + time.Second)
				b.tombs.reapOnce(ctx)
				for k, want := range map[string]string{keys[0]: "mine", keys[1]: "someone else's"} {
					if c, info, ok := read(t, ctx, s, k); !ok || IsTombstone(info) || c != want {
						t.Errorf("%s = %q (exists %v): the reaper touched a key written after its tombstone", k, c, ok)
					}
				}
				if got := tombstonesAt(t, ctx, s, keys[2:]); (len(got) == 0) != tc.wantReaped {
					t.Errorf("tombstone at %s left: %v, want removed %v", keys[2], got, tc.wantReaped)
				}
			})
		}
	}
}

// TestReaperAdoptsTheLedgerOfAKilledMount: a mount whose sweep wrote
// tombstones is killed before they are due; the next mount (a newer
// epoch, nothing to sweep) finds them through the dead mount's ledger and
// removes them when due.
func TestReaperAdoptsTheLedgerOfAKilledMount(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	s := memstore.New()
	keys := crashedCreates(t, ctx, s, 4)
	clk := newFakeClock()
	cfg := Config{Holder: "B", SignedRequestValidity: testValidity, Now: clk.Now, IntentLinger: time.Hour}
	b, err := New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	manualReaper(b)
	bind(t, ctx, b, 2)
	b.tombs.reapOnce(ctx) // writes its ledger
	b.cancel()            // killed
	if l := ledgers(t, ctx, s); len(l) != 1 {
		t.Fatalf("ledgers after B's sweep: %v, want one", l)
	}

	clk.Add(time.Minute)
	cfg.Holder = "C"
	c := manualReaper(newGuard(t, s, cfg))
	bind(t, ctx, c, 3)
	c.tombs.reapOnce(ctx)
	if got := c.knownTombstones(); len(got) != 4 {
		t.Fatalf("C knows %d tombstones (%v), want B's 4", len(got), got)
	}
	if l := ledgers(t, ctx, s); len(l) != 1 || !strings.HasPrefix(l[0], epochName(3)+"-") {
		t.Fatalf("ledgers after adoption: %v, want only C's", l)
	}
	clk.Add(testValidity - time.Minute - time.Second)
	c.tombs.reapOnce(ctx)
	if got := tombstonesAt(t, ctx, s, keys); len(got) != 4 {
		t.Fatalf("before due: tombstones at %v, want all 4", got)
	}
	clk.Add(time.Second)
	c.tombs.reapOnce(ctx)
	if got := tombstonesAt(t, ctx, s, keys); len(got) != 0 {
		t.Fatalf("after due: tombstones left at %v", got)
	}
	if l := ledgers(t, ctx, s); len(l) != 0 {
		t.Fatalf("ledgers left: %v", l)
	}
}

// TestReaperDoesNothingUnlessActiveOrWhileItsKeyIsBusy: a fenced Guard
// removes nothing; on a store whose DELETE ignores conditions the reaper
// leaves a tombstone alone while this Guard has a mutation of the key in
// flight.
func TestReaperDoesNothingUnlessActiveOrWhileItsKeyIsBusy(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	s := memstore.NewWithOptions(memstore.Options{IgnoreDeleteConditions: true})
	keys := crashedCreates(t, ctx, s, 2)
	clk := newFakeClock()
	cfg := Config{Holder: "B", SignedRequestValidity: testValidity, Now: clk.Now, TombstoneDeletes: true, ReapTombstones: ReapAlways}
	b := manualReaper(newGuard(t, s, cfg))
	bind(t, ctx, b, 2)
	b.mu.Lock()
	b.busy[keys[0]]++ // a create of t/f0 in flight
	b.mu.Unlock()
	clk.Add(testValidity)
	b.tombs.reapOnce(ctx)
	if got := tombstonesAt(t, ctx, s, keys); len(got) != 1 || got[0] != keys[0] {
		t.Fatalf("tombstones at %v, want only the busy %s", got, keys[0])
	}
	b.mu.Lock()
	b.busy[keys[0]]--
	b.mu.Unlock()

	cfg.Holder = "C"
	cfg.ReapTombstones = ReapOff // C must not remove it either
	c := manualReaper(newGuard(t, s, cfg))
	bind(t, ctx, c, 3)
	if got := tombstonesAt(t, ctx, s, keys); len(got) != 1 {
		t.Fatalf("after C's bind: left %v", got)
	}
	if _, err := gput(ctx, b, "t/x", "x", Version{}); err == nil {
		t.Fatal("B is not fenced")
	}
	b.tombs.reapOnce(ctx)
	if got := tombstonesAt(t, ctx, s, keys); len(got) != 1 {
		t.Fatalf("a fenced Guard removed tombstones: left %v", got)
	}
}

// TestReaperRemovesTombstonesOfDeletesAfterTheirRecordExpires: on a store
// whose DELETE ignores If-Match every unlink writes a tombstone; with
// ReapAlways they go once due, and a tombstone carrying a younger ETag-ABA
// record stays until the record expires too.
func TestReaperRemovesTombstonesOfDeletesAfterTheirRecordExpires(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	s := memstore.NewWithOptions(memstore.Options{IgnoreDeleteConditions: true})
	clk := newFakeClock()
	g := manualReaper(newGuard(t, s, Config{Holder: "A", SignedRequestValidity: testValidity, Now: clk.Now,
		TombstoneDeletes: true, ReapTombstones: ReapAlways}))
	bind(t, ctx, g, 1)
	info := rawPut(t, ctx, s, "plain", "x")
	if err := g.Delete(ctx, "plain", VersionOf(info)); err != nil {
		t.Fatal(err)
	}
	// A record entry younger than the delete (another host's clock ahead).
	rec := record{}.add("abc", clk.Now().Add(5*time.Minute))
	g.tombs.note("recorded", "etag-of-recorded", rec)
	got := g.knownTombstones()
	if len(got) != 2 || got[0].Key != "plain" || !got[0].Due.Equal(clk.Now().Add(testValidity)) ||
		!got[1].Due.Equal(rec[0].At.Add(testValidity)) {
		t.Fatalf("known tombstones %+v", got)
	}
	clk.Add(testValidity)
	g.tombs.reapOnce(ctx)
	if _, _, ok := read(t, ctx, s, "plain"); ok {
		t.Fatal("the delete's tombstone is still there once due")
	}
	if got := g.knownTombstones(); len(got) != 1 || got[0].Key != "recorded" {
		t.Fatalf("known after the first due time: %+v, want only the recorded one", got)
	}
}

// TestReaperLoopRemovesTombstonesByItself: with the real clock and a short
// validity, the background loop removes the sweep's tombstones without
// being asked, and stops at Close.
func TestReaperLoopRemovesTombstonesByItself(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	s := memstore.New()
	keys := crashedCreates(t, ctx, s, 3)
	b := newGuard(t, s, Config{Holder: "A", SignedRequestValidity: 300 * time.Millisecond})
	bind(t, ctx, b, 1)
	deadline := time.Now().Add(20 * time.Second)
	for len(tombstonesAt(t, ctx, s, keys)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("tombstones still at %v 20 s after binding", tombstonesAt(t, ctx, s, keys))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.tombs.done:
	default:
		t.Fatal("the reaper loop runs on after Close")
	}
}
