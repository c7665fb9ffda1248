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
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// timeout bounds every subtest.
const timeout = 60 * time.Second

// Quirks are the documented ways a real server departs from what the
// suite otherwise requires; the suite checks that the server departs in
// exactly that way (so a server that changes is noticed).
type Quirks struct {
	// DeleteIgnoresIfMatch: DELETE removes the object whatever its
	// If-Match names, and the probe reports conditional-delete failed
	// (MinIO's last community release; fencefs writes tombstones there).
	DeleteIgnoresIfMatch bool
}

// Run runs the conformance suite as subtests of t.
func Run(t *testing.T, newStore func(t *testing.T) objstore.Store) {
	RunWithQuirks(t, Quirks{}, newStore)
}

// RunWithQuirks runs the conformance suite as subtests of t against a store
// with the given quirks.
func RunWithQuirks(t *testing.T, q Quirks, newStore func(t *testing.T) objstore.Store) {
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
		{"ConditionalDelete", func(t *testing.T, ctx context.Context, s objstore.Store) { testConditionalDelete(t, ctx, s, q) }},
		{"DeleteManyRemovesEveryKey", testDeleteMany},
		{"CopyChecksSourceETag", testCopySource},
		{"CopyDestinationIsConditional", testCopyDest},
		{"CopyInPlaceChangesTheETagShape", testCopyInPlace},
		{"CopyMetadata", testCopyMeta},
		{"GetPinnedToETag", testGetPinned},
		{"ReadNeverMixesVersions", testReadNoMix},
		{"ListOrderAndDelimiter", testList},
		{"ListStopsOnCallbackError", testListStop},
		{"ListMetaCarriesWhatStatReturns", testListMeta},
		{"InvalidRequestsAreRefused", testInvalid},
		{"CancelledContext", testCancelled},
		{"RaceIfNoneMatchHasOneWinner", testRaceCreate},
		{"RaceIfMatchHasOneWinner", testRaceCAS},
		{"RaceConditionalCompleteHasOneWinner", testRaceComplete},
		{"ProbeReportsAConformingStore", func(t *testing.T, ctx context.Context, s objstore.Store) { testProbe(t, ctx, s, q) }},
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
