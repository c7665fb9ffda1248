package s3

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// fakeProbe is a probe whose answer the test switches; while hold is set,
// a probe blocks until its context ends (a black hole).
type fakeProbe struct {
	up    atomic.Bool
	hold  atomic.Bool
	calls atomic.Int32
}

func (p *fakeProbe) probe(ctx context.Context) error {
	p.calls.Add(1)
	if p.hold.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	if p.up.Load() {
		return nil
	}
	return errors.New("connection refused")
}

func testBreaker(t *testing.T, p *fakeProbe, quick time.Duration) *breaker {
	b := newBreaker(p.probe, quick, quick, nil, slog.New(slog.DiscardHandler))
	t.Cleanup(b.close)
	return b
}

func TestBreakerOpensOnATimeoutOrOnRepeatedBrokenConnections(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failures []bool // the down flag of each failure, in order
		wantOpen bool
	}{
		{"one timeout", []bool{true}, true},
		{"two broken connections", []bool{false, false}, false},
		{"three broken connections", []bool{false, false, false}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBreaker(t, &fakeProbe{}, time.Second)
			for _, down := range tc.failures {
				b.failed(errors.New("no answer"), down)
			}
			if b.isOpen() != tc.wantOpen {
				t.Fatalf("open = %v, want %v", b.isOpen(), tc.wantOpen)
			}
		})
	}
}

func TestBreakerAnswerBetweenBrokenConnectionsKeepsItClosed(t *testing.T) {
	b := testBreaker(t, &fakeProbe{}, time.Second)
	b.failed(errors.New("reset"), false)
	b.failed(errors.New("reset"), false)
	b.answered()
	b.failed(errors.New("reset"), false)
	if b.isOpen() {
		t.Fatal("open after an answer came between the broken connections")
	}
}

// TestBreakerFailsCallsFastWhileDownAndLetsTheFirstThroughAfter checks
// the open breaker: a call waits for its own probe only, fails with a
// certain ErrUnavailable (nothing sent) while the probe gets no answer, and
// passes as soon as one does — also when an older probe, started before the
// storage came back, is still hanging.
func TestBreakerFailsCallsFastWhileDownAndLetsTheFirstThroughAfter(t *testing.T) {
	const quick = 300 * time.Millisecond
	p := &fakeProbe{}
	b := testBreaker(t, p, quick)
	ctx := context.Background()
	b.failed(errors.New("i/o timeout"), true)

	err := b.allow(ctx, "head")
	var oe *opError
	if !errors.Is(err, objstore.ErrUnavailable) || !errors.As(err, &oe) || !oe.certain || oe.retryable() {
		t.Fatalf("call while down: %v, want a certain, final ErrUnavailable", err)
	}

	// A probe hangs (the black hole); the storage comes back meanwhile.
	p.hold.Store(true)
	hung := make(chan error, 1)
	go func() { hung <- b.allow(ctx, "head") }()
	for p.calls.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(2 * probeFresh)
	p.hold.Store(false)
	p.up.Store(true)
	start := time.Now()
	if err := b.allow(ctx, "put"); err != nil {
		t.Fatalf("first call after the storage answers again: %v", err)
	}
	if took := time.Since(start); took >= quick {
		t.Errorf("the first call after recovery waited %v: it joined the probe that started before", took)
	}
	if b.isOpen() {
		t.Error("still open after a probe got an answer")
	}
	if err := <-hung; err == nil {
		t.Error("the call whose probe hung passed")
	}
	if err := b.allow(ctx, "get"); err != nil {
		t.Errorf("call once closed: %v", err)
	}
}

