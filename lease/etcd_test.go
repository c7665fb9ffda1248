package lease_test

import (
	"context"
	"errors"
	"github.com/fencefs/fencefs/internal/promreg"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/integration/etcdserver"
	"github.com/fencefs/fencefs/lease"
	"github.com/fencefs/fencefs/objstore/memstore"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Elections against a real etcd (bin/etcd, built from tools/etcd).

// etcdTTL is the tests' lease TTL: a leader must not lose its session to a
// stall of a loaded machine. etcdShortTTL is for the test that waits one out.
const (
	etcdTTL      = 5 * time.Second
	etcdShortTTL = 2 * time.Second
)

func etcdClient(t *testing.T, srv *etcdserver.Server) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// binds records the tokens bound, in order.
type binds struct{ ch chan uint64 }

func (b binds) bind(_ context.Context, tok uint64) error { b.ch <- tok; return nil }

func TestEtcdLeadersTakeTurnsWithGrowingTokens(t *testing.T) {
	srv := etcdserver.ForTest(t, etcdserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg := prometheus.NewRegistry()
	b := binds{make(chan uint64, 4)}
	opts := lease.ElectionOptions{TTL: etcdTTL, Bind: b.bind, Registerer: reg}

	first, err := lease.Campaign(ctx, etcdClient(t, srv), "leader", opts)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Held() || first.Token() == 0 || <-b.ch != first.Token() {
		t.Fatalf("first leader: held %v token %d; want held, its token bound", first.Held(), first.Token())
	}
	second := make(chan *lease.Election, 1)
	go func() {
		e, err := lease.Campaign(ctx, etcdClient(t, srv), "leader", opts)
		if err != nil {
			t.Error(err)
		}
		second <- e
	}()
	select {
	case <-second:
		t.Fatal("a second candidate won while the first leads")
	case <-time.After(3 * etcdTTL / 2):
	}
	if err := first.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if !errors.Is(first.Err(), lease.ErrReleased) || first.Held() {
		t.Errorf("after Release: err %v held %v", first.Err(), first.Held())
	}
	var e2 *lease.Election
	select {
	case e2 = <-second:
	case <-time.After(etcdTTL): // a resignation hands over at once, not at expiry
		t.Fatal("the second candidate did not win after the first resigned")
	}
	if e2 == nil {
		t.FailNow()
	}
	defer e2.Release(ctx)
	if e2.Token() <= first.Token() || <-b.ch != e2.Token() {
		t.Errorf("second token %d; want above the first's %d, and bound", e2.Token(), first.Token())
	}
	if got := gaugeValue(t, reg, "fencefs_lease_token"); got != float64(e2.Token()) {
		t.Errorf("fencefs_lease_token = %v; want %d", got, e2.Token())
	}
	if got := gaugeValue(t, reg, "fencefs_lease_held"); got != 1 {
		t.Errorf("fencefs_lease_held = %v; want 1", got)
	}
	// Keepalives are answered every TTL/3: the last one is recent.
	renewed := time.Now()
	deadline := time.Now().Add(etcdTTL)
	for time.Now().Before(deadline) && gaugeValue(t, reg, "fencefs_lease_last_renewal_timestamp_seconds") < float64(renewed.UnixNano())/1e9 {
		time.Sleep(50 * time.Millisecond)
	}
	if got := gaugeValue(t, reg, "fencefs_lease_last_renewal_timestamp_seconds"); got < float64(renewed.UnixNano())/1e9 {
		t.Errorf("last renewal %v; want a keepalive answered after %v", time.Unix(int64(got), 0), renewed)
	}
}

// gaugeValue reads the one gauge called name from reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	v, ok := promreg.GaugeValue(reg, name)
	if !ok {
		t.Fatalf("%s is not exported as one gauge sample", name)
	}
	return v
}

func TestEtcdLeadershipIsLostWhenTheServerGoesAway(t *testing.T) {
	srv := etcdserver.ForTest(t, etcdserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := lease.Campaign(ctx, etcdClient(t, srv), "leader", lease.ElectionOptions{TTL: etcdShortTTL,
		Bind: func(context.Context, uint64) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	stopped := time.Now()
	select {
	case <-e.Lost():
	case <-time.After(etcdShortTTL + 5*time.Second):
		t.Fatalf("still leading %v after etcd stopped (TTL %v)", time.Since(stopped), etcdShortTTL)
	}
	if !errors.Is(e.Err(), lease.ErrLost) || !strings.Contains(e.Err().Error(), "session ended") || e.Held() {
		t.Errorf("after the server went away: err %v held %v", e.Err(), e.Held())
	}
	t.Logf("lost %v after etcd stopped", time.Since(stopped).Round(10*time.Millisecond))
}

func TestEtcdFailedBindResignsSoTheNextCandidateWins(t *testing.T) {
	srv := etcdserver.ForTest(t, etcdserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	boom := errors.New("boom")
	_, err := lease.Campaign(ctx, etcdClient(t, srv), "leader", lease.ElectionOptions{TTL: 10 * time.Second,
		Bind: func(context.Context, uint64) error { return boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("Campaign = %v; want the bind's error", err)
	}
	// The TTL is 10 s: winning within 5 s means the first resigned.
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	e, err := lease.Campaign(wctx, etcdClient(t, srv), "leader", lease.ElectionOptions{TTL: etcdTTL,
		Bind: func(context.Context, uint64) error { return nil }})
	if err != nil {
		t.Fatalf("the next candidate did not win at once: %v", err)
	}
	e.Release(ctx)
}

func TestEtcdCampaignRefusesBadArguments(t *testing.T) {
	bind := func(context.Context, uint64) error { return nil }
	for _, tc := range []struct {
		name, lease string
		opts        lease.ElectionOptions
		want        string
	}{
		{"bad name", "a/b", lease.ElectionOptions{Bind: bind}, "invalid lease name"},
		{"no bind", "l", lease.ElectionOptions{}, "needs ElectionOptions.Bind"},
		{"fractional ttl", "l", lease.ElectionOptions{Bind: bind, TTL: 1500 * time.Millisecond}, "whole number of seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lease.Campaign(context.Background(), nil, tc.lease, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Campaign = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestTokenSourceCheckNamesBothNumbersAndTheWayOut(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	if err := lease.CheckTokenSource(ctx, store, "", 5); err != nil {
		t.Errorf("no register yet: %v; want nil", err)
	}
	g, err := fencing.New(store, fencing.Config{Mode: fencing.ModeStrict})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(ctx)
	if _, err := g.Bind(ctx, 40); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token uint64
		ok    bool
	}{{41, true}, {40, false}, {12, false}} {
		err := lease.CheckTokenSource(ctx, store, "", tc.token)
		if tc.ok != (err == nil) {
			t.Errorf("token %d: %v; want ok=%v", tc.token, err, tc.ok)
			continue
		}
		if err == nil {
			continue
		}
		msg := err.Error()
		if !errors.Is(err, lease.ErrTokenSource) || strings.Contains(msg, "\n") {
			t.Errorf("token %d: %q; want one line wrapping ErrTokenSource", tc.token, msg)
		}
		for _, want := range []string{"etcd revision " + strconv.FormatUint(tc.token, 10), "epoch 40", "fencefs epoch show", "one token source per fence domain", "prefix"} {
			if !strings.Contains(msg, want) {
				t.Errorf("token %d: %q lacks %q", tc.token, msg, want)
			}
		}
	}
}

func TestEtcdLeadershipIsLostWhenTheLeaderKeyIsDeleted(t *testing.T) {
	srv := etcdserver.ForTest(t, etcdserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := etcdClient(t, srv)
	e, err := lease.Campaign(ctx, c, "leader", lease.ElectionOptions{TTL: 10 * time.Second,
		Bind: func(context.Context, uint64) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Release(ctx)
	if !strings.HasPrefix(e.Key(), lease.DefaultEtcdPrefix+"leader/") || strings.Contains(e.Key(), "//") {
		t.Errorf("leader key %q; want it under %sleader/", e.Key(), lease.DefaultEtcdPrefix)
	}
	if _, err := c.Delete(ctx, e.Key()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Lost():
	case <-time.After(5 * time.Second): // the session's TTL is 10 s: only the watch can tell
		t.Fatal("still leading after the leader key was deleted")
	}
	if !strings.Contains(e.Err().Error(), "is gone") {
		t.Errorf("err = %v; want the key's deletion", e.Err())
	}
}
