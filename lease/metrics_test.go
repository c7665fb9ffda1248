package lease_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/fencefs/fencefs/lease"
	"github.com/fencefs/fencefs/objstore"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestMemMetricsFollowTheLease checks the lease metrics an operator alerts
// on: held while held, the token, renewals, and a loss when the lease is
// taken over; a release of the next holder drops held to 0 without a loss.
func TestMemMetricsFollowTheLease(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		e := memEnv()
		ctx := e.ctx(t)
		reg := prometheus.NewRegistry()
		gauge := func(name, labels string) float64 {
			t.Helper()
			for _, mf := range mustGather(t, reg) {
				if mf.GetName() != name {
					continue
				}
				for _, m := range mf.GetMetric() {
					got := ""
					for _, l := range m.GetLabel() {
						got += l.GetName() + "=" + l.GetValue() + ","
					}
					if got == labels {
						if m.Gauge != nil {
							return m.Gauge.GetValue()
						}
						return m.Counter.GetValue()
					}
				}
			}
			t.Fatalf("no %s{%s}", name, labels)
			return 0
		}
		acquire := func(holder string, tok uint64) *lease.Lease {
			t.Helper()
			l, err := lease.Acquire(ctx, e.store, "l", lease.Options{TTL: e.ttl, Holder: holder, Registerer: reg,
				Bind: func(context.Context) (uint64, error) { return tok, nil }})
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		a := acquire("A", 6)
		if got := gauge("fencefs_lease_held", "lease=l,"); got != 1 {
			t.Errorf("held after Acquire = %v, want 1", got)
		}
		if got := gauge("fencefs_lease_token", "lease=l,"); got != 6 {
			t.Errorf("token = %v, want 6", got)
		}
		if got := gauge("fencefs_lease_acquisitions_total", "how=created,lease=l,"); got != 1 {
			t.Errorf("acquisitions{created} = %v, want 1", got)
		}
		time.Sleep(e.ttl/3 + time.Second) // one renewal
		if got := gauge("fencefs_lease_renewals_total", "lease=l,outcome=ok,"); got < 1 {
			t.Errorf("renewals{ok} = %v, want ≥ 1", got)
		}
		if got := gauge("fencefs_lease_last_renewal_timestamp_seconds", "lease=l,"); got < float64(time.Now().Add(-e.ttl/3).Unix()) {
			t.Errorf("last renewal at %v, more than TTL/3 ago (now %v)", got, time.Now().Unix())
		}

		// A foreign version replaces A's: A loses at its next renewal.
		info, err := lease.Inspect(ctx, e.store, "", "l")
		if err != nil {
			t.Fatal(err)
		}
		foreign := []byte(`{"format":1,"name":"l","holder":"Z","id":"zzz","token":99,"ttl_ms":15000,"renewed_seq":100,"released":true}`)
		if _, err := e.store.Put(ctx, lease.Key("", "l"), bytes.NewReader(foreign), int64(len(foreign)),
			objstore.PutOptions{Cond: objstore.Condition{IfMatch: info.ETag}}); err != nil {
			t.Fatal(err)
		}
		<-a.Lost()
		if got := gauge("fencefs_lease_held", "lease=l,"); got != 0 {
			t.Errorf("held after the loss = %v, want 0", got)
		}
		if got := gauge("fencefs_lease_losses_total", "lease=l,"); got != 1 {
			t.Errorf("losses = %v, want 1", got)
		}

		// The same process acquires again (Z released) and releases.
		b := acquire("B", 100)
		if got := gauge("fencefs_lease_held", "lease=l,"); got != 1 {
			t.Errorf("held after the second Acquire = %v, want 1", got)
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got := gauge("fencefs_lease_held", "lease=l,"); got != 0 {
			t.Errorf("held after Release = %v, want 0", got)
		}
		if got := gauge("fencefs_lease_losses_total", "lease=l,"); got != 1 {
			t.Errorf("losses after a release = %v, want still 1", got)
		}
		n := 0
		for _, mf := range mustGather(t, reg) {
			if mf.GetName() == "fencefs_lease_acquisitions_total" {
				n = len(mf.GetMetric())
			}
		}
		if n != 2 {
			t.Errorf("%d acquisition series, want 2 (created, released)", n)
		}
	})
}

func mustGather(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}
