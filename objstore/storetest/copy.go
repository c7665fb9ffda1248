package storetest

// This file holds the conformance cases for server-side copies: source and
// destination conditions, in-place copies and metadata.

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/fencefs/fencefs/objstore"
)

func testCopySource(t *testing.T, ctx context.Context, s objstore.Store) {
	src := MustPut(t, ctx, s, "src", []byte("source"), objstore.PutOptions{})
	wrong := Predict(t, s, []byte("other"), objstore.ShapePlain, 0)
	for _, shape := range []objstore.Shape{objstore.ShapeAuto, objstore.ShapePlain, objstore.ShapeMultipart} {
		t.Run(fmt.Sprint("shape", shape), func(t *testing.T) {
			_, err := s.Copy(ctx, "src", wrong, "dst", objstore.PutOptions{Shape: shape})
			wantErr(t, "copy with a wrong source ETag", err, objstore.ErrPrecondition)
			wantMissing(t, ctx, s, "dst")
			_, err = s.Copy(ctx, "nosuch", src.ETag, "dst", objstore.PutOptions{Shape: shape})
			wantErr(t, "copy of a missing source", err, objstore.ErrNotFound)
			wantMissing(t, ctx, s, "dst")
		})
	}
	info, err := s.Copy(ctx, "src", src.ETag, "dst", objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantContent(t, ctx, s, "dst", []byte("source"), info.ETag)
	assertNoUploads(t, ctx, s, "")
}

func testCopyDest(t *testing.T, ctx context.Context, s objstore.Store) {
	srcData := Random(3000)
	src := MustPut(t, ctx, s, "src", srcData, objstore.PutOptions{})
	for _, tc := range []struct {
		name  string
		shape objstore.Shape
		parts int
	}{
		{"auto", objstore.ShapeAuto, 0},
		{"plain", objstore.ShapePlain, 0},
		{"one part", objstore.ShapeMultipart, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := "dst-" + strings.ReplaceAll(tc.name, " ", "-")
			opts := func(c objstore.Condition) objstore.PutOptions {
				return objstore.PutOptions{Shape: tc.shape, Parts: tc.parts, Cond: c}
			}
			// Onto a missing key: If-Match refused, If-None-Match creates.
			_, err := s.Copy(ctx, "src", src.ETag, dst, opts(objstore.Condition{IfMatch: src.ETag}))
			wantErr(t, "copy with If-Match onto a missing key", err, objstore.ErrPrecondition)
			wantMissing(t, ctx, s, dst)
			created, err := s.Copy(ctx, "src", src.ETag, dst, opts(objstore.Condition{IfNoneMatch: true}))
			if err != nil {
				t.Fatalf("copy with If-None-Match onto a missing key: %v", err)
			}
			if want := Predict(t, s, srcData, tc.shape, tc.parts); created.ETag != want {
				t.Fatalf("copy ETag %s, predicted %s", created.ETag, want)
			}
			wantContent(t, ctx, s, dst, srcData, created.ETag)
			// Onto an existing key.
			old := MustPut(t, ctx, s, dst, []byte("old"), objstore.PutOptions{})
			_, err = s.Copy(ctx, "src", src.ETag, dst, opts(objstore.Condition{IfNoneMatch: true}))
			wantErr(t, "copy with If-None-Match onto an existing key", err, objstore.ErrPrecondition)
			_, err = s.Copy(ctx, "src", src.ETag, dst, opts(objstore.Condition{IfMatch: created.ETag}))
			wantErr(t, "copy with a stale If-Match", err, objstore.ErrPrecondition)
			wantContent(t, ctx, s, dst, []byte("old"), old.ETag)
			info, err := s.Copy(ctx, "src", src.ETag, dst, opts(objstore.Condition{IfMatch: old.ETag}))
			if err != nil {
				t.Fatalf("copy with the right If-Match: %v", err)
			}
			wantContent(t, ctx, s, dst, srcData, info.ETag)
			assertNoUploads(t, ctx, s, "")
		})
	}
}

