// Package storetest is the conformance suite every objstore.Store
// implementation runs: the in-memory store in its unit tests, the S3 store
// against the real Versity gateway.
//
// Run takes a constructor called once per subtest; each call must return a
// store over an empty bucket (or an otherwise empty key space). The suite
// predicts ETags with objstore.SizingOf(store), so a store's Sizing must
// describe what it really does. It uses objects of up to about
// max(MultipartThreshold, 10 MiB) + 1 MiB: keep the threshold small when
// testing a real server.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"maps"
	mrand "math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// timeout bounds every subtest.
const timeout = 60 * time.Second

// Run runs the conformance suite as subtests of t.
func Run(t *testing.T, newStore func(t *testing.T) objstore.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, ctx context.Context, s objstore.Store)
	}{
		{"StatAndGetOfMissingKeyAreNotFound", testMissing},
		{"PutGetRoundTripWithMetadata", testRoundTrip},
		{"RangedGets", testRangedGets},
		{"EmptyObjects", testEmpty},
		{"ETagsFollowTheUploadShape", testShapes},
		{"IfNoneMatchCreatesOnlyOnce", testIfNoneMatch},
		{"IfMatchIsCompareAndSwap", testIfMatch},
		{"IfMatchOnMissingKeyIsRefused", testIfMatchMissing},
		{"ConditionalCompleteMultipart", testConditionalComplete},
		{"PiecewiseUploadPublishesOnConditionalComplete", testPiecewiseUpload},
		{"ConditionalDelete", testConditionalDelete},
		{"DeleteManyRemovesEveryKey", testDeleteMany},
		{"CopyChecksSourceETag", testCopySource},
		{"CopyDestinationIsConditional", testCopyDest},
		{"CopyInPlaceChangesTheETagShape", testCopyInPlace},
		{"CopyMetadata", testCopyMeta},
		{"GetPinnedToETag", testGetPinned},
		{"ReadNeverMixesVersions", testReadNoMix},
		{"ListOrderAndDelimiter", testList},
		{"ListStopsOnCallbackError", testListStop},
		{"InvalidRequestsAreRefused", testInvalid},
		{"CancelledContext", testCancelled},
		{"RaceIfNoneMatchHasOneWinner", testRaceCreate},
		{"RaceIfMatchHasOneWinner", testRaceCAS},
		{"RaceConditionalCompleteHasOneWinner", testRaceComplete},
		{"ProbeReportsAConformingStore", testProbe},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			tc.fn(t, ctx, newStore(t))
		})
	}
}

// randomPool backs Random: fresh large allocations are slow under the race
// detector, so Random hands out windows of one random buffer.
var randomPool = sync.OnceValue(func() []byte {
	b := make([]byte, 24<<20)
	_, _ = rand.Read(b)
	return b
})

// Random returns n random bytes; two calls return different bytes (with
// overwhelming probability). The result may share memory with other
// results: callers must not modify it.
func Random(n int) []byte {
	pool := randomPool()
	if n > len(pool)/2 {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		return b
	}
	off := mrand.IntN(len(pool) - n + 1)
	return pool[off : off+n : off+n]
}

// Predict returns the ETag s gives to data uploaded with shape and parts.
func Predict(t testing.TB, s objstore.Store, data []byte, shape objstore.Shape, parts int) string {
	t.Helper()
	layout, err := objstore.SizingOf(s).Layout(int64(len(data)), shape, parts)
	if err != nil {
		t.Fatalf("layout: %v", err)
	}
	etag, err := objstore.ETagOf(bytes.NewReader(data), int64(len(data)), layout)
	if err != nil {
		t.Fatal(err)
	}
	return etag
}

// MustPut writes data at key and fails the test on error.
func MustPut(t testing.TB, ctx context.Context, s objstore.Store, key string, data []byte, opts objstore.PutOptions) objstore.ObjectInfo {
	t.Helper()
	info, err := s.Put(ctx, key, bytes.NewReader(data), int64(len(data)), opts)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return info
}

