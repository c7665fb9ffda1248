package lease_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencefs/fencefs/lease"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
)

// Against memstore every test runs in a synctest bubble: time is fake and
// advances only when every goroutine is blocked, so a 15 s TTL costs nothing
// and the order of events is deterministic.

const memTTL = 15 * time.Second

func memEnv() env { return env{store: memstore.New(), ttl: memTTL, wait: time.Hour} }

// bubbleCtx is a test's context in the bubble: it times out after an hour
// of fake time, so a test that stops making progress fails.
func bubbleCtx(t *testing.T) context.Context { return env{wait: time.Hour}.ctx(t) }

func inBubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, f)
}

// acquireA acquires lease "l" on s for holder A (TTL memTTL).
func acquireA(t *testing.T, ctx context.Context, s objstore.Store) *lease.Lease {
	t.Helper()
	a, err := lease.Acquire(ctx, s, "l", lease.Options{TTL: memTTL, Holder: "A"})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestMemSecondContenderWaitsForRelease(t *testing.T) {
	inBubble(t, func(t *testing.T) { testSecondContenderWaitsForRelease(t, memEnv()) })
}

func TestMemCutOffHolderIsTakenOverAndFenced(t *testing.T) {
	inBubble(t, func(t *testing.T) { testCutOffHolderIsTakenOverAndFenced(t, memEnv()) })
}

func TestMemOneHolderAtATime(t *testing.T) {
	inBubble(t, func(t *testing.T) { testOneHolderAtATime(t, memEnv(), 4, 5) })
}

func TestMemHolderLosesAtItsDeadlineBeforeTheTakeover(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		e := memEnv()
		ctx := e.ctx(t)
		aStore := &cutStore{Store: e.store}
		a, err := lease.Acquire(ctx, aStore, "l", lease.Options{TTL: e.ttl, Holder: "A"})
		if err != nil {
			t.Fatal(err)
		}
		aStore.cut.Store(true)
		cutAt := time.Now()
		bch := acquireAsync(ctx, e.store, "l", lease.Options{TTL: e.ttl, Holder: "B"})
		<-a.Lost()
		lostAfter := time.Since(cutAt)
		select {
		case r := <-bch:
			t.Fatalf("B acquired (%v) no later than A noticed its loss", r.err)
		default:
		}
		r := <-bch
		if r.err != nil {
			t.Fatal(r.err)
		}
		defer release(t, r.l)
		// Fake time: these durations are exact, not measurements.
		if lostAfter > e.ttl-e.ttl/5 {
			t.Errorf("A noticed its loss %v after the cut; its deadline is %v after its last renewal", lostAfter, e.ttl-e.ttl/5)
		}
		if took := time.Since(cutAt); took < e.ttl {
			t.Errorf("B took over %v after the cut; a takeover needs a full TTL (%v) of unchanged lease", took, e.ttl)
		}
	})
}

func TestMemRenewalRefusedAfterAForeignWriteLosesAtOnce(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		e := memEnv()
		ctx := e.ctx(t)
		a, err := lease.Acquire(ctx, e.store, "l", lease.Options{TTL: e.ttl, Holder: "A"})
		if err != nil {
			t.Fatal(err)
		}
		// Someone else's version replaces A's (as a takeover by a contender
		// that saw A frozen would).
		info, err := lease.Inspect(ctx, e.store, "", "l")
		if err != nil {
			t.Fatal(err)
		}
		foreign := []byte(`{"format":1,"name":"l","holder":"Z","id":"zzz","token":99,"ttl_ms":15000,"renewed_seq":100}`)
		if _, err := e.store.Put(ctx, lease.Key("", "l"), bytes.NewReader(foreign), int64(len(foreign)),
			objstore.PutOptions{Cond: objstore.Condition{IfMatch: info.ETag}}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		<-a.Lost()
		if d := time.Since(start); d > e.ttl/3 {
			t.Errorf("loss noticed %v later; want at the next renewal (%v)", d, e.ttl/3)
		}
		if err := a.Err(); !errors.Is(err, lease.ErrLost) || !strings.Contains(err.Error(), "taken over by Z (token 99)") {
			t.Errorf("Err = %v; want ErrLost naming Z", err)
		}
		if err := a.Release(ctx); !errors.Is(err, lease.ErrLost) {
			t.Errorf("Release = %v; want ErrLost", err)
		}
		got, _ := lease.Inspect(ctx, e.store, "", "l")
		if got.Holder != "Z" || got.Released {
			t.Errorf("A's release touched Z's lease: %+v", got)
		}
	})
}

