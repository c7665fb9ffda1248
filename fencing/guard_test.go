package fencing

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// opCounter counts a memstore's writes by kind and key prefix.
type opCounter struct {
	mu   sync.Mutex
	puts map[string]int
}

func countPuts(s *memstore.Store) *opCounter {
	c := &opCounter{puts: map[string]int{}}
	s.SetHook(func(ctx context.Context, ev memstore.Event) error {
		if ev.Phase == memstore.PhaseAfter && ev.Op == memstore.OpPut && ev.Err == nil {
			kind := "data"
			if strings.Contains(ev.Key, ".fencefs/intents/") {
				kind = "intent"
			}
			c.mu.Lock()
			c.puts[kind]++
			c.mu.Unlock()
		}
		return nil
	})
	return c
}

func (c *opCounter) get(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.puts[kind]
}

func TestSettledIntentsAreDeletedAndCloseCleansUp(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	s := memstore.New()
	g := newGuard(t, s, Config{Holder: "A", IntentLinger: time.Millisecond})
	bind(t, ctx, g, 1)
	if _, err := gput(ctx, g, "i/a", "x", Version{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, func() bool { return countIntents(t, ctx, s) == 0 })

	h := newGuard(t, s, Config{Holder: "B"}) // linger 1h
	bind(t, ctx, h, 2)
	if _, err := gput(ctx, h, "i/b", "x", Version{}); err != nil {
		t.Fatal(err)
	}
	if countIntents(t, ctx, s) != 1 {
		t.Fatal("the lingering intent is gone early")
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countIntents(t, ctx, s); n != 0 {
		t.Errorf("%d intents after Close", n)
	}
	if _, err := gput(ctx, h, "i/c", "x", Version{}); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Put after Close = %v", err)
	}

	// An unknown outcome leaves its intent for the next sweep.
	u := newGuard(t, s, Config{Holder: "C", IntentLinger: time.Millisecond})
	bind(t, ctx, u, 3)
	s.SetHook(func(ctx context.Context, ev memstore.Event) error {
		if ev.Key == "i/u" && (ev.Op == memstore.OpPut || ev.Op == memstore.OpStat) {
			return objstore.ErrUnavailable
		}
		return nil
	})
	_, err := gput(ctx, u, "i/u", "x", Version{})
	if !errors.Is(err, objstore.ErrUnavailable) || !strings.Contains(err.Error(), "outcome unknown") {
		t.Fatalf("Put through an unavailable store = %v", err)
	}
	s.SetHook(nil)
	if err := u.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countIntents(t, ctx, s); n != 1 {
		t.Errorf("%d intents left after an unknown outcome, want 1 (for the next sweep)", n)
	}
}

func TestMutationsWaitForTheSweep(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	s := memstore.New()
	a := newGuard(t, s, Config{Holder: "A"})
	bind(t, ctx, a, 1)
	a.mu.Lock()
	ts := tokenState{mode: ModeStrict, token: a.token, claim: a.claim}
	a.mu.Unlock()
	if _, err := a.intents.ensure(ctx, ts, "w/k", ""); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	var inSweep atomic.Bool
	b := newGuard(t, s, Config{Holder: "B", Hooks: Hooks{BeforeSweepKey: func(ctx context.Context, key string) error {
		inSweep.Store(true)
		<-gate
		return nil
	}}})
	bound := make(chan error, 1)
	go func() { _, err := b.Bind(ctx, 2); bound <- err }()
	waitFor(t, ctx, inSweep.Load)
	if st := b.Status(); st.State != StateSweeping || st.Token != 2 {
		t.Fatalf("status during the sweep: %+v", st)
	}
	put := make(chan error, 1)
	go func() { _, err := gput(ctx, b, "w/other", "x", Version{}); put <- err }()
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err := gput(short, b, "w/third", "x", Version{})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a mutation during the sweep = %v, want it to wait (until its context ends)", err)
	}
	select {
	case err := <-put:
		t.Fatalf("a mutation completed before the sweep: %v", err)
	default:
	}
	close(gate)
	if err := <-bound; err != nil {
		t.Fatal(err)
	}
	if err := <-put; err != nil {
		t.Fatalf("the waiting mutation after activation: %v", err)
	}
}