// ReadAll reads key (whole) and fails the test on error.
func ReadAll(t testing.TB, ctx context.Context, s objstore.Store, key string, opts objstore.GetOptions) ([]byte, objstore.ObjectInfo) {
	t.Helper()
	rc, info, err := s.Get(ctx, key, opts)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	// Preallocated: io.ReadAll's growth is slow on large objects under
	// the race detector.
	buf := bytes.NewBuffer(make([]byte, 0, max(info.Size-opts.Offset, 0)+bytes.MinRead))
	_, err = buf.ReadFrom(rc)
	b := buf.Bytes()
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return b, info
}

// wantErr fails unless errors.Is(err, want).
func wantErr(t testing.TB, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

// wantContent fails unless key holds exactly data with ETag etag.
func wantContent(t testing.TB, ctx context.Context, s objstore.Store, key string, data []byte, etag string) {
	t.Helper()
	got, info := ReadAll(t, ctx, s, key, objstore.GetOptions{})
	if !bytes.Equal(got, data) {
		t.Fatalf("%s: content differs (got %d bytes, want %d)", key, len(got), len(data))
	}
	if etag != "" && info.ETag != etag {
		t.Fatalf("%s: ETag %s, want %s", key, info.ETag, etag)
	}
}

func wantMissing(t testing.TB, ctx context.Context, s objstore.Store, key string) {
	t.Helper()
	if info, err := s.Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("%s: want absent, got %+v, %v", key, info, err)
	}
}

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

func testIfNoneMatch(t *testing.T, ctx context.Context, s objstore.Store) {
	first := MustPut(t, ctx, s, "k", []byte("first"), objstore.PutOptions{Cond: objstore.Condition{IfNoneMatch: true}})
	_, err := s.Put(ctx, "k", bytes.NewReader([]byte("second")), 6, objstore.PutOptions{Cond: objstore.Condition{IfNoneMatch: true}})
	wantErr(t, "second create", err, objstore.ErrPrecondition)
	wantContent(t, ctx, s, "k", []byte("first"), first.ETag)
}

func testIfMatch(t *testing.T, ctx context.Context, s objstore.Store) {
	v1 := MustPut(t, ctx, s, "k", []byte("v1"), objstore.PutOptions{})
	v2 := MustPut(t, ctx, s, "k", []byte("v2"), objstore.PutOptions{Cond: objstore.Condition{IfMatch: v1.ETag}})
	_, err := s.Put(ctx, "k", bytes.NewReader([]byte("v3")), 2, objstore.PutOptions{Cond: objstore.Condition{IfMatch: v1.ETag}})
	wantErr(t, "stale If-Match", err, objstore.ErrPrecondition)
	wantContent(t, ctx, s, "k", []byte("v2"), v2.ETag)
	// A quoted ETag is the same ETag.
	v3 := MustPut(t, ctx, s, "k", []byte("v3"), objstore.PutOptions{Cond: objstore.Condition{IfMatch: `"` + v2.ETag + `"`}})
	wantContent(t, ctx, s, "k", []byte("v3"), v3.ETag)
}

func testIfMatchMissing(t *testing.T, ctx context.Context, s objstore.Store) {
	etag := Predict(t, s, []byte("x"), objstore.ShapePlain, 0)
	for _, tc := range []struct {
		name  string
		shape objstore.Shape
	}{{"plain", objstore.ShapePlain}, {"multipart", objstore.ShapeMultipart}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Put(ctx, "missing", bytes.NewReader([]byte("x")), 1, objstore.PutOptions{Shape: tc.shape, Cond: objstore.Condition{IfMatch: etag}})
			wantErr(t, "If-Match on a missing key", err, objstore.ErrPrecondition)
			wantMissing(t, ctx, s, "missing")
		})
	}
	MustPut(t, ctx, s, "src", []byte("x"), objstore.PutOptions{})
	_, err := s.Copy(ctx, "src", etag, "missing", objstore.PutOptions{Cond: objstore.Condition{IfMatch: etag}})
	wantErr(t, "copy onto a missing key with If-Match", err, objstore.ErrPrecondition)
	wantMissing(t, ctx, s, "missing")
	// DELETE is different: the key is absent, as asked. The Versity
	// gateway answers success (so does memstore); other servers may
	// answer 412/404, reported as ErrPrecondition.
	err = s.Delete(ctx, "missing", objstore.Condition{IfMatch: etag})
	if err != nil && !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("delete of a missing key with If-Match: %v", err)
	}
}

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