// lostResponses makes the first n writes of the lease object land but
// report ErrUnavailable, as a response lost on the network.
func lostResponses(s *memstore.Store, n int32) *atomic.Int32 {
	var left atomic.Int32
	left.Store(n)
	s.SetHook(func(ctx context.Context, ev memstore.Event) error {
		if ev.Op == memstore.OpPut && ev.Phase == memstore.PhaseAfter && ev.Err == nil &&
			strings.Contains(ev.Key, "/leases/") && left.Add(-1) >= 0 {
			return objstore.ErrUnavailable
		}
		return ev.Err
	})
	return &left
}

func TestMemLostResponsesAreRecognisedAsOurOwnWrites(t *testing.T) {
	tests := []struct {
		name string
		lost int32
	}{
		{"acquisition", 1},
		{"acquisition and first renewals", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				s := memstore.New()
				e := env{store: s, ttl: memTTL, wait: time.Hour}
				ctx := e.ctx(t)
				left := lostResponses(s, tt.lost)
				a, err := lease.Acquire(ctx, s, "l", lease.Options{TTL: e.ttl, Holder: "A"})
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(3 * e.ttl)
				if left.Load() >= 0 {
					t.Fatalf("only %d of %d lost responses happened", tt.lost-left.Load(), tt.lost)
				}
				if !a.Held() {
					t.Fatalf("A lost its lease over lost responses: %v", a.Err())
				}
				info, err := lease.Inspect(ctx, s, "", "l")
				if err != nil || info.ID != a.ID() || info.Seq < 6 {
					t.Fatalf("lease object %+v, %v; want A's, renewed", info, err)
				}
				release(t, a)
			})
		})
	}
}

func TestMemLostResponseOfReleaseStillReleases(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s := memstore.New()
		ctx := bubbleCtx(t)
		a := acquireA(t, ctx, s)
		lostResponses(s, 1)
		if err := a.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		info, err := lease.Inspect(ctx, s, "", "l")
		if err != nil || !info.Released {
			t.Fatalf("lease object %+v, %v; want released", info, err)
		}
	})
}

func TestMemTokenIsRecordedAndMustGrow(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s := memstore.New()
		ctx := bubbleCtx(t)
		bind := func(n uint64) func(context.Context) (uint64, error) {
			return func(context.Context) (uint64, error) { return n, nil }
		}
		a, err := lease.Acquire(ctx, s, "l", lease.Options{TTL: memTTL, Holder: "A", Bind: bind(7)})
		if err != nil {
			t.Fatal(err)
		}
		if info, _ := lease.Inspect(ctx, s, "", "l"); info.Token != 7 || a.Token() != 7 {
			t.Fatalf("token recorded %d, Token() %d; want 7", info.Token, a.Token())
		}
		time.Sleep(memTTL) // renewals keep the token
		if info, _ := lease.Inspect(ctx, s, "", "l"); info.Token != 7 {
			t.Fatalf("token after renewals %d; want 7", info.Token)
		}
		release(t, a)

		_, err = lease.Acquire(ctx, s, "l", lease.Options{TTL: memTTL, Holder: "B", Bind: bind(7)})
		if !errors.Is(err, lease.ErrToken) {
			t.Fatalf("B binding the same token: %v; want ErrToken", err)
		}
		if info, _ := lease.Inspect(ctx, s, "", "l"); !info.Released {
			t.Fatalf("B did not release after its bind was refused: %+v", info)
		}
		bindErr := errors.New("mount unreachable")
		_, err = lease.Acquire(ctx, s, "l", lease.Options{TTL: memTTL, Holder: "C", Bind: func(context.Context) (uint64, error) { return 0, bindErr }})
		if !errors.Is(err, bindErr) {
			t.Fatalf("C's failed bind: %v; want it returned", err)
		}
		d, err := lease.Acquire(ctx, s, "l", lease.Options{TTL: memTTL, Holder: "D", Bind: bind(8)})
		if err != nil {
			t.Fatalf("D after the refused ones: %v", err)
		}
		if acq := d.Acquisition(); acq.How != lease.HowReleased || acq.PrevToken != 7 {
			t.Errorf("D's acquisition %+v; want released, previous token 7 (refused binds record none)", acq)
		}
		release(t, d)
	})
}

