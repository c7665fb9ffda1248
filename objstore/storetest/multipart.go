package storetest

// This file holds the conformance cases for multipart uploads: conditional
// completes and piecewise uploads.

import (
	"bytes"
	"context"
	"maps"
	"testing"

	"github.com/fencefs/fencefs/objstore"
)

func assertNoUploads(t testing.TB, ctx context.Context, s objstore.Store, prefix string) {
	t.Helper()
	var left []objstore.Upload
	if err := s.ListUploads(ctx, prefix, func(u objstore.Upload) error { left = append(left, u); return nil }); err != nil {
		t.Fatalf("list uploads: %v", err)
	}
	if len(left) != 0 {
		t.Fatalf("incomplete uploads left behind: %+v", left)
	}
}

func testConditionalComplete(t *testing.T, ctx context.Context, s objstore.Store) {
	data := Random(int(objstore.MinPartSize) + 4096)
	mp := func(c objstore.Condition) objstore.PutOptions {
		return objstore.PutOptions{Shape: objstore.ShapeMultipart, Parts: 2, Cond: c}
	}
	v1 := MustPut(t, ctx, s, "mp", data, mp(objstore.Condition{IfNoneMatch: true}))
	if n, _ := objstore.IsMultipartETag(v1.ETag); n != 2 {
		t.Fatalf("ETag %s, want 2 parts", v1.ETag)
	}
	data2 := Random(len(data))
	_, err := s.Put(ctx, "mp", bytes.NewReader(data2), int64(len(data2)), mp(objstore.Condition{IfNoneMatch: true}))
	wantErr(t, "multipart If-None-Match over an existing key", err, objstore.ErrPrecondition)
	_, err = s.Put(ctx, "mp", bytes.NewReader(data2), int64(len(data2)), mp(objstore.Condition{IfMatch: Predict(t, s, data2, objstore.ShapePlain, 0)}))
	wantErr(t, "multipart wrong If-Match", err, objstore.ErrPrecondition)
	wantContent(t, ctx, s, "mp", data, v1.ETag)
	assertNoUploads(t, ctx, s, "mp")
	v2 := MustPut(t, ctx, s, "mp", data2, mp(objstore.Condition{IfMatch: v1.ETag}))
	wantContent(t, ctx, s, "mp", data2, v2.ETag)
	assertNoUploads(t, ctx, s, "")
}

// testPiecewiseUpload covers CreateUpload/UploadPart/CompleteUpload: parts
// are invisible until Complete, Complete is conditional and leaves the
// upload in place when refused, the ETag is the multipart ETag of the part
// ETags, the metadata is CreateUpload's, and an aborted upload is gone.
func testPiecewiseUpload(t *testing.T, ctx context.Context, s objstore.Store) {
	data := Random(int(objstore.MinPartSize) + 1000)
	old := MustPut(t, ctx, s, "pw", []byte("old"), objstore.PutOptions{})
	meta := map[string]string{"mode": "33188", "fencefs-wid": "w1"}
	id, err := s.CreateUpload(ctx, "pw", objstore.PutOptions{Meta: meta, Cond: objstore.Condition{IfNoneMatch: true}})
	if err != nil {
		t.Fatalf("CreateUpload: %v", err)
	}
	body := bytes.NewReader(data)
	split := objstore.MinPartSize
	p2, err := s.UploadPart(ctx, "pw", id, 2, body, split, int64(len(data))-split)
	if err != nil {
		t.Fatalf("UploadPart 2: %v", err)
	}
	p1, err := s.UploadPart(ctx, "pw", id, 1, body, 0, split)
	if err != nil {
		t.Fatalf("UploadPart 1: %v", err)
	}
	wantContent(t, ctx, s, "pw", []byte("old"), old.ETag) // parts are invisible
	parts := []objstore.Part{p1, p2}
	_, err = s.CompleteUpload(ctx, "pw", id, parts, objstore.Condition{IfNoneMatch: true})
	wantErr(t, "Complete with If-None-Match over an existing key", err, objstore.ErrPrecondition)
	_, err = s.CompleteUpload(ctx, "pw", id, parts, objstore.Condition{IfMatch: Predict(t, s, []byte("other"), objstore.ShapePlain, 0)})
	wantErr(t, "Complete with a wrong If-Match", err, objstore.ErrPrecondition)
	wantContent(t, ctx, s, "pw", []byte("old"), old.ETag)
	info, err := s.CompleteUpload(ctx, "pw", id, parts, objstore.Condition{IfMatch: old.ETag})
	if err != nil {
		t.Fatalf("Complete after refused attempts (the upload must stay): %v", err)
	}
	want, err := objstore.MultipartETag([]string{p1.ETag, p2.ETag})
	if err != nil {
		t.Fatal(err)
	}
	if info.ETag != want || info.Size != int64(len(data)) {
		t.Fatalf("Complete = ETag %s size %d, want %s %d", info.ETag, info.Size, want, len(data))
	}
	if pred := Predict(t, s, data, objstore.ShapeMultipart, 2); pred != want {
		t.Fatalf("piecewise ETag %s differs from Put's two-part ETag %s for the same split", want, pred)
	}
	wantContent(t, ctx, s, "pw", data, want)
	st, err := s.Stat(ctx, "pw")
	if err != nil || !maps.Equal(st.Meta, meta) {
		t.Fatalf("Stat = %v, %v; want CreateUpload's metadata %v", st.Meta, err, meta)
	}
	assertNoUploads(t, ctx, s, "pw")

	// An aborted upload is gone: parts and Complete are ErrConflict.
	id, err = s.CreateUpload(ctx, "pw2", objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p1, err = s.UploadPart(ctx, "pw2", id, 1, bytes.NewReader([]byte("tail")), 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AbortUpload(ctx, "pw2", id); err != nil {
		t.Fatal(err)
	}
	_, err = s.CompleteUpload(ctx, "pw2", id, []objstore.Part{p1}, objstore.Condition{IfNoneMatch: true})
	wantErr(t, "Complete of an aborted upload", err, objstore.ErrConflict)
	wantMissing(t, ctx, s, "pw2")
	assertNoUploads(t, ctx, s, "")
}
