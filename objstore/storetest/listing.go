package storetest

// This file holds the conformance cases for listing and bulk deletes.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"testing"

	"github.com/fencefs/fencefs/objstore"
)

func testList(t *testing.T, ctx context.Context, s objstore.Store) {
	// No key is both an object and a prefix of others ("a" and "a/b"):
	// filesystem-backed servers (the Versity gateway's posix backend)
	// cannot store that.
	keys := []string{"a.txt", "a/b", "a/c/d", "a/c/e", "a/d", "a0", "a/", "b/x", "b/y/z", "c", "a/c0"}
	// Directory markers ("a/") are empty, as filesystem-backed servers
	// require.
	body := func(k string) []byte {
		if strings.HasSuffix(k, "/") {
			return []byte{}
		}
		return []byte(k)
	}
	for _, k := range keys {
		MustPut(t, ctx, s, k, body(k), objstore.PutOptions{})
	}
	list := func(prefix, delim string) []string {
		var out []string
		err := s.List(ctx, prefix, delim, func(e objstore.Entry) error {
			if e.IsPrefix {
				if !strings.HasSuffix(e.Key, delim) || e.ETag != "" {
					t.Fatalf("bad prefix entry %+v", e)
				}
				out = append(out, e.Key+"(p)")
				return nil
			}
			if e.Size != int64(len(body(e.Key))) || e.ETag != Predict(t, s, body(e.Key), objstore.ShapePlain, 0) || e.LastModified.IsZero() {
				t.Fatalf("bad entry %+v", e)
			}
			out = append(out, e.Key)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	sorted := append([]string(nil), keys...)
	sort.Strings(sorted)
	for _, tc := range []struct {
		name, prefix, delim string
		want                []string
	}{
		{"everything", "", "", sorted},
		{"top level", "", "/", []string{"a.txt", "a/(p)", "a0", "b/(p)", "c"}},
		{"a dir", "a/", "/", []string{"a/", "a/b", "a/c/(p)", "a/c0", "a/d"}},
		{"a dir recursive", "a/", "", []string{"a/", "a/b", "a/c/d", "a/c/e", "a/c0", "a/d"}},
		{"partial name", "a/c", "/", []string{"a/c/(p)", "a/c0"}},
		{"nothing", "zz", "/", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := list(tc.prefix, tc.delim); strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("list(%q,%q) = %v, want %v", tc.prefix, tc.delim, got, tc.want)
			}
		})
	}
	// Strongly consistent: a write is listed at once, a delete gone at once.
	MustPut(t, ctx, s, "a/new", []byte("a/new"), objstore.PutOptions{})
	if got := list("a/n", ""); len(got) != 1 || got[0] != "a/new" {
		t.Fatalf("after put: %v", got)
	}
	if err := s.Delete(ctx, "a/new", objstore.Condition{}); err != nil {
		t.Fatal(err)
	}
	if got := list("a/n", ""); len(got) != 0 {
		t.Fatalf("after delete: %v", got)
	}
}

// testListMeta: ListMeta lists what List lists, and an entry that carries
// metadata carries exactly what Stat returns for the version it names (a
// store without the feature carries none: CheckListMetadata).
func testListMeta(t *testing.T, ctx context.Context, s objstore.Store) {
	MustPut(t, ctx, s, "m/plain", []byte("plain"), objstore.PutOptions{})
	MustPut(t, ctx, s, "m/meta", []byte("meta"), objstore.PutOptions{ContentType: "text/plain",
		Meta: map[string]string{"mode": "33188", "mtime": "1700000000.5", "fencefs-epoch": "17"}})
	MustPut(t, ctx, s, "m/sub/x", []byte("x"), objstore.PutOptions{})
	var plain, withMeta []objstore.Entry
	collect := func(out *[]objstore.Entry) func(objstore.Entry) error {
		return func(e objstore.Entry) error { *out = append(*out, e); return nil }
	}
	if err := s.List(ctx, "m/", "/", collect(&plain)); err != nil {
		t.Fatal(err)
	}
	if err := s.ListMeta(ctx, "m/", "/", collect(&withMeta)); err != nil {
		t.Fatal(err)
	}
	if len(plain) != len(withMeta) {
		t.Fatalf("List gave %d entries, ListMeta %d", len(plain), len(withMeta))
	}
	carried := 0
	for i, e := range withMeta {
		p := plain[i]
		if e.Key != p.Key || e.IsPrefix != p.IsPrefix || e.Size != p.Size || e.ETag != p.ETag || e.LastModified.Unix() != p.LastModified.Unix() {
			t.Fatalf("ListMeta entry %+v, List entry %+v", e, p)
		}
		if p.Meta != nil {
			t.Errorf("List entry %s carries metadata", p.Key)
		}
		info, ok := e.Info()
		if !ok {
			continue
		}
		carried++
		st, err := s.Stat(ctx, e.Key)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(info.Meta, st.Meta) || info.ContentType != st.ContentType || !info.LastModified.Equal(st.LastModified) || info.ETag != st.ETag || info.Size != st.Size {
			t.Errorf("listed %s as %+v; Stat says %+v", e.Key, info, st)
		}
	}
	if carried != 0 && carried != 2 {
		t.Errorf("metadata carried for %d of 2 objects", carried)
	}
}

func testListStop(t *testing.T, ctx context.Context, s objstore.Store) {
	for i := 0; i < 5; i++ {
		MustPut(t, ctx, s, fmt.Sprintf("k%d", i), nil, objstore.PutOptions{})
	}
	stop := errors.New("stop")
	n := 0
	err := s.List(ctx, "", "", func(objstore.Entry) error {
		n++
		if n == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 2 {
		t.Fatalf("got %v after %d entries", err, n)
	}
}

func testDeleteMany(t *testing.T, ctx context.Context, s objstore.Store) {
	var keys []string
	for i := range 1005 { // more than one DeleteObjects request
		k := fmt.Sprintf("dm/%04d", i)
		keys = append(keys, k)
		if i%100 == 0 {
			MustPut(t, ctx, s, k, []byte("x"), objstore.PutOptions{})
		}
	}
	keep := MustPut(t, ctx, s, "dm-keep", []byte("keep"), objstore.PutOptions{})
	if err := s.DeleteMany(ctx, keys); err != nil {
		t.Fatalf("DeleteMany (missing keys count as deleted): %v", err)
	}
	for i := 0; i < len(keys); i += 100 {
		wantMissing(t, ctx, s, keys[i])
	}
	wantContent(t, ctx, s, "dm-keep", []byte("keep"), keep.ETag)
	if err := s.DeleteMany(ctx, nil); err != nil {
		t.Fatalf("DeleteMany of nothing: %v", err)
	}
}
