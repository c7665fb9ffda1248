package lease_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/lease"
	"github.com/fencefs/fencefs/objstore"
)

// This file holds behaviours that run both against memstore (inside a
// synctest bubble: fake time, deterministic) and against the real gateway
// (real time, short TTLs). Their assertions are invariants that do not
// depend on timing: who holds the lease, in which order, with which token.

// env is one store to run a scenario on.
type env struct {
	store objstore.Store
	ttl   time.Duration
	// wait bounds every blocking step of a scenario.
	wait time.Duration
}

func (e env) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), e.wait)
	t.Cleanup(cancel)
	return ctx
}

func newGuard(t *testing.T, store objstore.Store, holder string) *fencing.Guard {
	t.Helper()
	g, err := fencing.New(store, fencing.Config{Mode: fencing.ModeStrict, Holder: holder})
	if err != nil {
		t.Fatalf("fencing.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	return g
}

type result struct {
	l   *lease.Lease
	err error
}

func acquireAsync(ctx context.Context, store objstore.Store, name string, o lease.Options) <-chan result {
	ch := make(chan result, 1)
	go func() {
		l, err := lease.Acquire(ctx, store, name, o)
		ch <- result{l, err}
	}()
	return ch
}

func release(t *testing.T, l *lease.Lease) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Release(ctx); err != nil {
		t.Errorf("release %s: %v", l.Name(), err)
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

// testSecondContenderWaitsForRelease: B waits while A renews (A keeps the
// lease for several TTLs), then A's release hands the lease to B at once
// (not by expiry), with a higher token from the same register.
func testSecondContenderWaitsForRelease(t *testing.T, e env) {
	ctx := e.ctx(t)
	a, err := lease.Acquire(ctx, e.store, "leader", lease.Options{TTL: e.ttl, Holder: "A", Guard: newGuard(t, e.store, "A")})
	if err != nil {
		t.Fatalf("A acquires a free lease: %v", err)
	}
	if a.Acquisition().How != lease.HowCreated || a.Token() == 0 {
		t.Fatalf("A: acquisition %+v token %d; want created with a token", a.Acquisition(), a.Token())
	}
	bch := acquireAsync(ctx, e.store, "leader", lease.Options{TTL: e.ttl, Holder: "B", Guard: newGuard(t, e.store, "B")})

	// A holds for three TTLs: renewals keep B out.
	time.Sleep(3 * e.ttl)
	select {
	case r := <-bch:
		t.Fatalf("B acquired (%v) while A renews (A held: %v, A err: %v)", r.err, a.Held(), a.Err())
	default:
	}
	if !a.Held() {
		t.Fatalf("A lost the lease while renewing: %v", a.Err())
	}
	info, err := lease.Inspect(ctx, e.store, "", "leader")
	if err != nil || info.Holder != "A" || info.Token != a.Token() || info.Seq < 3 {
		t.Fatalf("lease object = %+v, %v; want A's, with its token and renewals", info, err)
	}

	release(t, a)
	if !errors.Is(a.Err(), lease.ErrReleased) || a.Held() || isClosed(a.Lost()) {
		t.Errorf("after release: err %v held %v lost-closed %v; want ErrReleased, false, false", a.Err(), a.Held(), isClosed(a.Lost()))
	}
	r := <-bch
	if r.err != nil {
		t.Fatalf("B after A's release: %v", r.err)
	}
	defer release(t, r.l)
	acq := r.l.Acquisition()
	if acq.How != lease.HowReleased || acq.PrevHolder != "A" || acq.PrevToken != a.Token() {
		t.Errorf("B's acquisition = %+v; want released by A with token %d", acq, a.Token())
	}
	if r.l.Token() <= a.Token() {
		t.Errorf("B's token %d is not above A's %d", r.l.Token(), a.Token())
	}
}

// testCutOffHolderIsTakenOverAndFenced: A is partitioned from the store; B
// takes the lease over after A's TTL; by then A counts itself lost; B binds
// a newer epoch, so A's writes are refused by the storage once A's network
// comes back.
func testCutOffHolderIsTakenOverAndFenced(t *testing.T, e env) {
	ctx := e.ctx(t)
	aStore := &cutStore{Store: e.store}
	ga := newGuard(t, aStore, "A")
	a, err := lease.Acquire(ctx, aStore, "leader", lease.Options{TTL: e.ttl, Holder: "A", Guard: ga})
	if err != nil {
		t.Fatalf("A acquires: %v", err)
	}
	defer func() { _ = a.Release(ctx) }()
	body := []byte("written by A")
	if _, err := ga.Put(ctx, "data", bytes.NewReader(body), int64(len(body)), fencing.Version{}, nil); err != nil {
		t.Fatalf("A writes while holding: %v", err)
	}

	aStore.cut.Store(true)
	gb := newGuard(t, e.store, "B")
	b, err := lease.Acquire(ctx, e.store, "leader", lease.Options{TTL: e.ttl, Holder: "B", Guard: gb})
	if err != nil {
		t.Fatalf("B takes over: %v", err)
	}
	defer release(t, b)
	if a.Held() {
		t.Fatalf("A still counts itself holding when B has taken over")
	}
	if acq := b.Acquisition(); acq.How != lease.HowExpired || acq.PrevHolder != "A" {
		t.Errorf("B's acquisition = %+v; want expired from A", acq)
	}
	if b.Token() <= a.Token() {
		t.Fatalf("B's token %d is not above A's %d", b.Token(), a.Token())
	}
	select {
	case <-a.Lost():
	case <-ctx.Done():
		t.Fatalf("A's Lost never closed")
	}
	if !errors.Is(a.Err(), lease.ErrLost) || !strings.Contains(a.Err().Error(), "not renewed") {
		t.Errorf("A's Err = %v; want ErrLost for a missed renewal", a.Err())
	}

	// A's network returns: its writes are refused by the storage.
	aStore.cut.Store(false)
	info, err := e.store.Stat(ctx, "data")
	if err != nil {
		t.Fatalf("stat data: %v", err)
	}
	_, err = ga.Put(ctx, "data", bytes.NewReader([]byte("stale A")), 7, fencing.Version{ETag: info.ETag}, nil)
	if !errors.Is(err, fencing.ErrFenced) {
		t.Fatalf("A's write after the takeover: %v; want ErrFenced", err)
	}
	if err := a.Release(ctx); !errors.Is(err, lease.ErrLost) {
		t.Errorf("A's release after the takeover = %v; want ErrLost", err)
	}
	li, err := lease.Inspect(ctx, e.store, "", "leader")
	if err != nil || li.Holder != "B" || li.Token != b.Token() || li.Released {
		t.Errorf("lease object = %+v, %v; want B's with token %d", li, err, b.Token())
	}
}

// testOneHolderAtATime: contenders cycle through the lease; whenever one
// enters its critical section, every other one that is inside counts
// itself lost, and the tokens grow in the order of entry.
func testOneHolderAtATime(t *testing.T, e env, contenders, rounds int) {
	ctx := e.ctx(t)
	var (
		mu     sync.Mutex
		inside = map[*lease.Lease]bool{}
		tokens []uint64
	)
	var tok countingBinder
	var wg sync.WaitGroup
	for c := range contenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				l, err := lease.Acquire(ctx, e.store, "mutex", lease.Options{TTL: e.ttl, Holder: fmt.Sprintf("c%d", c), Bind: tok.bind})
				if err != nil {
					t.Errorf("contender %d round %d: %v", c, r, err)
					return
				}
				mu.Lock()
				for other := range inside {
					if other.Held() {
						t.Errorf("two holders: %s (token %d) entered while %s (token %d) holds", l.ID(), l.Token(), other.ID(), other.Token())
					}
				}
				inside[l] = true
				tokens = append(tokens, l.Token())
				mu.Unlock()
				time.Sleep(e.ttl / 10)
				mu.Lock()
				delete(inside, l)
				mu.Unlock()
				release(t, l)
			}
		}()
	}
	wg.Wait()
	if len(tokens) != contenders*rounds {
		t.Fatalf("%d critical sections, want %d", len(tokens), contenders*rounds)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("tokens not increasing in the order of entry: %v", tokens)
			break
		}
	}
}

// countingBinder hands out increasing tokens, as the register would.
type countingBinder struct {
	mu sync.Mutex
	n  uint64 // GUARDED_BY(mu)
}

func (c *countingBinder) bind(context.Context) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n, nil
}
