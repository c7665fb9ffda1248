package s3_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/storetest"
)

// TestProbeFindsTheKeyLockWhileABodyArrivesOnMinIOOnly: the probe's
// lock-free-body row fails on MinIO (one drive and four), which holds a
// key's lock while a conditional PUT's body arrives, and passes on the
// Versity gateway; the probe takes about a second longer for it on MinIO,
// and leaves nothing behind. On the store that needs it, the limit makes
// a ShapeAuto commit above 56 KiB a one-part multipart upload (a "-1"
// ETag) and keeps one of 56 KiB a plain PUT.
func TestProbeFindsTheKeyLockWhileABodyArrivesOnMinIOOnly(t *testing.T) {
	gateway.ForEachServer(t, gateway.AllServers, func(t *testing.T, gw *gateway.Gateway) {
		cfg := config(t, gw)
		cfg.MultipartThreshold = 0 // the defaults, as a mount has them
		cfg.PartSize = 0
		s := newStore(t, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		caps := objstore.Probe(ctx, s, "probe/")
		locks := gw.Kind != gateway.Versity
		t.Logf("%s: %s = %v (%s); the probe took %v", gw.Kind, objstore.CheckLockFreeBody,
			caps.Has(objstore.CheckLockFreeBody), caps.Reasons[objstore.CheckLockFreeBody], caps.Duration.Round(time.Millisecond))
		if got := caps.Has(objstore.CheckLockFreeBody); got == locks {
			t.Fatalf("%s: %s = %v, want %v (%s)", gw.Kind, objstore.CheckLockFreeBody, got, !locks, caps.Reasons[objstore.CheckLockFreeBody])
		}
		var left []string
		if err := s.List(ctx, "probe/", "", func(e objstore.Entry) error { left = append(left, e.Key); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(left) > 0 {
			t.Errorf("the probe left %v behind", left)
		}
		if !locks {
			return
		}
		s.LimitPlainToOneWrite()
		for _, tc := range []struct {
			size  int64
			parts int // 0: plain
		}{{56 << 10, 0}, {56<<10 + 1, 1}, {1 << 20, 1}, {9 << 20, 2}} {
			body := bytes.Repeat([]byte("z"), int(tc.size))
			info, err := s.Put(ctx, "limited", bytes.NewReader(body), tc.size, objstore.PutOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := objstore.IsMultipartETag(info.ETag); n != tc.parts {
				t.Errorf("a %d-byte commit got ETag %s, want %d parts (0: plain)", tc.size, info.ETag, tc.parts)
			}
		}
	})
}

// TestConformanceWithPlainPutsLimitedToOneWrite: the conformance suite,
// which predicts every write's ETag from the store's Sizing, holds on a
// store whose plain PUTs are limited as on MinIO.
func TestConformanceWithPlainPutsLimitedToOneWrite(t *testing.T) {
	gw := gateway.ForKind(t, gateway.MinIO)
	q := storetest.Quirks{DeleteIgnoresIfMatch: gw.DeleteIgnoresIfMatch()}
	storetest.RunWithQuirks(t, q, func(t *testing.T) objstore.Store {
		s := newStore(t, config(t, gw))
		s.LimitPlainToOneWrite()
		return s
	})
}