func testConditionalDelete(t *testing.T, ctx context.Context, s objstore.Store) {
	v := MustPut(t, ctx, s, "d", []byte("data"), objstore.PutOptions{})
	wrong := Predict(t, s, []byte("other"), objstore.ShapePlain, 0)
	err := s.Delete(ctx, "d", objstore.Condition{IfMatch: wrong})
	wantErr(t, "delete with a wrong If-Match", err, objstore.ErrPrecondition)
	wantContent(t, ctx, s, "d", []byte("data"), v.ETag)
	if err := s.Delete(ctx, "d", objstore.Condition{IfMatch: v.ETag}); err != nil {
		t.Fatalf("delete with the right If-Match: %v", err)
	}
	wantMissing(t, ctx, s, "d")
	MustPut(t, ctx, s, "d", []byte("data"), objstore.PutOptions{})
	if err := s.Delete(ctx, "d", objstore.Condition{}); err != nil {
		t.Fatal(err)
	}
	wantMissing(t, ctx, s, "d")
}

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

// race runs n writers at once and checks that exactly one succeeded, the
// others failed with ErrPrecondition (or ErrConflict), and the key holds
// the winner's body.
func race(t *testing.T, ctx context.Context, s objstore.Store, n int, key string, write func(i int, body []byte) (objstore.ObjectInfo, error), size int) {
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = Random(size)
	}
	var wg sync.WaitGroup
	infos := make([]objstore.ObjectInfo, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			infos[i], errs[i] = write(i, bodies[i])
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("writers %d and %d both won", winner, i)
			}
			winner = i
		case errors.Is(err, objstore.ErrPrecondition), errors.Is(err, objstore.ErrConflict):
		default:
			t.Fatalf("writer %d: unexpected error %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no writer won: %v", errs)
	}
	wantContent(t, ctx, s, key, bodies[winner], infos[winner].ETag)
	assertNoUploads(t, ctx, s, "")
}

const racers = 32

func testRaceCreate(t *testing.T, ctx context.Context, s objstore.Store) {
	race(t, ctx, s, racers, "k", func(_ int, b []byte) (objstore.ObjectInfo, error) {
		return s.Put(ctx, "k", bytes.NewReader(b), int64(len(b)), objstore.PutOptions{Cond: objstore.Condition{IfNoneMatch: true}})
	}, 1000+mrand.IntN(1000))
}

func testRaceCAS(t *testing.T, ctx context.Context, s objstore.Store) {
	base := MustPut(t, ctx, s, "k", []byte("base"), objstore.PutOptions{})
	race(t, ctx, s, racers, "k", func(_ int, b []byte) (objstore.ObjectInfo, error) {
		return s.Put(ctx, "k", bytes.NewReader(b), int64(len(b)), objstore.PutOptions{Cond: objstore.Condition{IfMatch: base.ETag}})
	}, 1000)
}

func testRaceComplete(t *testing.T, ctx context.Context, s objstore.Store) {
	base := MustPut(t, ctx, s, "k", []byte("base"), objstore.PutOptions{})
	race(t, ctx, s, 8, "k", func(_ int, b []byte) (objstore.ObjectInfo, error) {
		return s.Put(ctx, "k", bytes.NewReader(b), int64(len(b)), objstore.PutOptions{Shape: objstore.ShapeMultipart, Parts: 1, Cond: objstore.Condition{IfMatch: base.ETag}})
	}, 1000)
}

func testProbe(t *testing.T, ctx context.Context, s objstore.Store) {
	MustPut(t, ctx, s, "data/file", []byte("user data"), objstore.PutOptions{})
	caps := objstore.Probe(ctx, s, "data/")
	for _, c := range caps.Checks() {
		if !c.OK {
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
