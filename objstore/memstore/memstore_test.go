package memstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
	"github.com/fencefs/fencefs/objstore/storetest"
)

// The suite runs with a 1 MiB multipart threshold (as against the
// gateway), which keeps its ShapeAuto-above-threshold objects small; with
// listings that carry metadata (as MinIO's) and without (as the gateway's).
func TestConformance(t *testing.T) {
	for _, lm := range []bool{false, true} {
		t.Run(fmt.Sprintf("ListMetadata=%v", lm), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) objstore.Store {
				return memstore.NewWithOptions(memstore.Options{ListMetadata: lm,
					Sizing: objstore.Sizing{MultipartThreshold: 1 << 20, PartSize: objstore.MinPartSize}})
			})
		})
	}
}

func put(t *testing.T, s objstore.Store, key, body string, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	t.Helper()
	return s.Put(context.Background(), key, strings.NewReader(body), int64(len(body)), opts)
}

func content(t *testing.T, s objstore.Store, key string) string {
	t.Helper()
	b, _ := storetest.ReadAll(t, context.Background(), s, key, objstore.GetOptions{})
	return string(b)
}

func TestHookBeforeErrorPreventsTheWrite(t *testing.T) {
	s := memstore.New()
	injected := errors.New("injected")
	s.SetHook(func(_ context.Context, ev memstore.Event) error {
		if ev.Op == memstore.OpPut && ev.Phase == memstore.PhaseBefore {
			return injected
		}
		return nil
	})
	if _, err := put(t, s, "k", "x", objstore.PutOptions{}); !errors.Is(err, injected) {
		t.Fatalf("got %v", err)
	}
	s.SetHook(nil)
	if _, err := s.Stat(context.Background(), "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("write applied despite the before-hook error: %v", err)
	}
}

func TestHookAfterErrorLosesTheResponse(t *testing.T) {
	s := memstore.New()
	var seen []memstore.Event
	s.SetHook(func(_ context.Context, ev memstore.Event) error {
		seen = append(seen, ev)
		if ev.Op == memstore.OpPut && ev.Phase == memstore.PhaseAfter {
			return objstore.ErrUnavailable
		}
		return nil
	})
	_, err := put(t, s, "k", "x", objstore.PutOptions{Cond: objstore.Condition{IfNoneMatch: true}})
	if !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("got %v", err)
	}
	s.SetHook(nil)
	if got := content(t, s, "k"); got != "x" {
		t.Fatalf("the write must be applied even though its response was lost: %q", got)
	}
	if len(seen) != 2 || seen[0].Phase != memstore.PhaseBefore || seen[1].Phase != memstore.PhaseAfter ||
		seen[1].Err != nil || seen[1].Info.ETag == "" || !seen[1].Cond.IfNoneMatch {
		t.Fatalf("hook events %+v", seen)
	}
	// A retry of the same conditional write now fails its precondition:
	// the ambiguity the fencing layer resolves by write id.
	_, err = put(t, s, "k", "x", objstore.PutOptions{Cond: objstore.Condition{IfNoneMatch: true}})
	if !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("retry: %v", err)
	}
}

