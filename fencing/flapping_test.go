package fencing

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
)

// TestNoOldLeadersCommitLandsAfterAnyOfManyTakeovers: two Guards take
// turns leading, 100 times. In each round the outgoing leader commits its
// next version of one key, on the version it wrote itself, at a random
// moment around the incoming one's bind; the new leader then reads the key
// and writes it. The old commit may land before the new leader is active
// or be refused with ErrFenced; no write of the old epoch may begin to be
// applied once the new one is active (the store's hook watches every PUT
// of the key), and once the bind returned the old leader's next commit is
// always refused. Intents leave the journal at once, as on a mount, and
// rounds are 0-100 ms apart, so the old leader's journal trim (50 ms after
// its last commit) comes before the seal in some rounds and after it in
// others; every store request is delayed by up to 1.5 ms, and every commit
// pauses up to 10 ms between its intent and its PUT, as a writer frozen
// briefly mid-commit. With the seal disabled the test fails within a few
// rounds. The seed is logged.
func TestNoOldLeadersCommitLandsAfterAnyOfManyTakeovers(t *testing.T) {
	ctx := testCtx(t, 5*time.Minute)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var mu sync.Mutex
	rnd := rand.New(rand.NewPCG(seed, 0))
	jitter := func(max time.Duration) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return time.Duration(rnd.Int64N(int64(max)))
	}
	// A write of log.txt stamped with an epoch older than the one active
	// when the store began to apply it is a stale write that landed.
	var active atomic.Uint64
	var applying sync.Map // ctx of a PUT of log.txt → the active epoch when it began
	var stale atomic.Pointer[string]
	s := memstore.New()
	s.SetHook(func(ctx context.Context, ev memstore.Event) error {
		if ev.Op != memstore.OpPut && ev.Op != memstore.OpGet {
			return nil
		}
		if ev.Phase == memstore.PhaseBefore {
			time.Sleep(jitter(1500 * time.Microsecond))
			if ev.Op == memstore.OpPut && ev.Key == "log.txt" {
				applying.Store(ctx, active.Load())
			}
			return nil
		}
		if a, ok := applying.LoadAndDelete(ctx); ok && ev.Err == nil {
			if e, _ := strconv.ParseUint(ev.Info.Meta[MetaEpoch], 10, 64); e < a.(uint64) {
				msg := fmt.Sprintf("a write of epoch %d landed once epoch %d was active", e, a)
				stale.Store(&msg)
			}
		}
		return nil
	})
	cfg := func(holder string) Config {
		// The grace is waited out only when a release never comes: 2 s
		// leaves a slow -race machine room to write it (a missed release
		// records bases, and two of them can make a commit wait for the
		// record's expiry), and costs nothing where it comes at once.
		return Config{Holder: holder, IntentLinger: -1, ReleaseGrace: 2 * time.Second,
			// A writer frozen between its intent and its commit, briefly.
			Hooks: Hooks{AfterIntent: func(context.Context, string) { time.Sleep(jitter(10 * time.Millisecond)) }}}
	}
	g := [2]*Guard{newGuard(t, s, cfg("A")), newGuard(t, s, cfg("B"))}
	contents := []string{"X: the first\n", "Y: the second\n"}
	var oldWrote Version // what the outgoing leader last wrote
	for r := range 100 {
		next, old := g[r%2], g[(r+1)%2]
		epoch := uint64(r + 2)
		mine := oldWrote // the version the old leader wrote itself
		racing := make(chan error, 1)
		if r > 0 {
			delay := jitter(15 * time.Millisecond)
			go func() {
				time.Sleep(delay)
				_, err := gput(ctx, old, "log.txt", contents[r%2], mine)
				racing <- err
			}()
		} else {
			racing <- nil
		}
		bind(t, ctx, next, epoch)
		active.Store(epoch)
		base := Version{}
		if cur, err := s.Stat(ctx, "log.txt"); err == nil {
			base = VersionOf(cur)
		} else if !errors.Is(err, objstore.ErrNotFound) {
			t.Fatal(err)
		}
		info, err := gput(ctx, next, "log.txt", contents[(r+1)%2], base)
		if err != nil {
			t.Fatalf("round %d: the commit of epoch %d, just bound: %v", r, epoch, err)
		}
		oldWrote = VersionOf(info)
		if err := <-racing; err != nil && !errors.Is(err, ErrFenced) {
			t.Fatalf("round %d: the old leader's commit during the takeover = %v; want success or ErrFenced", r, err)
		}
		if msg := stale.Load(); msg != nil {
			t.Fatalf("round %d: %s", r, *msg)
		}
		cur, err := s.Stat(ctx, "log.txt")
		if err != nil {
			t.Fatal(err)
		}
		if got := cur.Meta[MetaEpoch]; got != fmt.Sprint(epoch) {
			t.Fatalf("round %d: log.txt holds a write of epoch %s after epoch %d wrote it", r, got, epoch)
		}
		if r > 0 {
			_, err := gput(ctx, old, "log.txt", contents[r%2], mine)
			if !errors.Is(err, ErrFenced) {
				t.Fatalf("round %d: the old leader's commit once epoch %d was bound = %v; want ErrFenced", r, epoch, err)
			}
		}
		time.Sleep(jitter(100 * time.Millisecond)) // before or after the next old leader's trim (50 ms)
	}
}
