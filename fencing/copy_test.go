package fencing

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
)

// TestCopyFromAKnownSourceAnswersAsCopy checks that CopyFrom, which trusts
// the caller's description of the source instead of reading it, refuses
// exactly what Copy refuses, with the same errors, whatever happened to the
// source or the destination since the caller read the source; and that it
// reads the source only when the store refused the copy.
func TestCopyFromAKnownSourceAnswersAsCopy(t *testing.T) {
	cases := []struct {
		name string
		// meanwhile changes the bucket after A wrote r/src (as known),
		// before the copy; s is the bucket, seen by a reader that
		// learns nothing from the register.
		meanwhile func(t *testing.T, ctx context.Context, s objstore.Store, known objstore.ObjectInfo)
		mode      Mode  // A's; "" is strict
		want      error // nil: the copy lands
		srcReads  int32 // Stats of r/src by CopyFrom (memstore only; -1: any)
	}{
		{"an unchanged source is copied without reading it", nil, "", nil, 0},
		{"a source another client overwrote is stale",
			func(t *testing.T, ctx context.Context, s objstore.Store, _ objstore.ObjectInfo) {
				rawPut(t, ctx, s, "r/src", "other content")
			}, "", ErrStale, 1},
		{"a source a newer epoch wrote fences the copier",
			newerEpochWritesSource, "", ErrFenced, -1}, // B's bind sealed A's journal: A may learn it there first
		{"a source a newer epoch wrote fences the copier that learns it from the source",
			newerEpochWritesSource, ModeFast, ErrFenced, 1},
		{"a deleted source is not found",
			func(t *testing.T, ctx context.Context, s objstore.Store, _ objstore.ObjectInfo) {
				if err := s.Delete(ctx, "r/src", objstore.Condition{}); err != nil {
					t.Fatal(err)
				}
			}, "", objstore.ErrNotFound, 1},
		{"a destination created meanwhile is stale, the source intact",
			func(t *testing.T, ctx context.Context, s objstore.Store, _ objstore.ObjectInfo) {
				rawPut(t, ctx, s, "r/dst", "someone else's")
			}, "", ErrStale, 1},
	}
	eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
		for _, tc := range cases {
			for _, useCopy := range []bool{false, true} {
				name := tc.name + "/CopyFrom"
				if useCopy {
					name = tc.name + "/Copy"
				}
				t.Run(name, func(t *testing.T) {
					ctx := testCtx(t, 30*time.Second)
					s := newStore()
					a := newGuard(t, staleRegister{s}, Config{Holder: "A", Mode: tc.mode})
					bind(t, ctx, a, 1)
					known, err := gput(ctx, a, "r/src", "content", Version{})
					if err != nil {
						t.Fatal(err)
					}
					if tc.meanwhile != nil {
						tc.meanwhile(t, ctx, s, known)
					}
					var srcReads atomic.Int32
					if ms, ok := s.(*memstore.Store); ok {
						ms.SetHook(func(_ context.Context, ev memstore.Event) error {
							if ev.Op == memstore.OpStat && ev.Phase == memstore.PhaseBefore && ev.Key == "r/src" {
								srcReads.Add(1)
							}
							return nil
						})
						defer ms.SetHook(nil)
					}
					if useCopy {
						_, err = a.Copy(ctx, "r/src", known.ETag, "r/dst", Version{}, nil)
					} else {
						_, err = a.CopyFrom(ctx, known, "r/dst", Version{}, nil)
					}
					switch {
					case tc.want == nil && err != nil:
						t.Fatalf("copy: %v", err)
					case tc.want != nil && !errors.Is(err, tc.want):
						t.Fatalf("copy: err = %v, want %v", err, tc.want)
					}
					if !real && !useCopy && tc.srcReads >= 0 && srcReads.Load() != tc.srcReads {
						t.Errorf("CopyFrom read the source %d times, want %d", srcReads.Load(), tc.srcReads)
					}
					got, info, ok := read(t, ctx, s, "r/dst")
					switch {
					case tc.want == nil && (got != "content" || info.Meta["mode"] != "33188"):
						t.Errorf("r/dst = %q (exists %v, meta %v), want the source's content and metadata", got, ok, info.Meta)
					case tc.want != nil && ok && got == "content":
						t.Errorf("r/dst holds the source's content after a refused copy")
					}
				})
			}
		}
	})
}

// newerEpochWritesSource binds epoch 2 on a guard B of s and writes r/src
// over known with it.
func newerEpochWritesSource(t *testing.T, ctx context.Context, s objstore.Store, known objstore.ObjectInfo) {
	b := newGuard(t, s, Config{Holder: "B"})
	bind(t, ctx, b, 2)
	if _, err := gput(ctx, b, "r/src", "B's content", VersionOf(known)); err != nil {
		t.Fatal(err)
	}
}

// boundWithSource returns a guard A of a new memstore bound to epoch 1,
// and r/src as A wrote it.
func boundWithSource(t *testing.T, ctx context.Context) (*memstore.Store, *Guard, objstore.ObjectInfo) {
	t.Helper()
	s := memstore.New()
	a := newGuard(t, s, Config{Holder: "A"})
	bind(t, ctx, a, 1)
	src, err := gput(ctx, a, "r/src", "content", Version{})
	if err != nil {
		t.Fatal(err)
	}
	return s, a, src
}

// TestASmallCopyReadsItsSourceWhileTheIntentIsWritten checks that a strict
// copy of a small source does not wait for its journal write to read the
// source: the read goes out before the journal write ends, and only the
// copy's PUT follows it.
func TestASmallCopyReadsItsSourceWhileTheIntentIsWritten(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	s, a, src := boundWithSource(t, ctx)
	var journalDone atomic.Bool
	var readBefore, readAfter atomic.Int32 // the source's reads, before and after the journal write ended
	s.SetHook(func(_ context.Context, ev memstore.Event) error {
		switch {
		case ev.Op == memstore.OpPut && strings.Contains(ev.Key, "/intents/") && ev.Phase == memstore.PhaseBefore:
			time.Sleep(300 * time.Millisecond) // the journal write's round trip
		case ev.Op == memstore.OpPut && strings.Contains(ev.Key, "/intents/"):
			journalDone.Store(true)
		case ev.Op == memstore.OpGet && ev.Key == "r/src" && ev.Phase == memstore.PhaseBefore:
			if journalDone.Load() {
				readAfter.Add(1)
			} else {
				readBefore.Add(1)
			}
		}
		return nil
	})
	defer s.SetHook(nil)
	if _, err := a.CopyFrom(ctx, src, "r/dst", Version{}, nil); err != nil {
		t.Fatal(err)
	}
	if readBefore.Load() != 1 || readAfter.Load() != 0 {
		t.Errorf("the source was read %d times before the journal write ended and %d after; want once, before",
			readBefore.Load(), readAfter.Load())
	}
	if got, _, ok := read(t, ctx, s, "r/dst"); !ok || got != "content" {
		t.Errorf("r/dst = %q, %v; want the source's content", got, ok)
	}
}