func TestFenceDomainsAreIndependent(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	s := memstore.New()
	a := newGuard(t, s, Config{Holder: "A", Domain: "a/"})
	b := newGuard(t, s, Config{Holder: "B", Domain: "b/"})
	bind(t, ctx, a, 5)
	bind(t, ctx, b, 5) // the same number in another domain
	if _, err := gput(ctx, a, "a/f", "x", Version{}); err != nil {
		t.Fatal(err)
	}
	if _, err := gput(ctx, b, "b/f", "x", Version{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, "a/.fencefs/epoch"); err != nil {
		t.Errorf("register of domain a/: %v", err)
	}
	if _, err := gput(ctx, a, "a/.fencefs/epoch", "{}", Version{}); !errors.Is(err, objstore.ErrInvalid) {
		t.Errorf("the domain's protocol objects are writable: %v", err)
	}
	if reg, _, err := ReadRegister(ctx, s, "b/"); err != nil || reg.Holder != "B" {
		t.Errorf("ReadRegister(b/) = %+v %v", reg, err)
	}
	if _, _, err := ReadRegister(ctx, s, "c/"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("ReadRegister of a domain never bound = %v, want ErrNotFound", err)
	}
}

func TestRaiseFencesWithoutMounting(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	s := memstore.New()
	a := newGuard(t, s, Config{Holder: "A"})
	bind(t, ctx, a, 0)
	n, err := Raise(ctx, s, Config{Holder: "cli:host", Mode: ModeFast}, 0)
	if err != nil || n != 2 {
		t.Fatalf("Raise = %d, %v", n, err)
	}
	_, err = gput(ctx, a, "f", "x", Version{})
	mustFenced(t, "after raise", err, "held by holder cli:host")
	if _, err := Raise(ctx, s, Config{Holder: "cli:host"}, 1); !errors.Is(err, ErrBadToken) {
		t.Errorf("Raise to an older token = %v", err)
	}
}

// TestUnreadableRegisterFailsClosed checks that a commit whose validation
// cannot be done writes nothing: in fast mode the register cannot be read,
// in strict mode the journal cannot be written.
func TestUnreadableRegisterFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		mode Mode
		op   memstore.Op
		key  string
	}{
		{ModeFast, memstore.OpGet, ".fencefs/epoch"},
		{ModeStrict, memstore.OpPut, ".fencefs/intents/"},
	} {
		t.Run(string(tc.mode), func(t *testing.T) { unverifiableCommitFailsClosed(t, tc.mode, tc.op, tc.key) })
	}
}

func unverifiableCommitFailsClosed(t *testing.T, mode Mode, op memstore.Op, key string) {
	ctx := testCtx(t, 10*time.Second)
	s := memstore.New()
	g := newGuard(t, s, Config{Holder: "A", Mode: mode})
	bind(t, ctx, g, 1)
	var broken atomic.Bool
	s.SetHook(func(ctx context.Context, ev memstore.Event) error {
		if broken.Load() && ev.Op == op && strings.Contains(ev.Key, key) {
			return objstore.ErrUnavailable
		}
		return nil
	})
	broken.Store(true)
	_, err := gput(ctx, g, "k", "x", Version{})
	if !errors.Is(err, ErrUnverified) || !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("Put with an unverifiable epoch = %v, want ErrUnverified wrapping the cause", err)
	}
	if _, err := s.Stat(ctx, "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Error("the commit was attempted without a validation")
	}
	broken.Store(false)
	if _, err := gput(ctx, g, "k", "x", Version{}); err != nil {
		t.Errorf("after the store works again: %v", err)
	}
	if mode != ModeFast {
		return // strict validates by its journal, not by the register
	}
	// A register older than our token (reset) is not trusted either.
	if err := s.Delete(ctx, ".fencefs/epoch", objstore.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := gput(ctx, g, "k2", "x", Version{}); !errors.Is(err, ErrUnverified) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Put with the register deleted = %v", err)
	}
}

func TestMetrics(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	s := memstore.New()
	reg := prometheus.NewRegistry()
	a := newGuard(t, s, Config{Holder: "A", Registerer: reg})
	bind(t, ctx, a, 3)
	if _, err := gput(ctx, a, "m", "x", Version{}); err != nil {
		t.Fatal(err)
	}
	// B shares the collectors. It does not wait for A's release of its
	// sealed journal (release_test.go tests that): whether A's release came
	// before B's sweep read it would decide whether m is swept.
	b := newGuard(t, s, Config{Holder: "B", Registerer: reg, ReleaseGrace: -1})
	bind(t, ctx, b, 4)
	if _, err := gput(ctx, a, "m2", "x", Version{}); !errors.Is(err, ErrFenced) {
		t.Fatal(err)
	}
	got := gather(t, reg)
	for name, want := range map[string]float64{
		"fencefs_fencing_fenced_refusals_total{op=create}":            1,
		"fencefs_fencing_commit_outcomes_total{op=create,outcome=ok}": 1,
		"fencefs_fencing_sweeps_total":                                2,
		"fencefs_fencing_swept_keys_total":                            1, // A's lingering intent on m
		"fencefs_fencing_state{state=fenced}":                         1, // A
		"fencefs_fencing_state{state=active}":                         1, // B
		"fencefs_fencing_state{state=unbound}":                        0,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v (all: %v)", name, got[name], want, got)
		}
	}
	if got["fencefs_fencing_validations_total{result=not_modified}"] == 0 {
		t.Errorf("no 304 validation counted: %v", got)
	}
	// A closed Guard counts in no state.
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := gather(t, reg)["fencefs_fencing_state{state=fenced}"]; got != 0 {
		t.Errorf("after A's Close: fenced = %v, want 0", got)
	}
}

