package csidriver

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/fencefs/fencefs/objstore"
	"google.golang.org/grpc/codes"
)

var perVolume = map[string]string{ParamBucketPerVolume: "true", ParamOnDelete: OnDeleteDelete, "uid": "1000"}

func TestABucketPerVolumeIsMadeIdempotentlyAndRemovedWithEverythingInIt(t *testing.T) {
	c := newTestController(t, "data")
	ctx := context.Background()
	name := "pvc-0b9f8a6e-4a4c-4a8e-9a3e-3f1b2c0d9e7a"
	resp, err := c.CreateVolume(ctx, createReq(name, perVolume))
	if err != nil {
		t.Fatal(err)
	}
	v := resp.GetVolume()
	if v.GetVolumeId() != name || v.GetVolumeContext()[AttrBucket] != name || v.GetVolumeContext()["prefix"] != "" ||
		v.GetVolumeContext()["fence_domain"] != "" || v.GetVolumeContext()["uid"] != "1000" {
		t.Fatalf("volume %q, context %v: want the bucket %s alone, its own fence domain, the class's options", v.GetVolumeId(), v.GetVolumeContext(), name)
	}
	st := c.buckets[name]
	if st == nil {
		t.Fatal("no bucket made")
	}
	var rec volumeRecord
	rc, _, err := st.Get(ctx, recordKey, objstore.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(rc).Decode(&rec); err != nil || rec.Kind != kindBucket || rec.Prefix != "" {
		t.Fatalf("record %+v (%v): want kind bucket at the top level", rec, err)
	}
	rc.Close()
	again, err := c.CreateVolume(ctx, createReq(name, perVolume))
	if err != nil || again.GetVolume().GetVolumeId() != name {
		t.Fatalf("CreateVolume again: %v %v", again, err)
	}
	if _, err := c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: name,
		VolumeCapabilities: []*csi.VolumeCapability{volCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}}); err != nil {
		t.Errorf("ValidateVolumeCapabilities: %v", err)
	}

	// What mounts leave: files, the register, intents, tombstones.
	put(t, st, "report.txt", "dir/a", ".fencefs/epoch", ".fencefs/intents/1", ".fencefs/tombstones/x")
	if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: name}); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.buckets[name]; ok {
		t.Fatalf("the bucket is still there: %v", keys(t, st))
	}
	if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: name}); err != nil {
		t.Errorf("DeleteVolume again: %v", err)
	}
	if _, ok := c.buckets["data"]; !ok {
		t.Error("another bucket went too")
	}
}

func TestABucketVolumeRetainedKeepsItsBucket(t *testing.T) {
	c := newTestController(t)
	ctx := context.Background()
	if _, err := c.CreateVolume(ctx, createReq("pvc-kept", map[string]string{ParamBucketPerVolume: "true"})); err != nil {
		t.Fatal(err)
	}
	put(t, c.buckets["pvc-kept"], "data.txt")
	if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-kept"}); err != nil {
		t.Fatal(err)
	}
	if st, ok := c.buckets["pvc-kept"]; !ok || !slices.Contains(keys(t, st), "data.txt") {
		t.Fatal("a retained volume's bucket or data went")
	}
	_, err := c.CreateVolume(ctx, createReq("pvc-kept", map[string]string{ParamBucketPerVolume: "true"}))
	wantCode(t, err, codes.AlreadyExists, "CreateVolume of a retained volume")
}

func TestABucketVolumeNeverTakesOrDeletesAUsersBucket(t *testing.T) {
	c := newTestController(t, "pvc-users", "pvc-shared")
	ctx := context.Background()
	put(t, c.buckets["pvc-users"], "theirs.txt")
	_, err := c.CreateVolume(ctx, createReq("pvc-users", perVolume))
	wantCode(t, err, codes.FailedPrecondition, "a bucket with a user's objects")
	if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-users"}); err != nil {
		t.Fatalf("DeleteVolume of a bucket without a record: %v", err)
	}
	if got := keys(t, c.buckets["pvc-users"]); !slices.Equal(got, []string{"theirs.txt"}) {
		t.Errorf("the user's bucket changed: %v", got)
	}

	// A bucket volume whose bucket also holds a prefix volume: nothing
	// deleted.
	if _, err := c.CreateVolume(ctx, createReq("pvc-shared", perVolume)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateVolume(ctx, createReq("inner", map[string]string{ParamBucket: "pvc-shared", ParamPrefix: "v"})); err != nil {
		t.Fatal(err)
	}
	_, err = c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-shared"})
	wantCode(t, err, codes.FailedPrecondition, "a bucket volume holding another volume's record")
	if len(keys(t, c.buckets["pvc-shared"])) != 2 {
		t.Errorf("the refused delete changed the bucket: %v", keys(t, c.buckets["pvc-shared"]))
	}
}

func TestABucketThatRefusesRemovalKeepsItsRecordForTheRetry(t *testing.T) {
	c := newTestController(t)
	ctx := context.Background()
	if _, err := c.CreateVolume(ctx, createReq("pvc-versioned", perVolume)); err != nil {
		t.Fatal(err)
	}
	put(t, c.buckets["pvc-versioned"], "a")
	c.removeRefused = true
	if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-versioned"}); err == nil {
		t.Fatal("DeleteVolume succeeded with the bucket left")
	}
	if got := keys(t, c.buckets["pvc-versioned"]); !slices.Equal(got, []string{recordKey}) {
		t.Fatalf("after the refused removal the bucket holds %v; want its record back", got)
	}
	c.removeRefused = false
	if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "pvc-versioned"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.buckets["pvc-versioned"]; ok {
		t.Error("the retry left the bucket")
	}
}

func TestABucketPerVolumeClassRefusesWithOneLine(t *testing.T) {
	for _, tc := range []struct {
		params map[string]string
		want   string
	}{
		{map[string]string{ParamBucketPerVolume: "true", ParamBucket: "data"}, "not accepted with bucketPerVolume: true"},
		{map[string]string{ParamBucketPerVolume: "true", ParamPrefix: "v"}, "not accepted with bucketPerVolume: true"},
		{map[string]string{ParamBucketPerVolume: "yes"}, `parameter bucketPerVolume "yes" is not accepted (accepted: true, false)`},
	} {
		err := CheckClassParameters(tc.params)
		wantCode(t, err, codes.InvalidArgument, strings.Join([]string{"parameters", tc.want}, " "))
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want %q", tc.params, err, tc.want)
		}
	}
}

func TestVolumeBucketNamesAreValidAndDistinct(t *testing.T) {
	seen := map[string]string{}
	for _, name := range []string{"pvc-0b9f8a6e-4a4c-4a8e-9a3e-3f1b2c0d9e7a", "PVC-Upper", "a", "x_y", "xn--abc", "data.example",
		strings.Repeat("n", 128), strings.Repeat("n", 127) + "m", "-lead", "é"} {
		b := volumeBucketName(name)
		if !validBucketName(b) {
			t.Errorf("name %q: bucket %q is not a valid bucket name", name, b)
		}
		if prev, ok := seen[b]; ok {
			t.Errorf("names %q and %q share bucket %q", prev, name, b)
		}
		seen[b] = name
		if id, p, ok := parseVolumeID(volumeID(b, "")); !ok || id != b || p != "" {
			t.Errorf("bucket %q: its id does not parse back (%q %q %v)", b, id, p, ok)
		}
	}
}