func TestMemLossDuringBindCancelsItAndFails(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		base := memstore.New()
		s := &cutStore{Store: base}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		var bindCtxErr error
		_, err := lease.Acquire(ctx, s, "l", lease.Options{TTL: memTTL, Holder: "A", Bind: func(bctx context.Context) (uint64, error) {
			s.cut.Store(true) // renewals fail from now on
			<-bctx.Done()     // a bind that hangs until cancelled
			bindCtxErr = bctx.Err()
			return 0, bctx.Err()
		}})
		if !errors.Is(err, lease.ErrLost) {
			t.Fatalf("Acquire = %v; want ErrLost", err)
		}
		if !errors.Is(bindCtxErr, context.Canceled) {
			t.Errorf("the bind's context ended with %v; want cancelled at the loss", bindCtxErr)
		}
	})
}

func TestMemAcquireGivesUpWhenContextEnds(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s := memstore.New()
		ctx := context.Background()
		a := acquireA(t, ctx, s)
		defer release(t, a)
		wctx, cancel := context.WithTimeout(ctx, 2*memTTL)
		defer cancel()
		_, err := lease.Acquire(wctx, s, "l", lease.Options{TTL: memTTL, Holder: "B"})
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "A") {
			t.Fatalf("B = %v; want DeadlineExceeded naming holder A", err)
		}
		if !a.Held() {
			t.Fatalf("A lost meanwhile: %v", a.Err())
		}
	})
}

func TestMemUnreadableOrNewerLeaseObjects(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		wantErr error  // from Acquire
		wantHow string // when acquired
	}{
		{name: "garbage expires after a TTL", body: "not json", wantHow: lease.HowExpired},
		{name: "a newer format is refused", body: `{"format":2,"id":"x","holder":"future"}`, wantErr: lease.ErrFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				s := memstore.New()
				ctx := bubbleCtx(t)
				if _, err := s.Put(ctx, lease.Key("", "l"), strings.NewReader(tt.body), int64(len(tt.body)), objstore.PutOptions{}); err != nil {
					t.Fatal(err)
				}
				l, err := lease.Acquire(ctx, s, "l", lease.Options{TTL: memTTL})
				if tt.wantErr != nil {
					if !errors.Is(err, tt.wantErr) {
						t.Fatalf("Acquire = %v; want %v", err, tt.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				defer release(t, l)
				if l.Acquisition().How != tt.wantHow {
					t.Errorf("acquired %+v; want %s", l.Acquisition(), tt.wantHow)
				}
			})
		})
	}
}

func TestMemLeaseLivesInTheFenceDomain(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s := memstore.New()
		ctx := context.Background()
		l, err := lease.Acquire(ctx, s, "l", lease.Options{Domain: "team/", TTL: memTTL})
		if err != nil {
			t.Fatal(err)
		}
		defer release(t, l)
		if _, err := s.Stat(ctx, "team/.fencefs/leases/l"); err != nil {
			t.Errorf("lease object not under the domain: %v", err)
		}
		if _, err := lease.Inspect(ctx, s, "", "l"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("a lease of another domain is visible at the bucket level: %v", err)
		}
	})
}