// gather returns every sample of reg by name with its labels.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()+labels(m)] += value(m)
		}
	}
	return got
}

func labels(m *dto.Metric) string {
	if len(m.GetLabel()) == 0 {
		return ""
	}
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// countIntents counts the keys named by the intent objects in s (entries
// of journals and of single intents; an empty journal counts nothing).
func countIntents(t testing.TB, ctx context.Context, s objstore.Store) int {
	t.Helper()
	return len(intentKeys(t, ctx, s, ""))
}

// intentKeys returns the keys named by the intent objects under domain's
// protocol directory, one per (object, key).
func intentKeys(t testing.TB, ctx context.Context, s objstore.Store, domain string) []string {
	t.Helper()
	var names []string
	if err := s.List(ctx, newLayout(domain).intentsPrefix(), "", func(e objstore.Entry) error {
		names = append(names, e.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, n := range names {
		doc, _, err := objects{store: s}.readIntent(ctx, n)
		if errors.Is(err, objstore.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range doc.Keys {
			keys = append(keys, e.Key)
		}
	}
	return keys
}

// waitFor polls cond until it holds (bounded by ctx).
func waitFor(t testing.TB, ctx context.Context, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal("condition never held")
		case <-time.After(time.Millisecond):
		}
	}
}

// TestTransientFailuresAreLeftToTheStoresRetries checks that Guard retries
// nothing itself (the store is the one owner of retries, within the retry
// deadline Guard gives each mutation): a 409 or a 503 the store gives up on
// costs one commit attempt, fails with that error, and lands nothing.
func TestTransientFailuresAreLeftToTheStoresRetries(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		unknown bool // the outcome is reported unknown (maybe applied)
	}{
		{"conflict", objstore.ErrConflict, false},
		{"unavailable", objstore.ErrUnavailable, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t, 10*time.Second)
			s := memstore.New()
			g := newGuard(t, s, Config{Holder: "A", OpTimeout: 7 * time.Second})
			bind(t, ctx, g, 1)
			var attempts atomic.Int32
			var budget atomic.Int64 // the retry deadline the store saw, from now
			s.SetHook(func(ctx context.Context, ev memstore.Event) error {
				if ev.Op == memstore.OpPut && ev.Key == "c" && ev.Phase == memstore.PhaseBefore {
					attempts.Add(1)
					if d, ok := objstore.RetryDeadline(ctx); ok {
						budget.Store(int64(time.Until(d)))
					}
					return tc.err
				}
				return nil
			})
			_, err := gput(ctx, g, "c", "x", Version{})
			if !errors.Is(err, tc.err) {
				t.Fatalf("Put through a store that gave up: %v, want %v", err, tc.err)
			}
			if got := strings.Contains(err.Error(), "outcome unknown"); got != tc.unknown {
				t.Errorf("error %q: outcome unknown = %v, want %v", err, got, tc.unknown)
			}
			if n := attempts.Load(); n != 1 {
				t.Errorf("%d commit attempts, want 1 (the store retries, not Guard)", n)
			}
			if b := time.Duration(budget.Load()); b <= 0 || b > 7*time.Second {
				t.Errorf("the commit ran with %v of retry budget left, want (0, 7s] (the mutation's OpTimeout)", b)
			}
			if _, _, ok := read(t, ctx, s, "c"); ok {
				t.Error("c exists")
			}
		})
	}
}

func TestNewFillsDefaultsAndRefusesUnknownSettingsInOneLine(t *testing.T) {
	s := memstore.New()
	for _, tc := range []struct {
		name      string
		cfg       Config
		wantMode  Mode
		wantReap  Reap
		wantError string
	}{
		{"defaults", Config{}, ModeStrict, ReapAuto, ""},
		{"explicit", Config{Mode: ModeFast, ReapTombstones: ReapOff}, ModeFast, ReapOff, ""},
		{"unknown mode", Config{Mode: "paranoid"}, "", "", `fencing: unknown mode "paranoid" (strict, fast or off)`},
		{"unknown reaping", Config{ReapTombstones: "never"}, "", "", `fencing: unknown tombstone reaping "never" (auto, always or off)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := New(s, tc.cfg)
			if tc.wantError != "" {
				if err == nil || err.Error() != tc.wantError {
					t.Fatalf("New = %v, want %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close(context.Background())
			if g.cfg.Mode != tc.wantMode || g.cfg.ReapTombstones != tc.wantReap {
				t.Fatalf("mode %q, reaping %q; want %q, %q", g.cfg.Mode, g.cfg.ReapTombstones, tc.wantMode, tc.wantReap)
			}
		})
	}
}
