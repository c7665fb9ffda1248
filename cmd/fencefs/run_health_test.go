package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/lease"
	"github.com/fencefs/fencefs/objstore/memstore"
)

// TestRunHealthFollowsTheLease checks fencefs run's /healthz answers:
// 503 while waiting, 200 with the token while held, 503 naming the end
// once released.
func TestRunHealthFollowsTheLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := lease.Acquire(ctx, memstore.New(), "primary", lease.Options{
		Bind: func(context.Context) (uint64, error) { return 7, nil }})
	if err != nil {
		t.Fatal(err)
	}
	held := func() lease.Leader { return l }
	for _, tc := range []struct {
		name   string
		l      func() lease.Leader
		end    bool // release first
		code   int
		inBody string
	}{
		{"waiting", func() lease.Leader { return nil }, false, 503, "waiting for lease primary"},
		{"held", held, false, 200, "ok lease=primary token=7"},
		{"released", held, true, 503, "lease primary ended: lease released"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.end {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			code, body := leaseHealth("primary", tc.l())
			if code != tc.code || !strings.Contains(body, tc.inBody) {
				t.Errorf("leaseHealth = %d %q; want %d with %q", code, body, tc.code, tc.inBody)
			}
		})
	}
}
