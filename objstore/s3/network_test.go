package s3_test

import (
	"bytes"
	"errors"
	"io"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/s3"
	"github.com/prometheus/client_golang/prometheus"
)

// timed runs op and returns how long it took and its error.
func timed(op func() error) (time.Duration, error) {
	start := time.Now()
	err := op()
	return time.Since(start), err
}

// TestTransientAnswersAreRetriedWithinTheDeadlineThenUnavailable injects
// the ways servers answer transient trouble (MinIO's 499
// ClientDisconnected, 503 SlowDown, 503 RequestTimeout, 500, a connection
// that breaks): each is retried, and when it lasts beyond the retry
// deadline the call fails with ErrUnavailable — never ErrInvalid (EINVAL).
// An unknown status is ErrUnavailable too; a plain 400 stays ErrInvalid.
func TestTransientAnswersAreRetriedWithinTheDeadlineThenUnavailable(t *testing.T) {
	const deadline = 2 * time.Second
	p, s, direct := faultStoresWith(t, func(c *s3.Config) { c.RetryDeadline = deadline })
	ctx := ctxT(t)
	if _, err := put(ctx, direct, "there", "x", objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	const always = 1000
	for _, tc := range []struct {
		name     string
		f        *fault
		wantErr  error // nil: success
		hits     int   // exact hits when > 0; at least 2 when 0 and f.times == always
		stat     bool  // the call is a Stat of "there", else a create
		maybeApp bool  // the failure is an UncertainError
	}{
		{"499 ClientDisconnected twice then success", &fault{method: "PUT", action: "status", status: 499, code: "ClientDisconnected", times: 2}, nil, 2, false, false},
		{"bare 499 on a HEAD then success", &fault{method: "HEAD", action: "status", status: 499}, nil, 1, true, false},
		{"503 SlowDown then success", &fault{method: "PUT", action: "status", status: 503, code: "SlowDown", times: 2}, nil, 2, false, false},
		{"503 RequestTimeout then success", &fault{method: "PUT", action: "status", status: 503, code: "RequestTimeout"}, nil, 1, false, false},
		{"500 InternalError then success", &fault{method: "PUT", action: "status", status: 500, code: "InternalError"}, nil, 1, false, false},
		{"connection reset three times then success", &fault{method: "PUT", action: "reset", times: 3}, nil, 3, false, false},
		{"bare 499 on a HEAD until the deadline", &fault{method: "HEAD", action: "status", status: 499, times: always}, objstore.ErrUnavailable, 0, true, false},
		{"499 on a PUT until the deadline", &fault{method: "PUT", action: "status", status: 499, code: "ClientDisconnected", times: always}, objstore.ErrUnavailable, 0, false, true},
		{"503 SlowDown until the deadline", &fault{method: "PUT", action: "status", status: 503, code: "SlowDown", times: always}, objstore.ErrUnavailable, 0, false, false},
		{"resets until the deadline", &fault{method: "PUT", action: "reset", times: always}, objstore.ErrUnavailable, 0, false, true},
		{"unknown status 418 is unavailable, not retried", &fault{method: "HEAD", action: "status", status: 418}, objstore.ErrUnavailable, 1, true, false},
		{"400 InvalidArgument stays invalid", &fault{method: "PUT", action: "status", status: 400, code: "InvalidArgument"}, objstore.ErrInvalid, 1, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := strings.NewReplacer(" ", "-", ",", "").Replace(tc.name)
			p.add(tc.f)
			defer func() {
				p.retire(tc.f)
				_, _ = s.Stat(ctx, "there") // leaves the storage known up
			}()
			took, err := timed(func() error {
				if tc.stat {
					_, err := s.Stat(ctx, "there")
					return err
				}
				_, err := put(ctx, s, key, "x", objstore.PutOptions{Cond: objstore.Condition{IfNoneMatch: true}})
				return err
			})
			hits := p.hits(tc.f)
			switch {
			case tc.hits > 0 && hits != tc.hits:
				t.Errorf("fault hit %d times, want %d", hits, tc.hits)
			case tc.hits == 0 && hits < 2:
				t.Errorf("fault hit %d times, want retries", hits)
			}
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				if !tc.stat {
					wantBody(t, ctx, direct, key, "x")
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("got %v, want %v", err, tc.wantErr)
			}
			if errors.Is(err, objstore.ErrInvalid) != (tc.wantErr == objstore.ErrInvalid) {
				t.Fatalf("got %v: wrongly (not) invalid", err)
			}
			var ue *objstore.UncertainError
			if errors.As(err, &ue) != tc.maybeApp {
				t.Errorf("uncertain = %v, want %v: %v", !tc.maybeApp, tc.maybeApp, err)
			}
			// A functional bound: the deadline plus a generous margin
			// (one last attempt and a probe may follow it).
			if took > deadline+8*time.Second {
				t.Errorf("failed after %v, want about the retry deadline %v", took, deadline)
			}
		})
	}
}

