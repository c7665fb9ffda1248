package fencing

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// changeKey is what happened to a key between the read a mutation is
// based on and its commit.
type changeKey func(t *testing.T, s objstore.Store, key string)

// stampedPut writes key directly with the stamp of epoch (""= unstamped).
func stampedPut(epoch string) changeKey {
	return func(t *testing.T, s objstore.Store, key string) {
		t.Helper()
		meta := map[string]string{}
		if epoch != "" {
			meta[MetaEpoch] = epoch
		}
		body := "changed by epoch " + epoch
		if _, err := s.Put(testCtx(t, 10*time.Second), key, strings.NewReader(body), int64(len(body)),
			objstore.PutOptions{Meta: meta}); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
}

func rawDelete(t *testing.T, s objstore.Store, key string) {
	t.Helper()
	if err := s.Delete(testCtx(t, 10*time.Second), key, objstore.Condition{}); err != nil {
		t.Fatalf("delete %s: %v", key, err)
	}
}

func TestCreateRetriesOverATombstoneAndRefusesALiveObject(t *testing.T) {
	tests := []struct {
		name    string
		before  func(t *testing.T, g *Guard, s objstore.Store, key string)
		wantErr error
	}{
		{"an absent key is created", func(*testing.T, *Guard, objstore.Store, string) {}, nil},
		{"a tombstone is created over", func(t *testing.T, g *Guard, s objstore.Store, key string) {
			ctx := testCtx(t, 10*time.Second)
			info, err := gput(ctx, g, key, "deleted soon", Version{})
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Delete(ctx, key, VersionOf(info)); err != nil {
				t.Fatal(err)
			}
			if cur, err := s.Stat(ctx, key); err != nil || !isTombstone(cur) {
				t.Fatalf("no tombstone at %s: %+v, %v", key, cur, err)
			}
		}, nil},
		{"a live object is ErrExist", func(t *testing.T, _ *Guard, s objstore.Store, key string) {
			rawPut(t, testCtx(t, 10*time.Second), s, key, "there first")
		}, ErrExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t, 30*time.Second)
			s := newMem()
			g := newGuard(t, s, Config{Holder: "A", TombstoneDeletes: true})
			bind(t, ctx, g, 17)
			tt.before(t, g, s, "k")
			_, err := g.Create(ctx, "k", bytesReader([]byte("new")), 3, Meta{"mode": "33188"})
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("Create = %v, want %v", err, tt.wantErr)
			}
			if err == nil {
				if got, _, _ := read(t, ctx, s, "k"); got != "new" {
					t.Errorf("k holds %q, want the create's content", got)
				}
			}
		})
	}
}

func TestReplacementMovesToAVersionOnlyAnOlderEpochWrote(t *testing.T) {
	tests := []struct {
		name     string
		absent   bool // the replacement is based on nothing (a create)
		change   changeKey
		replaced bool // else ErrStale (or ErrExist for a create)
	}{
		{"a write by an older epoch is replaced", false, stampedPut("16"), true},
		{"a removal after the read is replaced", false, rawDelete, true},
		{"a write by this epoch stays a conflict", false, stampedPut("17"), false},
		{"a write by a newer epoch fences", false, stampedPut("18"), false},
		{"an unstamped write stays a conflict", false, stampedPut(""), false},
		{"a create over an older epoch's object replaces it", true, stampedPut("16"), true},
		{"a create over this epoch's object stays ErrExist", true, stampedPut("17"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t, 30*time.Second)
			s := newMem()
			g := newGuard(t, s, Config{Holder: "A"})
			base := Version{}
			if !tt.absent {
				base = VersionOf(rawPut(t, ctx, s, "k", "read"))
			}
			bind(t, ctx, g, 17)
			tt.change(t, s, "k")
			_, err := g.Replace(ctx, "k", bytesReader([]byte("replacement")), 11, base, Meta{"mode": "33188"})
			checkReplaced(t, err, tt.replaced, tt.absent)
		})
	}
}

func TestStreamedReplacementMovesToAVersionOnlyAnOlderEpochWrote(t *testing.T) {
	tests := []struct {
		name     string
		change   changeKey
		replaced bool
	}{
		{"a write by an older epoch is replaced", stampedPut("16"), true},
		{"a removal after the read is replaced", rawDelete, true},
		{"a write by this epoch stays a conflict", stampedPut("17"), false},
		{"an unstamped write stays a conflict", stampedPut(""), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t, 30*time.Second)
			s := newMem()
			g := newGuard(t, s, Config{Holder: "A"})
			base := VersionOf(rawPut(t, ctx, s, "k", "read"))
			bind(t, ctx, g, 17)
			meta := Meta{"mode": "33188"}
			st, err := g.StartStream(ctx, "k", base, meta)
			if err != nil {
				t.Fatal(err)
			}
			data := streamContent(3)
			parts := uploadAll(t, ctx, st, data)
			tt.change(t, s, "k")
			_, err = g.CommitReplacement(ctx, st, parts, meta)
			if !tt.replaced {
				st.Abort(ctx)
			}
			checkReplaced(t, err, tt.replaced, false)
			if got, _, _ := read(t, ctx, s, "k"); tt.replaced && !bytes.Equal([]byte(got), data) {
				t.Errorf("k does not hold the streamed content")
			}
		})
	}
}

// checkReplaced checks the result of a replacement: success, or the
// refusal that stands (ErrExist for a create, ErrStale or ErrFenced).
func checkReplaced(t *testing.T, err error, replaced, create bool) {
	t.Helper()
	switch {
	case replaced && err != nil:
		t.Fatalf("replacement = %v, want it moved to the current version", err)
	case replaced:
	case create && !errors.Is(err, ErrExist):
		t.Fatalf("replacing create = %v, want ErrExist", err)
	case !create && !errors.Is(err, ErrStale) && !errors.Is(err, ErrFenced):
		t.Fatalf("replacement = %v, want ErrStale or ErrFenced", err)
	}
}