func TestAcquireRefusesBadOptions(t *testing.T) {
	s := memstore.New()
	ctx := context.Background()
	tests := []struct {
		name string
		opts lease.Options
		want string
	}{
		{"bad name", lease.Options{}, "invalid lease name"},
		{"tiny TTL", lease.Options{TTL: time.Millisecond}, "below the minimum"},
		{"domain without slash", lease.Options{Domain: "team"}, "must be empty or end with"},
		{"guard and bind", lease.Options{Guard: newGuard(t, s, "x"), Bind: func(context.Context) (uint64, error) { return 1, nil }}, "exclusive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "ok"
			if tt.name == "bad name" {
				name = "a/b"
			}
			_, err := lease.Acquire(ctx, s, name, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Acquire = %v; want an error containing %q", err, tt.want)
			}
		})
	}
	if s.Len() != 0 {
		t.Errorf("refused acquisitions wrote %d objects", s.Len())
	}
}

func TestMemTakeoverIsConditionalOnTheVersionWatched(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s := memstore.New()
		ctx := bubbleCtx(t)
		aStore := &cutStore{Store: s}
		a, err := lease.Acquire(ctx, aStore, "l", lease.Options{TTL: memTTL, Holder: "A"})
		if err != nil {
			t.Fatal(err)
		}
		aStore.cut.Store(true)
		// Just before B's first takeover write, another version lands (as a
		// late renewal or a faster contender would): B's write must fail and
		// B must start watching the new version.
		var raced atomic.Bool
		s.SetHook(func(hctx context.Context, ev memstore.Event) error {
			if ev.Op == memstore.OpPut && ev.Phase == memstore.PhaseBefore && ev.Cond.IfMatch != "" && raced.CompareAndSwap(false, true) {
				y := []byte(`{"format":1,"name":"l","holder":"Y","id":"yyy","token":5,"ttl_ms":15000,"renewed_seq":50}`)
				if _, err := s.Put(hctx, lease.Key("", "l"), bytes.NewReader(y), int64(len(y)), objstore.PutOptions{Cond: objstore.Condition{IfMatch: ev.Cond.IfMatch}}); err != nil {
					t.Errorf("racing write: %v", err)
				}
			}
			return ev.Err
		})
		b, err := lease.Acquire(ctx, s, "l", lease.Options{TTL: memTTL, Holder: "B"})
		if err != nil {
			t.Fatal(err)
		}
		defer release(t, b)
		if !raced.Load() {
			t.Fatal("the racing write never happened")
		}
		if acq := b.Acquisition(); acq.PrevHolder != "Y" || acq.How != lease.HowExpired || acq.PrevToken != 5 {
			t.Errorf("B's acquisition %+v; want it expired from Y (the version that raced), not from A", acq)
		}
		<-a.Lost()
	})
}

func TestMemRenewExtendsTheLeaseAndReportsALoss(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s := memstore.New()
		ctx := bubbleCtx(t)
		a := acquireA(t, ctx, s)
		before, _ := lease.Inspect(ctx, s, "", "l")
		if err := a.Renew(ctx); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		after, _ := lease.Inspect(ctx, s, "", "l")
		if after.Seq != before.Seq+1 || after.ETag == before.ETag || after.ID != a.ID() {
			t.Fatalf("after Renew the object is %+v (before %+v); want A's next version", after, before)
		}
		foreign := []byte(`{"format":1,"name":"l","holder":"Z","id":"zzz","ttl_ms":15000,"renewed_seq":100}`)
		if _, err := s.Put(ctx, lease.Key("", "l"), bytes.NewReader(foreign), int64(len(foreign)),
			objstore.PutOptions{Cond: objstore.Condition{IfMatch: after.ETag}}); err != nil {
			t.Fatal(err)
		}
		if err := a.Renew(ctx); !errors.Is(err, lease.ErrLost) {
			t.Fatalf("Renew after a takeover = %v; want ErrLost", err)
		}
		if !isClosed(a.Lost()) || a.Held() {
			t.Errorf("after a refused Renew: Lost closed %v, Held %v; want true, false", isClosed(a.Lost()), a.Held())
		}
		if err := a.Renew(ctx); !errors.Is(err, lease.ErrLost) {
			t.Errorf("Renew once lost = %v; want ErrLost", err)
		}
	})
}