// retire stops f from matching any more requests.
func (p *faultProxy) retire(f *fault) {
	p.mu.Lock()
	f.times = f.hits
	p.mu.Unlock()
}

// proxiedStore returns a store that reaches a fresh gateway bucket through
// a toxiproxy, with short timeouts, and one that talks to the gateway
// directly.
func proxiedStore(t *testing.T, idle time.Duration, reg prometheus.Registerer, set ...func(*s3.Config)) (*harness.Proxy, *s3.Store, *s3.Store) {
	gw := gateway.ForTest(t)
	cfg := config(t, gw)
	direct := newStore(t, cfg)
	proxy := harness.NewProxy(t, gw.Addr)
	cfg.Endpoint = proxy.Endpoint()
	cfg.IdleTimeout, cfg.ConnectTimeout, cfg.RetryDeadline = idle, time.Second, 2*time.Second
	cfg.Registerer = reg
	for _, f := range set {
		f(&cfg)
	}
	return proxy, newStore(t, cfg), direct
}

// unreachable reads the fencefs_s3_unreachable gauge of reg.
func unreachable(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "fencefs_s3_unreachable" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no fencefs_s3_unreachable metric")
	return 0
}

// TestBlackHoleFailsFastAndRecoversAtOnce cuts the link without closing it
// (every byte dropped, as across a partition or to a stopped server): the
// first request fails with ErrUnavailable after the idle timeout, the next
// ones at once (the storage is known down), a read that was streaming
// fails too, and after healing the very first request succeeds.
func TestBlackHoleFailsFastAndRecoversAtOnce(t *testing.T) {
	const idle = time.Second
	reg := prometheus.NewRegistry()
	proxy, s, direct := proxiedStore(t, idle, reg)
	ctx := ctxT(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), (4<<20)/16)
	if _, err := direct.Put(ctx, "big", bytes.NewReader(big), int64(len(big)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, _, err := s.Get(ctx, "big", objstore.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadFull(rc, make([]byte, 1024)); err != nil {
		t.Fatal(err)
	}

	proxy.Cut(t)
	took, err := timed(func() error { _, err := s.Stat(ctx, "big"); return err })
	if !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("stat across a black hole: %v, want ErrUnavailable", err)
	}
	if took > 10*time.Second {
		t.Errorf("stat across a black hole failed after %v, want about the idle timeout %v", took, idle)
	}
	if v := unreachable(t, reg); v != 1 {
		t.Errorf("fencefs_s3_unreachable = %v after the black hole, want 1", v)
	}
	for _, op := range []struct {
		name string
		do   func() error
	}{
		{"stat", func() error { _, err := s.Stat(ctx, "big"); return err }},
		{"create", func() error {
			_, err := put(ctx, s, "new", "x", objstore.PutOptions{Cond: objstore.Condition{IfNoneMatch: true}})
			return err
		}},
		{"streaming read", func() error { _, err := io.Copy(io.Discard, rc); return err }},
	} {
		took, err := timed(op.do)
		if !errors.Is(err, objstore.ErrUnavailable) {
			t.Errorf("%s while known down: %v, want ErrUnavailable", op.name, err)
		}
		if took > 5*time.Second {
			t.Errorf("%s while known down failed after %v, want about a second", op.name, took)
		}
	}
	if _, err := direct.Stat(ctx, "new"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("the create refused while down exists: %v", err)
	}

	proxy.Heal(t)
	if _, err := s.Stat(ctx, "big"); err != nil {
		t.Fatalf("first stat after healing: %v", err)
	}
	if v := unreachable(t, reg); v != 0 {
		t.Errorf("fencefs_s3_unreachable = %v after healing, want 0", v)
	}
	if _, err := put(ctx, s, "new", "x", objstore.PutOptions{Cond: objstore.Condition{IfNoneMatch: true}}); err != nil {
		t.Fatalf("create after healing: %v", err)
	}
}

// TestResetConnectionsFailUnavailableThenRecover makes every connection
// reset: requests fail with ErrUnavailable (not EINVAL), and succeed again
// once the resets stop.
func TestResetConnectionsFailUnavailableThenRecover(t *testing.T) {
	proxy, s, direct := proxiedStore(t, time.Second, nil)
	ctx := ctxT(t)
	if _, err := put(ctx, direct, "k", "v", objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	proxy.Reset(t)
	took, err := timed(func() error { _, err := s.Stat(ctx, "k"); return err })
	if !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("stat through resets: %v, want ErrUnavailable", err)
	}
	if took > 12*time.Second {
		t.Errorf("stat through resets failed after %v, want about the retry deadline", took)
	}
	proxy.Unreset(t)
	if _, err := s.Stat(ctx, "k"); err != nil {
		t.Fatalf("first stat after the resets stopped: %v", err)
	}
}

// TestSlowButMovingUploadOutlivesTheIdleTimeout uploads through a slow
// link, part after part, for longer than both the idle timeout and the
// retry deadline: bytes keep moving, so no request times out and it
// succeeds. (toxiproxy acknowledges bytes it has not passed on yet, up to a
// whole request: each part must pass the toxic within the idle timeout,
// 5 MiB in 2.5 s here. The sender's queue on a real slow link is covered
// by TestIdleConnCountsADrainingSendQueueAsMoving.)
func TestSlowButMovingUploadOutlivesTheIdleTimeout(t *testing.T) {
	const idle = 4 * time.Second
	reg := prometheus.NewRegistry()
	proxy, s, direct := proxiedStore(t, idle, reg, func(c *s3.Config) { c.Concurrency = 1 })
	ctx := ctxT(t)
	body := bytes.Repeat([]byte("slow but moving "), (15<<20)/16) // three 5 MiB parts at 2 MiB/s: ~7.5 s
	proxy.Slow(t, 2048)
	start := time.Now()
	if _, err := s.Put(ctx, "slow", bytes.NewReader(body), int64(len(body)), objstore.PutOptions{}); err != nil {
		t.Fatalf("slow upload: %v", err)
	}
	took := time.Since(start)
	proxy.Unslow(t)
	if took < idle+time.Second {
		t.Fatalf("the upload took %v: the link was not slow enough to outlast the idle timeout %v (test setup)", took, idle)
	}
	if n := counterSum(t, reg, "fencefs_s3_retries_total"); n != 0 {
		t.Errorf("%v requests of the slow but moving upload were retried", n)
	}
	rc, _, err := direct.Get(ctx, "slow", objstore.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read back %d bytes (err %v), want the %d uploaded", len(got), err, len(body))
	}
}

// counterSum adds up every series of the counter name in reg (0 if absent).
func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestPooledConnectionOutlivesTheIdleTimeout checks that the idle timeout
// applies only while a request uses a connection: one that waits in the
// pool longer than the timeout is still reused.
func TestPooledConnectionOutlivesTheIdleTimeout(t *testing.T) {
	cfg := config(t, keepAliveGateway(t))
	const idle = 300 * time.Millisecond
	cfg.IdleTimeout = idle
	s := newStore(t, cfg)
	var fresh atomic.Int64
	ctx := httptrace.WithClientTrace(ctxT(t), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if !i.Reused {
			fresh.Add(1)
		}
	}})
	for i := range 3 {
		if _, err := s.Stat(ctx, "missing"); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("stat %d: %v", i, err)
		}
		time.Sleep(3 * idle)
	}
	if n := fresh.Load(); n != 1 {
		t.Fatalf("%d new connections for 3 requests %v apart, want 1 (a pooled connection must not time out)", n, 3*idle)
	}
}
