package csidriver_test

// A bucket per volume end to end: `fencefs csi --controller` makes a
// bucket for a claim of a class with bucketPerVolume, `fencefs csi`
// mounts it, and DeleteVolume removes every object of it — files, the
// register, intents, tombstones — and the bucket; with retain, the bucket
// stays. On the gateway and on MinIO.

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/fencefs/fencefs/csidriver"
	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
)

func TestABucketPerVolumeIsMadeMountedAndRemovedWithItsFenceDomain(t *testing.T) {
	harness.RequireFUSE(t)
	gateway.ForEachServer(t, gateway.SingleDriveServers, func(t *testing.T, gw *gateway.Gateway) {
		c := newClaims(t, gw)
		c.params = map[string]string{csidriver.ParamBucketPerVolume: "true", csidriver.ParamOnDelete: csidriver.OnDeleteDelete}
		v := c.provision(t, "pvc-3f1b2c0d-9e7a-4a4c-8a3e-0b9f8a6e4a4c")
		bucket := v.GetVolumeId()
		if v.GetVolumeContext()[csidriver.AttrBucket] != bucket || bucket != "pvc-3f1b2c0d-9e7a-4a4c-8a3e-0b9f8a6e4a4c" {
			t.Fatalf("volume %q, context %v: want the bucket named for the volume", bucket, v.GetVolumeContext())
		}
		if again := c.provision(t, "pvc-3f1b2c0d-9e7a-4a4c-8a3e-0b9f8a6e4a4c"); again.GetVolumeId() != bucket {
			t.Fatalf("CreateVolume again: %q", again.GetVolumeId())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if ok, err := gw.Client().BucketExists(ctx, bucket); !ok || err != nil {
			t.Fatalf("bucket %s after CreateVolume: %v %v", bucket, ok, err)
		}

		// A mount of it: a bound write leaves the register, a file, and
		// a delete's tombstone.
		target := c.publish(t, v, "p-0")
		bindToken(t, target, "3")
		for _, f := range []string{"kept", "removed"} {
			if err := writeFile(filepath.Join(target, f), f); err != nil {
				t.Fatalf("write %s: %v; log: %s", f, err, c.d.log)
			}
		}
		if err := os.Remove(filepath.Join(target, "removed")); err != nil {
			t.Fatal(err)
		}
		c.unpublish(t, v, target)
		var before []string
		for o := range gw.Client().ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
			before = append(before, o.Key)
		}
		t.Logf("the bucket before DeleteVolume: %v", before)

		if _, err := c.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: bucket, Secrets: c.n.secrets()}); err != nil {
			t.Fatalf("DeleteVolume: %v; log: %s", err, c.ctrl.log)
		}
		if ok, err := gw.Client().BucketExists(ctx, bucket); ok || err != nil {
			t.Fatalf("bucket %s after DeleteVolume: exists %v (%v)", bucket, ok, err)
		}
		if _, err := c.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: bucket, Secrets: c.n.secrets()}); err != nil {
			t.Errorf("DeleteVolume again: %v", err)
		}
		if ok, _ := gw.Client().BucketExists(ctx, c.n.bucket); !ok {
			t.Error("another bucket went too")
		}

		// retain: the bucket and its objects stay.
		c.params[csidriver.ParamOnDelete] = csidriver.OnDeleteRetain
		kept := c.provision(t, "pvc-kept")
		if _, err := c.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: kept.GetVolumeId(), Secrets: c.n.secrets()}); err != nil {
			t.Fatal(err)
		}
		if ok, _ := gw.Client().BucketExists(ctx, kept.GetVolumeId()); !ok {
			t.Error("a retained volume's bucket went")
		}
	})
}
