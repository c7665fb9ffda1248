package s3_test

import (
	"bytes"
	"context"
	"maps"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/objstore"
)

// TestListMetadataIsProbedAndCarriedOnMinIOOnly: the probe's list-metadata
// row is true on MinIO and false on the Versity gateway; on MinIO every
// object ListMeta lists carries exactly the metadata, content type, ETag,
// size and date a HEAD returns (also one without user metadata, and a
// multipart one), List carries none, and on the gateway ListMeta lists the
// same entries without metadata.
func TestListMetadataIsProbedAndCarriedOnMinIOOnly(t *testing.T) {
	gateway.ForEachServer(t, gateway.SingleDriveServers, func(t *testing.T, gw *gateway.Gateway) {
		minio := gw.Kind != gateway.Versity
		s := newStore(t, config(t, gw))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		caps := objstore.Probe(ctx, s, "")
		if got := caps.Has(objstore.CheckListMetadata); got != minio {
			t.Fatalf("probe: %s = %v (%s) on %s; want %v", objstore.CheckListMetadata, got, caps.Reasons[objstore.CheckListMetadata], gw.Kind, minio)
		}
		put := func(key string, body []byte, opts objstore.PutOptions) {
			if _, err := s.Put(ctx, key, bytes.NewReader(body), int64(len(body)), opts); err != nil {
				t.Fatal(err)
			}
		}
		put("d/s3fs", []byte("x"), objstore.PutOptions{ContentType: "text/plain",
			Meta: map[string]string{"mode": "33188", "uid": "1000", "mtime": "1700000000.123456789", "fencefs-epoch": "17", "xattr": "%7B%22user.a%22%3A%22Yg%3D%3D%22%7D"}})
		put("d/bare", []byte("no metadata"), objstore.PutOptions{})
		put("d/multi", bytes.Repeat([]byte("m"), 6<<20), objstore.PutOptions{Shape: objstore.ShapeMultipart, Parts: 2,
			Meta: map[string]string{"fencefs-tombstone": "1"}})
		put("d/sub/x", []byte("x"), objstore.PutOptions{})
		carried := 0
		err := s.ListMeta(ctx, "d/", "/", func(e objstore.Entry) error {
			info, ok := e.Info()
			if e.IsPrefix || !ok {
				return nil
			}
			carried++
			st, err := s.Stat(ctx, e.Key)
			if err != nil {
				return err
			}
			if !maps.Equal(info.Meta, st.Meta) || info.ContentType != st.ContentType || info.ETag != st.ETag ||
				info.Size != st.Size || !info.LastModified.Equal(st.LastModified) {
				t.Errorf("listed %s as %+v; a HEAD gives %+v", e.Key, info, st)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 3, false: 0}[minio]; carried != want {
			t.Errorf("ListMeta carried the metadata of %d objects on %s; want %d", carried, gw.Kind, want)
		}
		if err := s.List(ctx, "d/", "/", func(e objstore.Entry) error {
			if e.Meta != nil {
				t.Errorf("List carried metadata for %s", e.Key)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
}
