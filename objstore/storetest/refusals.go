package storetest

// This file holds the conformance cases for invalid requests, cancelled
// contexts and the capability probe.

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fencefs/fencefs/objstore"
)

func testInvalid(t *testing.T, ctx context.Context, s objstore.Store) {
	body := bytes.NewReader([]byte("x"))
	for _, tc := range []struct {
		name string
		key  string
		opts objstore.PutOptions
	}{
		{"empty key", "", objstore.PutOptions{}},
		{"upper-case metadata key", "k", objstore.PutOptions{Meta: map[string]string{"Mode": "1"}}},
		{"non-ASCII metadata value", "k", objstore.PutOptions{Meta: map[string]string{"m": "é"}}},
		{"both conditions", "k", objstore.PutOptions{Cond: objstore.Condition{IfMatch: "x", IfNoneMatch: true}}},
		{"too many parts", "k", objstore.PutOptions{Shape: objstore.ShapeMultipart, Parts: objstore.MaxParts + 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Put(ctx, tc.key, body, 1, tc.opts)
			wantErr(t, "put", err, objstore.ErrInvalid)
			wantMissing(t, ctx, s, "k")
		})
	}
}

func testCancelled(t *testing.T, ctx context.Context, s objstore.Store) {
	MustPut(t, ctx, s, "k", []byte("x"), objstore.PutOptions{})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Stat(cctx, "k"); !errors.Is(err, context.Canceled) {
		t.Fatalf("stat: %v", err)
	}
	if _, err := s.Put(cctx, "k2", bytes.NewReader([]byte("y")), 1, objstore.PutOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("put: %v", err)
	}
	wantMissing(t, ctx, s, "k2")
}

func testProbe(t *testing.T, ctx context.Context, s objstore.Store, q Quirks) {
	MustPut(t, ctx, s, "data/file", []byte("user data"), objstore.PutOptions{})
	caps := objstore.Probe(ctx, s, "data/")
	for _, c := range caps.Checks() {
		if c.Name == objstore.CheckConditionalDelete && q.DeleteIgnoresIfMatch {
			if c.OK {
				t.Errorf("probe: %s passed on a store whose DELETE ignores If-Match", c.Name)
			}
			continue
		}
		if !c.OK && !c.Optional {
			t.Errorf("probe: %s failed: %s", c.Name, c.Reason)
		}
	}
	// The probe leaves nothing behind but what was there.
	var keys []string
	if err := s.List(ctx, "", "", func(e objstore.Entry) error { keys = append(keys, e.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(keys, ",") != "data/file" {
		t.Errorf("keys after probe: %v", keys)
	}
	assertNoUploads(t, ctx, s, "")
}
