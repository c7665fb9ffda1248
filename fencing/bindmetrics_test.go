package fencing

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore/memstore"
	"github.com/prometheus/client_golang/prometheus"
)

// TestBindsAreCountedByResult: every Bind counts once in
// fencefs_fencing_binds_total under the class of its error (the operators'
// alert on bind failures reads it), and every result is exported as 0
// before the first bind.
func TestBindsAreCountedByResult(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	s := memstore.New()
	reg := prometheus.NewRegistry()
	g := newGuard(t, s, Config{Holder: "A", Registerer: reg})
	for _, r := range []string{"ok", "bad_token", "fenced", "error"} {
		if v, ok := gather(t, reg)["fencefs_fencing_binds_total{result="+r+"}"]; !ok || v != 0 {
			t.Errorf("before any bind: binds_total{result=%s} = %v (exported %v), want 0", r, v, ok)
		}
	}
	errStore := errors.New("injected: storage unreachable")
	for _, tc := range []struct {
		name   string
		token  uint64
		hook   memstore.Hook
		result string
	}{
		{"a first token binds", 5, nil, "ok"},
		{"binding a lower token is refused", 4, nil, "bad_token"},
		{"storage errors fail the bind", 6, func(context.Context, memstore.Event) error { return errStore }, "error"},
		{"the token bound again once storage is back", 6, nil, "ok"},
	} {
		before := gather(t, reg)["fencefs_fencing_binds_total{result="+tc.result+"}"]
		s.SetHook(tc.hook)
		_, err := g.Bind(ctx, tc.token)
		s.SetHook(nil)
		if (err == nil) != (tc.result == "ok") {
			t.Fatalf("%s: Bind(%d) = %v", tc.name, tc.token, err)
		}
		if after := gather(t, reg)["fencefs_fencing_binds_total{result="+tc.result+"}"]; after != before+1 {
			t.Errorf("%s: binds_total{result=%s} went %v → %v, want one more", tc.name, tc.result, before, after)
		}
	}
}