func TestBreakerProbesInTheBackground(t *testing.T) {
	p := &fakeProbe{}
	b := testBreaker(t, p, 200*time.Millisecond)
	b.failed(errors.New("i/o timeout"), true)
	p.up.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for b.isOpen() {
		if time.Now().After(deadline) {
			t.Fatal("the background probe never closed the breaker")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBreakerRefusesTheRestOfAnOperationWithoutProbing checks that once a
// request of an operation (objstore.WithRetryDeadline, or WithOperation as
// a FUSE call makes it) found the storage down, the operation's later
// requests fail at once, while other callers still probe.
func TestBreakerRefusesTheRestOfAnOperationWithoutProbing(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   func() context.Context
	}{
		{"retry deadline", func() context.Context {
			return objstore.WithRetryDeadline(context.Background(), time.Now().Add(time.Minute))
		}},
		{"operation", func() context.Context { return objstore.WithOperation(context.Background()) }},
		{"retry deadline inside an operation", func() context.Context {
			return objstore.WithRetryDeadline(objstore.WithOperation(context.Background()), time.Now().Add(time.Minute))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &fakeProbe{}
			b := testBreaker(t, p, time.Second)
			b.failed(errors.New("i/o timeout"), true)
			op := tc.op()
			if err := b.allow(op, "put"); !errors.Is(err, objstore.ErrUnavailable) {
				t.Fatalf("first request of the operation: %v", err)
			}
			probes := p.calls.Load()
			if err := b.allow(op, "head"); !errors.Is(err, objstore.ErrUnavailable) {
				t.Fatalf("next request of the operation: %v", err)
			}
			if n := p.calls.Load(); n != probes {
				t.Errorf("the operation's next request probed again (%d probes, want %d)", n, probes)
			}
			p.up.Store(true)
			if err := b.allow(context.Background(), "get"); err != nil {
				t.Fatalf("another caller once the storage answers: %v", err)
			}
			if err := b.allow(op, "head"); err != nil {
				t.Errorf("the operation once the breaker closed: %v", err)
			}
		})
	}
}

// TestBreakerRefusesUnwaitedWorkWithoutProbing checks that background work
// (objstore.Unwaited) fails at once while the storage is known down, even
// when the storage answers again (only a caller's probe or the background
// loop closes the breaker), and goes through once it is closed.
func TestBreakerRefusesUnwaitedWorkWithoutProbing(t *testing.T) {
	p := &fakeProbe{}
	p.hold.Store(true) // a probe would wait for its whole timeout
	b := testBreaker(t, p, time.Minute)
	b.failed(errors.New("i/o timeout"), true)
	bg := objstore.Unwaited(context.Background())
	start := time.Now()
	var oe *opError
	if err := b.allow(bg, "put"); !errors.As(err, &oe) || !errors.Is(err, objstore.ErrUnavailable) || !oe.certain {
		t.Fatalf("background request while down: %v, want a certain ErrUnavailable", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the background request waited %v", took)
	}
	if n := p.calls.Load(); n != 0 {
		t.Errorf("the background request probed (%d probes)", n)
	}
	p.hold.Store(false)
	p.up.Store(true)
	if err := b.allow(context.Background(), "get"); err != nil {
		t.Fatalf("a caller once the storage answers: %v", err)
	}
	if err := b.allow(bg, "put"); err != nil {
		t.Errorf("background request once the breaker closed: %v", err)
	}
}

// TestBreakerLetsAQueuedOperationTakeTheProbeThatFailedMeanwhile checks
// that a call pays for at most one probe: a request of an operation that
// was already under way when another caller's probe failed (a group commit
// queued behind a write that waited for that probe) takes that failure at
// once; a call that arrives afterwards, or later than probeFresh after the
// failure, probes for itself.
func TestBreakerLetsAQueuedOperationTakeTheProbeThatFailedMeanwhile(t *testing.T) {
	const quick = 300 * time.Millisecond
	for _, tc := range []struct {
		name      string
		ctx       func(began time.Time) context.Context
		later     time.Duration // after the failure
		wantProbe bool
	}{
		{"operation under way", func(began time.Time) context.Context {
			return objstore.WithOperationSince(context.Background(), began)
		}, 0, false},
		{"no operation", func(time.Time) context.Context { return context.Background() }, 0, true},
		{"operation under way, long after the failure", func(began time.Time) context.Context {
			return objstore.WithOperationSince(context.Background(), began)
		}, 3 * probeFresh, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &fakeProbe{}
			p.hold.Store(true)
			b := testBreaker(t, p, quick)
			b.failed(errors.New("i/o timeout"), true)
			began := time.Now()
			if err := b.allow(context.Background(), "put"); !errors.Is(err, objstore.ErrUnavailable) {
				t.Fatalf("the first caller: %v", err)
			}
			p.hold.Store(false) // a new probe would fail at once: count it
			time.Sleep(tc.later)
			ctx := tc.ctx(began)
			err := b.allow(ctx, "put")
			if !errors.Is(err, objstore.ErrUnavailable) {
				t.Fatalf("the queued call: %v, want ErrUnavailable", err)
			}
			if probed := p.calls.Load() > 1; probed != tc.wantProbe {
				t.Errorf("the queued call probed = %v, want %v", probed, tc.wantProbe)
			}
		})
	}
}
