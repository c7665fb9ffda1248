package storetest

// This file holds the conformance cases for the basic object operations:
// missing keys, round trips, ranged reads, empty objects, ETag shapes and
// pinned reads.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"testing"

	"github.com/fencefs/fencefs/objstore"
)

func testMissing(t *testing.T, ctx context.Context, s objstore.Store) {
	_, err := s.Stat(ctx, "nope")
	wantErr(t, "stat", err, objstore.ErrNotFound)
	_, _, err = s.Get(ctx, "nope", objstore.GetOptions{})
	wantErr(t, "get", err, objstore.ErrNotFound)
	_, _, err = s.Get(ctx, "nope", objstore.GetOptions{IfMatch: "d41d8cd98f00b204e9800998ecf8427e"})
	if !errors.Is(err, objstore.ErrNotFound) && !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("pinned get of missing key: %v", err)
	}
	if err := s.Delete(ctx, "nope", objstore.Condition{}); err != nil {
		t.Fatalf("unconditional delete of a missing key must succeed: %v", err)
	}
}

func testRoundTrip(t *testing.T, ctx context.Context, s objstore.Store) {
	data := Random(100 << 10)
	meta := map[string]string{"mode": "33188", "uid": "1000", "fencefs-wid": "abc-123_x", "xattr": "%7B%22a%22%3A1%7D"}
	info := MustPut(t, ctx, s, "dir/file.bin", data, objstore.PutOptions{Meta: meta, ContentType: "text/plain"})
	want := Predict(t, s, data, objstore.ShapeAuto, 0)
	if info.ETag != want || info.Size != int64(len(data)) || info.Key != "dir/file.bin" {
		t.Fatalf("put info %+v, want ETag %s size %d", info, want, len(data))
	}
	st, err := s.Stat(ctx, "dir/file.bin")
	if err != nil {
		t.Fatal(err)
	}
	if st.ETag != want || st.Size != int64(len(data)) || st.ContentType != "text/plain" || st.LastModified.IsZero() {
		t.Fatalf("stat %+v", st)
	}
	if !maps.Equal(st.Meta, meta) {
		t.Fatalf("stat meta %v, want %v", st.Meta, meta)
	}
	got, gi := ReadAll(t, ctx, s, "dir/file.bin", objstore.GetOptions{})
	if !bytes.Equal(got, data) || gi.ETag != want || !maps.Equal(gi.Meta, meta) || gi.Size != int64(len(data)) {
		t.Fatalf("get: %d bytes, info %+v", len(got), gi)
	}
	// Overwrite without metadata: metadata is replaced, not merged.
	info2 := MustPut(t, ctx, s, "dir/file.bin", data[:10], objstore.PutOptions{})
	st, err = s.Stat(ctx, "dir/file.bin")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Meta) != 0 || st.ETag != info2.ETag || st.Size != 10 {
		t.Fatalf("after overwrite: %+v", st)
	}
}

func testRangedGets(t *testing.T, ctx context.Context, s objstore.Store) {
	data := Random(1000)
	info := MustPut(t, ctx, s, "r", data, objstore.PutOptions{})
	for _, tc := range []struct {
		name        string
		off, length int64
		want        []byte
	}{
		{"whole", 0, 0, data},
		{"to end with negative length", 10, -1, data[10:]},
		{"to end with zero length", 10, 0, data[10:]},
		{"middle", 100, 50, data[100:150]},
		{"length past end is clamped", 990, 100, data[990:]},
		{"last byte", 999, 1, data[999:]},
		{"offset at end is empty", 1000, 0, nil},
		{"offset past end is empty", 5000, 10, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, gi := ReadAll(t, ctx, s, "r", objstore.GetOptions{Offset: tc.off, Length: tc.length, IfMatch: info.ETag})
			if !bytes.Equal(got, tc.want) {
				t.Fatalf("got %d bytes, want %d", len(got), len(tc.want))
			}
			if gi.ETag != info.ETag || gi.Size != 1000 {
				t.Fatalf("info %+v: Size must be the object's size", gi)
			}
		})
	}
}

func testEmpty(t *testing.T, ctx context.Context, s objstore.Store) {
	for _, tc := range []struct {
		name  string
		shape objstore.Shape
		parts int
	}{
		{"plain", objstore.ShapePlain, 0},
		{"auto", objstore.ShapeAuto, 0},
		{"one-part multipart", objstore.ShapeMultipart, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "empty-" + strings.ReplaceAll(tc.name, " ", "-")
			info := MustPut(t, ctx, s, key, nil, objstore.PutOptions{Shape: tc.shape, Parts: tc.parts, Cond: objstore.Condition{IfNoneMatch: true}})
			if want := Predict(t, s, nil, tc.shape, tc.parts); info.ETag != want || info.Size != 0 {
				t.Fatalf("info %+v, want ETag %s", info, want)
			}
			wantContent(t, ctx, s, key, nil, info.ETag)
		})
	}
}