func TestHookAfterSeesPreconditionFailure(t *testing.T) {
	s := memstore.New()
	if _, err := put(t, s, "k", "x", objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var after memstore.Event
	s.SetHook(func(_ context.Context, ev memstore.Event) error {
		if ev.Phase == memstore.PhaseAfter {
			after = ev
		}
		return nil
	})
	err := s.Delete(context.Background(), "k", objstore.Condition{IfMatch: "0123456789abcdef0123456789abcdef"})
	if !errors.Is(err, objstore.ErrPrecondition) || !errors.Is(after.Err, objstore.ErrPrecondition) || after.Op != memstore.OpDelete {
		t.Fatalf("err %v, after-event %+v", err, after)
	}
}

// A hook that blocks pauses the operation before its precondition is
// evaluated: another writer can change the key meanwhile, and the paused
// write then fails its precondition (the GC-pause scenario).
func TestHookPauseThenPreconditionFails(t *testing.T) {
	s := memstore.New()
	base, err := put(t, s, "k", "base", objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	paused, resume := make(chan struct{}), make(chan struct{})
	s.SetHook(func(ctx context.Context, ev memstore.Event) error {
		if ev.Op == memstore.OpPut && ev.Phase == memstore.PhaseBefore && ev.Key == "k" && ev.Cond.IfMatch != "" {
			close(paused)
			select {
			case <-resume:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.Put(ctx, "k", strings.NewReader("old writer"), 10, objstore.PutOptions{Cond: objstore.Condition{IfMatch: base.ETag}})
		done <- err
	}()
	<-paused
	if _, err := put(t, s, "k", "new writer", objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	close(resume)
	if err := <-done; !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("paused writer: %v", err)
	}
	if got := content(t, s, "k"); got != "new writer" {
		t.Fatalf("content %q", got)
	}
}

func TestUploadsAddListAbort(t *testing.T) {
	s := memstore.New()
	ctx := context.Background()
	t0 := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	id1 := s.AddUpload("a/x", t0)
	id2 := s.AddUpload("b/y", t0)
	var got []objstore.Upload
	if err := s.ListUploads(ctx, "a/", func(u objstore.Upload) error { got = append(got, u); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].UploadID != id1 || got[0].Key != "a/x" || !got[0].Initiated.Equal(t0) {
		t.Fatalf("uploads %+v", got)
	}
	if err := s.AbortUpload(ctx, "a/x", id2); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("abort with the wrong key: %v", err)
	}
	if err := s.AbortUpload(ctx, "a/x", id1); err != nil {
		t.Fatal(err)
	}
	if err := s.AbortUpload(ctx, "a/x", id1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("second abort: %v", err)
	}
}

func TestPutWithShortBodyFails(t *testing.T) {
	s := memstore.New()
	_, err := s.Put(context.Background(), "k", bytes.NewReader([]byte("abc")), 10, objstore.PutOptions{})
	if err == nil {
		t.Fatal("a body shorter than size must fail")
	}
	if _, err := s.Stat(context.Background(), "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("short body published: %v", err)
	}
}

func TestProbeDetectsQuirks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   memstore.Options
		failed objstore.Capability // the one check that must fail
	}{
		{"conforming", memstore.Options{ListMetadata: true}, ""},
		{"listings without metadata", memstore.Options{}, objstore.CheckListMetadata},
		{"DELETE ignores If-Match", memstore.Options{ListMetadata: true, IgnoreDeleteConditions: true}, objstore.CheckConditionalDelete},
		{"copy ignores destination conditions", memstore.Options{ListMetadata: true, IgnoreCopyDestConditions: true}, objstore.CheckConditionalCopyDest},
		{"Complete ignores conditions", memstore.Options{ListMetadata: true, IgnoreCompleteConditions: true}, objstore.CheckConditionalComplete},
		{"If-Match on a missing key creates", memstore.Options{ListMetadata: true, IfMatchMissingCreates: true}, objstore.CheckIfMatchMissingRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := memstore.NewWithOptions(tc.opts)
			caps := objstore.Probe(context.Background(), s, "pfx/")
			if caps.Err != nil {
				t.Fatal(caps.Err)
			}
			for _, c := range caps.Checks() {
				wantOK := c.Name != tc.failed
				if c.OK != wantOK {
					t.Errorf("%s: ok=%v (%s), want %v", c.Name, c.OK, c.Reason, wantOK)
				}
				if !c.OK && c.Reason == "" {
					t.Errorf("%s failed without a reason", c.Name)
				}
			}
			if err := caps.Require(objstore.AllCapabilities()...); (err == nil) != (tc.failed == "") {
				t.Errorf("Require(all): %v", err)
			}
			if n := s.Len(); n != 0 {
				t.Errorf("probe left %d scratch objects", n)
			}
		})
	}
}

func TestProbeIgnoringIfNoneMatchFailsCreateChecks(t *testing.T) {
	s := memstore.NewWithOptions(memstore.Options{IgnoreIfNoneMatch: true})
	caps := objstore.Probe(context.Background(), s, "")
	if caps.Has(objstore.CheckIfNoneMatchCreate) || caps.Has(objstore.CheckParallelCreateOneWinner) {
		t.Fatalf("checks passed on a store ignoring If-None-Match: %+v", caps.Checks())
	}
	if err := caps.Require(objstore.CheckIfMatchCAS, objstore.CheckIfNoneMatchCreate); err == nil || !strings.Contains(err.Error(), string(objstore.CheckIfNoneMatchCreate)) {
		t.Fatalf("Require: %v", err)
	}
}

func TestProbeStopsOnUnavailableStorageAndCleansUp(t *testing.T) {
	s := memstore.New()
	calls := 0
	s.SetHook(func(_ context.Context, ev memstore.Event) error {
		if ev.Op == memstore.OpCopy && ev.Phase == memstore.PhaseBefore {
			calls++
			return objstore.ErrUnavailable
		}
		return nil
	})
	caps := objstore.Probe(context.Background(), s, "")
	if !errors.Is(caps.Err, objstore.ErrUnavailable) || caps.Has(objstore.CheckConditionalCopyDest) || caps.Has(objstore.CheckParallelCreateOneWinner) {
		t.Fatalf("caps %+v", caps)
	}
	if !caps.Has(objstore.CheckIfMatchCAS) || !strings.HasPrefix(caps.Reasons[objstore.CheckStrongListAfterWrite], "not checked") {
		t.Fatalf("caps %+v", caps)
	}
	if calls != 1 {
		t.Fatalf("probe went on after the storage became unavailable (%d copies)", calls)
	}
	if err := caps.Require(objstore.AllCapabilities()...); !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("Require: %v", err)
	}
	if s.Len() != 0 {
		t.Fatalf("scratch keys left: %d", s.Len())
	}
}
