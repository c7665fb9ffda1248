package fencing

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
)

// streamContent is a two-part content: one minimum-size part and a tail.
func streamContent(seed byte) []byte {
	b := make([]byte, objstore.MinPartSize+1234)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// uploadAll uploads data as the stream's parts (MinPartSize, then the rest).
func uploadAll(t *testing.T, ctx context.Context, s *Stream, data []byte) []objstore.Part {
	t.Helper()
	r := bytes.NewReader(data)
	p1, err := s.UploadPart(ctx, 1, r, 0, objstore.MinPartSize)
	if err != nil {
		t.Fatalf("part 1: %v", err)
	}
	p2, err := s.UploadPart(ctx, 2, r, objstore.MinPartSize, int64(len(data))-objstore.MinPartSize)
	if err != nil {
		t.Fatalf("part 2: %v", err)
	}
	return []objstore.Part{p1, p2}
}

func noUploads(t *testing.T, ctx context.Context, s objstore.Store) {
	t.Helper()
	var left []string
	if err := s.ListUploads(ctx, "", func(u objstore.Upload) error { left = append(left, u.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("uploads left behind: %v", left)
	}
}

// TestStreamsCommitWithPutsProtocol checks streamed (piecewise multipart)
// commits: they publish with the stamps and metadata, are conditioned on
// the base like Put (and, rebased, publish on the current version), are
// fenced by a newer epoch raised while the parts were uploading, and refuse
// to publish anything that differs from what was started
// (ErrStreamChanged) — never leaving an upload behind once aborted.
func TestStreamsCommitWithPutsProtocol(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
		meta := Meta{"mode": "33188"}
		cases := []struct {
			name string
			run  func(t *testing.T, ctx context.Context, s objstore.Store, g *Guard)
		}{
			{"a created stream publishes its parts with the stamps", func(t *testing.T, ctx context.Context, s objstore.Store, g *Guard) {
				st, err := g.StartStream(ctx, "k", Version{}, meta)
				if err != nil {
					t.Fatal(err)
				}
				data := streamContent(1)
				parts := uploadAll(t, ctx, st, data)
				if _, _, ok := read(t, ctx, s, "k"); ok {
					t.Fatal("the key exists before the commit")
				}
				info, err := g.CommitStream(ctx, st, parts, meta)
				if err != nil {
					t.Fatal(err)
				}
				got, cur, ok := read(t, ctx, s, "k")
				if !ok || got != string(data) || cur.ETag != info.ETag {
					t.Fatalf("key holds %d bytes at %s (ok %v); want the streamed %d bytes at %s", len(got), cur.ETag, ok, len(data), info.ETag)
				}
				if st := stampOf(cur.Meta); st.Epoch != 1 || st.WID == "" || cur.Meta["mode"] != "33188" {
					t.Fatalf("metadata %v: want the caller's mode and epoch-1 stamps", cur.Meta)
				}
				if !maps.Equal(info.Meta, cur.Meta) {
					t.Fatalf("CommitStream's info.Meta %v differs from the stored %v", info.Meta, cur.Meta)
				}
				noUploads(t, ctx, s)
			}},
			{"an overwrite stream is conditioned on its base", func(t *testing.T, ctx context.Context, s objstore.Store, g *Guard) {
				v1 := rawPut(t, ctx, s, "k", "v1")
				st, err := g.StartStream(ctx, "k", VersionOf(v1), meta)
				if err != nil {
					t.Fatal(err)
				}
				parts := uploadAll(t, ctx, st, streamContent(2))
				rawPut(t, ctx, s, "k", "someone else")
				_, err = g.CommitStream(ctx, st, parts, meta)
				if !errors.Is(err, ErrStale) {
					t.Fatalf("commit over a changed base: %v, want ErrStale", err)
				}
				if got, _, _ := read(t, ctx, s, "k"); got != "someone else" {
					t.Fatalf("key holds %q", got)
				}
				// The upload is kept: rebased on the current version, the
				// same parts publish (a whole-file replacement's retry).
				cur, _, _ := g.head(ctx, "k")
				st.Rebase(VersionOf(cur))
				if _, err := g.CommitStream(ctx, st, parts, meta); err != nil {
					t.Fatalf("commit rebased on the current version: %v", err)
				}
				if got, _, _ := read(t, ctx, s, "k"); got != string(streamContent(2)) {
					t.Fatalf("key holds %d bytes, want the stream's", len(got))
				}
				noUploads(t, ctx, s)
			}},
			{"a newer epoch raised during the upload fences the commit", func(t *testing.T, ctx context.Context, s objstore.Store, g *Guard) {
				st, err := g.StartStream(ctx, "k", Version{}, meta)
				if err != nil {
					t.Fatal(err)
				}
				parts := uploadAll(t, ctx, st, streamContent(3))
				b := newGuard(t, s, Config{Holder: "B"})
				bind(t, ctx, b, 2)
				_, err = g.CommitStream(ctx, st, parts, meta)
				mustFenced(t, "commit after epoch 2", err, "")
				if _, _, ok := read(t, ctx, s, "k"); ok {
					t.Fatal("the fenced stream was published")
				}
				st.Abort(ctx)
				noUploads(t, ctx, s)
			}},
			{"changed metadata is ErrStreamChanged and publishes nothing", func(t *testing.T, ctx context.Context, s objstore.Store, g *Guard) {
				st, err := g.StartStream(ctx, "k", Version{}, meta)
				if err != nil {
					t.Fatal(err)
				}
				parts := uploadAll(t, ctx, st, streamContent(4))
				_, err = g.CommitStream(ctx, st, parts, Meta{"mode": "33261"})
				if !errors.Is(err, ErrStreamChanged) {
					t.Fatalf("commit with other metadata: %v, want ErrStreamChanged", err)
				}
				if _, _, ok := read(t, ctx, s, "k"); ok {
					t.Fatal("published although the metadata changed")
				}
				st.Abort(ctx)
				noUploads(t, ctx, s)
				// The caller's fallback, Put, works.
				if _, err := g.Put(ctx, "k", bytes.NewReader([]byte("x")), 1, Version{}, Meta{"mode": "33261"}); err != nil {
					t.Fatal(err)
				}
			}},
			{"an upload aborted by someone else is ErrStreamChanged", func(t *testing.T, ctx context.Context, s objstore.Store, g *Guard) {
				st, err := g.StartStream(ctx, "k", Version{}, meta)
				if err != nil {
					t.Fatal(err)
				}
				parts := uploadAll(t, ctx, st, streamContent(5))
				if err := s.ListUploads(ctx, "k", func(u objstore.Upload) error { return s.AbortUpload(ctx, u.Key, u.UploadID) }); err != nil {
					t.Fatal(err)
				}
				_, err = g.CommitStream(ctx, st, parts, meta)
				if !errors.Is(err, ErrStreamChanged) {
					t.Fatalf("commit of an aborted upload: %v, want ErrStreamChanged", err)
				}
			}},
		}
		for _, tc := range cases {
			t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
				ctx := testCtx(t, 60*time.Second)
				s := newStore()
				g := newGuard(t, s, Config{Holder: "A"})
				bind(t, ctx, g, 1)
				tc.run(t, ctx, s, g)
			})
		}
	})
}