func testShapes(t *testing.T, ctx context.Context, s objstore.Store) {
	z := objstore.SizingOf(s)
	big := Random(int(2*objstore.MinPartSize + 1)) // 10 MiB + 1: at most three parts
	above := Random(int(z.MultipartThreshold) + 1)
	for _, tc := range []struct {
		name      string
		data      []byte
		shape     objstore.Shape
		parts     int
		wantParts int // 0: plain
	}{
		{"small plain", big[:1234], objstore.ShapePlain, 0, 0},
		{"small auto is plain", big[:1234], objstore.ShapeAuto, 0, 0},
		{"small one part", big[:1234], objstore.ShapeMultipart, 1, 1},
		{"small asking three parts gets one", big[:1234], objstore.ShapeMultipart, 3, 1},
		{"ten MiB in two parts", big, objstore.ShapeMultipart, 2, 2},
		{"ten MiB asking five parts gets three", big, objstore.ShapeMultipart, 5, 3},
		{"ten MiB plain", big, objstore.ShapePlain, 0, 0},
		{"above threshold auto is multipart", above, objstore.ShapeAuto, 0, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "shape/" + strings.ReplaceAll(tc.name, " ", "-")
			info := MustPut(t, ctx, s, key, tc.data, objstore.PutOptions{Shape: tc.shape, Parts: tc.parts})
			want := Predict(t, s, tc.data, tc.shape, tc.parts)
			if info.ETag != want {
				t.Fatalf("ETag %s, predicted %s", info.ETag, want)
			}
			n, multi := objstore.IsMultipartETag(info.ETag)
			switch {
			case tc.wantParts == 0 && multi:
				t.Fatalf("want a plain ETag, got %s", info.ETag)
			case tc.wantParts > 0 && n != tc.wantParts:
				t.Fatalf("want %d parts, got %s", tc.wantParts, info.ETag)
			case tc.wantParts < 0 && !multi:
				t.Fatalf("want a multipart ETag, got %s", info.ETag)
			}
			wantContent(t, ctx, s, key, tc.data, want)
		})
	}
}

func testGetPinned(t *testing.T, ctx context.Context, s objstore.Store) {
	data := Random(10000)
	v1 := MustPut(t, ctx, s, "k", data, objstore.PutOptions{})
	wrong := Predict(t, s, []byte("x"), objstore.ShapePlain, 0)
	_, _, err := s.Get(ctx, "k", objstore.GetOptions{IfMatch: wrong})
	wantErr(t, "get with a wrong If-Match", err, objstore.ErrPrecondition)
	_, _, err = s.Get(ctx, "k", objstore.GetOptions{IfNoneMatch: v1.ETag})
	wantErr(t, "get with If-None-Match of the current ETag", err, objstore.ErrNotModified)
	got, _ := ReadAll(t, ctx, s, "k", objstore.GetOptions{IfNoneMatch: wrong})
	if !bytes.Equal(got, data) {
		t.Fatal("get with If-None-Match of another ETag: wrong content")
	}
	// A read in several ranges pinned to the first range's ETag fails once
	// the object changed, instead of mixing two versions.
	first, info := ReadAll(t, ctx, s, "k", objstore.GetOptions{Length: 4000})
	if !bytes.Equal(first, data[:4000]) || info.ETag != v1.ETag {
		t.Fatal("first range")
	}
	MustPut(t, ctx, s, "k", Random(10000), objstore.PutOptions{})
	_, _, err = s.Get(ctx, "k", objstore.GetOptions{Offset: 4000, IfMatch: info.ETag})
	wantErr(t, "second range after a change", err, objstore.ErrPrecondition)
}

func testReadNoMix(t *testing.T, ctx context.Context, s objstore.Store) {
	old := Random(4 << 20)
	v1 := MustPut(t, ctx, s, "k", old, objstore.PutOptions{})
	for _, pinned := range []bool{false, true} {
		t.Run(fmt.Sprint("pinned=", pinned), func(t *testing.T) {
			opts := objstore.GetOptions{}
			if pinned {
				opts.IfMatch = v1.ETag
			}
			MustPut(t, ctx, s, "k", old, objstore.PutOptions{})
			rc, info, err := s.Get(ctx, "k", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			if info.ETag != v1.ETag {
				t.Fatalf("ETag %s", info.ETag)
			}
			head := make([]byte, 64<<10)
			if _, err := io.ReadFull(rc, head); err != nil {
				t.Fatal(err)
			}
			MustPut(t, ctx, s, "k", Random(4<<20), objstore.PutOptions{})
			buf := bytes.NewBuffer(make([]byte, 0, len(old)+bytes.MinRead))
			buf.Write(head)
			_, err = buf.ReadFrom(rc)
			got := buf.Bytes()
			switch {
			case err != nil:
				// Failing is allowed; it must be a clean error.
				t.Logf("read after overwrite failed (allowed): %v", err)
			case !bytes.Equal(got, old):
				t.Fatalf("a read returned %d bytes that are not the version it started on", len(got))
			}
		})
	}
}