func testCopyInPlace(t *testing.T, ctx context.Context, s objstore.Store) {
	data := Random(int(objstore.MinPartSize) + 100)
	meta := map[string]string{"mode": "33188"}
	v := MustPut(t, ctx, s, "k", data, objstore.PutOptions{Shape: objstore.ShapePlain, Meta: meta})
	// The fencing sweep's trick: plain → one-part multipart → two parts →
	// plain, each step conditional on the ETag just read, each changing it.
	for _, step := range []struct {
		shape objstore.Shape
		parts int
	}{{objstore.ShapeMultipart, 1}, {objstore.ShapeMultipart, 2}, {objstore.ShapePlain, 0}, {objstore.ShapeMultipart, 1}} {
		info, err := s.Copy(ctx, "k", v.ETag, "k", objstore.PutOptions{Shape: step.shape, Parts: step.parts, Cond: objstore.Condition{IfMatch: v.ETag}})
		if err != nil {
			t.Fatalf("self-copy %v/%d: %v", step.shape, step.parts, err)
		}
		if info.ETag == v.ETag {
			t.Fatalf("self-copy %v/%d kept ETag %s", step.shape, step.parts, v.ETag)
		}
		if want := Predict(t, s, data, step.shape, step.parts); info.ETag != want {
			t.Fatalf("self-copy ETag %s, predicted %s", info.ETag, want)
		}
		// The old version is gone for every conditional writer.
		_, err = s.Copy(ctx, "k", v.ETag, "k", objstore.PutOptions{Cond: objstore.Condition{IfMatch: v.ETag}})
		wantErr(t, "self-copy from the replaced version", err, objstore.ErrPrecondition)
		_, err = s.Put(ctx, "k", bytes.NewReader([]byte("late")), 4, objstore.PutOptions{Cond: objstore.Condition{IfMatch: v.ETag}})
		wantErr(t, "put on the replaced version", err, objstore.ErrPrecondition)
		wantContent(t, ctx, s, "k", data, info.ETag)
		st, err := s.Stat(ctx, "k")
		if err != nil || !maps.Equal(st.Meta, meta) {
			t.Fatalf("metadata after self-copy: %v %v", st.Meta, err)
		}
		v = info
	}
	assertNoUploads(t, ctx, s, "")
}

func testCopyMeta(t *testing.T, ctx context.Context, s objstore.Store) {
	src := MustPut(t, ctx, s, "src", []byte("x"), objstore.PutOptions{Meta: map[string]string{"a": "1", "b": "2"}, ContentType: "text/x-a"})
	for _, tc := range []struct {
		name     string
		shape    objstore.Shape
		parts    int
		meta     map[string]string
		ct       string
		wantMeta map[string]string
		wantCT   string
	}{
		{"nil keeps", objstore.ShapeAuto, 0, nil, "", map[string]string{"a": "1", "b": "2"}, "text/x-a"},
		{"nil keeps multipart", objstore.ShapeMultipart, 1, nil, "", map[string]string{"a": "1", "b": "2"}, "text/x-a"},
		{"replace", objstore.ShapeAuto, 0, map[string]string{"c": "3"}, "text/x-c", map[string]string{"c": "3"}, "text/x-c"},
		{"replace multipart", objstore.ShapeMultipart, 1, map[string]string{"c": "3"}, "", map[string]string{"c": "3"}, "text/x-a"},
		{"empty clears", objstore.ShapePlain, 0, map[string]string{}, "", map[string]string{}, "text/x-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := "dst-" + strings.ReplaceAll(tc.name, " ", "-")
			info, err := s.Copy(ctx, "src", src.ETag, dst, objstore.PutOptions{Shape: tc.shape, Parts: tc.parts, Meta: tc.meta, ContentType: tc.ct})
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(info.Meta, tc.wantMeta) {
				t.Fatalf("returned meta %v, want %v", info.Meta, tc.wantMeta)
			}
			st, err := s.Stat(ctx, dst)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(st.Meta, tc.wantMeta) || st.ContentType != tc.wantCT {
				t.Fatalf("stat meta %v %q, want %v %q", st.Meta, st.ContentType, tc.wantMeta, tc.wantCT)
			}
		})
	}
}