// TestACommitWhoseResponseWasLostIsRecognisedByItsWriteID checks the
// unknown outcomes of Put and CommitStream: the error carries the write id,
// Landed finds it in the bucket when the commit landed, and a streamed
// commit committed again recognises its own earlier attempt instead of
// reporting someone else's change.
func TestACommitWhoseResponseWasLostIsRecognisedByItsWriteID(t *testing.T) {
	for _, op := range []memstore.Op{memstore.OpPut, memstore.OpCompleteUpload} {
		t.Run(string(op), func(t *testing.T) {
			ctx := testCtx(t, 30*time.Second)
			s := memstore.New()
			g := newGuard(t, s, Config{Holder: "A"})
			bind(t, ctx, g, 1)
			var lose atomic.Bool
			lose.Store(true)
			// The commit applies but its response is lost; every HEAD
			// fails too, so that the mutation cannot resolve it
			// itself and reports the outcome as unknown.
			var blind atomic.Bool
			s.SetHook(func(ctx context.Context, ev memstore.Event) error {
				if ev.Key != "k" || !lose.Load() {
					return nil
				}
				if ev.Phase == memstore.PhaseAfter && ev.Op == op {
					blind.Store(true)
					return objstore.ErrUnavailable // applied, response lost
				}
				if ev.Phase == memstore.PhaseBefore && ev.Op == memstore.OpStat && blind.Load() {
					return objstore.ErrUnavailable
				}
				return nil
			})
			data := streamContent(9)
			var st *Stream
			var parts []objstore.Part
			var err error
			if op == memstore.OpPut {
				_, err = g.Put(ctx, "k", bytes.NewReader(data), int64(len(data)), Version{}, Meta{})
			} else {
				if st, err = g.StartStream(ctx, "k", Version{}, Meta{}); err != nil {
					t.Fatal(err)
				}
				parts = uploadAll(t, ctx, st, data)
				_, err = g.CommitStream(ctx, st, parts, Meta{})
			}
			wid := WriteIDOfUnknown(err)
			if err == nil || wid == "" {
				t.Fatalf("commit with the response lost and the key unreadable: %v; want an unknown outcome with its write id", err)
			}
			lose.Store(false)
			info, landed, err := g.Landed(ctx, "k", wid)
			if err != nil || !landed || info.Size != int64(len(data)) {
				t.Fatalf("Landed(%s) = %v, %v (size %d); want the landed write", wid, landed, err, info.Size)
			}
			if _, landed, _ := g.Landed(ctx, "k", "other"); landed {
				t.Fatal("Landed recognises a write id that is not in the bucket")
			}
			if st != nil {
				if _, err := g.CommitStream(ctx, st, parts, Meta{}); err != nil {
					t.Fatalf("the stream committed again after its Complete landed unseen: %v; want success (its own write id)", err)
				}
			}
		})
	}
}
