package csidriver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// testController is a Controller over in-memory buckets.
type testController struct {
	*Controller
	buckets map[string]*memstore.Store
	// lastSecrets are the secrets of the last store opened.
	lastSecrets map[string]string
	// removeRefused makes removeBucket fail as a bucket not empty.
	removeRefused bool
}

// makeBucket and removeBucket are the testController's bucketAdmin.
func (tc *testController) makeBucket(_ context.Context, bucket string, _ map[string]string) error {
	if _, ok := tc.buckets[bucket]; !ok {
		tc.buckets[bucket] = memstore.New()
	}
	return nil
}

func (tc *testController) removeBucket(ctx context.Context, bucket string, _ map[string]string) error {
	st, ok := tc.buckets[bucket]
	if !ok {
		return nil
	}
	empty := true
	if err := st.List(ctx, "", "", func(objstore.Entry) error { empty = false; return io.EOF }); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if !empty || tc.removeRefused {
		return fmt.Errorf("%w: bucket %q is not empty", objstore.ErrConflict, bucket)
	}
	delete(tc.buckets, bucket)
	return nil
}

func newTestController(t *testing.T, buckets ...string) *testController {
	t.Helper()
	c, err := NewController(ControllerOptions{Endpoint: "http://127.0.0.1:9000", Region: "eu-1", PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	tc := &testController{Controller: c, buckets: map[string]*memstore.Store{}}
	for _, b := range buckets {
		tc.buckets[b] = memstore.New()
	}
	c.now = func() time.Time { return time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC) }
	c.open = func(_ context.Context, bucket string, secrets map[string]string) (objstore.Store, func(), error) {
		tc.lastSecrets = secrets
		st, ok := tc.buckets[bucket]
		if !ok {
			return nil, nil, fmt.Errorf("bucket %q: %w", bucket, objstore.ErrNoBucket)
		}
		return st, func() {}, nil
	}
	c.buckets = tc
	return tc
}

func volCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

func createReq(name string, params map[string]string) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{Name: name, Parameters: params,
		VolumeCapabilities: []*csi.VolumeCapability{volCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)},
		CapacityRange:      &csi.CapacityRange{RequiredBytes: 1 << 30}}
}

func put(t *testing.T, st *memstore.Store, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, err := st.Put(context.Background(), k, strings.NewReader(k), int64(len(k)), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func keys(t *testing.T, st *memstore.Store) []string {
	t.Helper()
	var out []string
	if err := st.List(context.Background(), "", "", func(e objstore.Entry) error { out = append(out, e.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func wantCode(t *testing.T, err error, code codes.Code, what string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: %v; want %s", what, err, code)
	}
	if strings.Contains(status.Convert(err).Message(), "\n") {
		t.Errorf("%s: a message of more than one line: %q", what, status.Convert(err).Message())
	}
}

func TestCreateVolumeMakesAPrefixWithAFenceDomainOfItsOwnAndIsIdempotent(t *testing.T) {
	c := newTestController(t, "data")
	ctx := context.Background()
	params := map[string]string{ParamBucket: "data", ParamPrefix: "volumes", "uid": "1000",
		"csi.storage.k8s.io/pvc/name": "claim"}
	resp, err := c.CreateVolume(ctx, createReq("pvc-1234", params))
	if err != nil {
		t.Fatal(err)
	}
	v := resp.GetVolume()
	if v.GetVolumeId() != "data/volumes/pvc-1234" || v.GetCapacityBytes() != 1<<30 {
		t.Errorf("volume %q of %d bytes; want data/volumes/pvc-1234 of 1 GiB", v.GetVolumeId(), v.GetCapacityBytes())
	}
	want := map[string]string{AttrBucket: "data", "prefix": "volumes/pvc-1234/", "fence_domain": "prefix",
		"endpoint": "http://127.0.0.1:9000", "region": "eu-1", "path_style": "true", "uid": "1000"}
	if fmt.Sprint(v.GetVolumeContext()) != fmt.Sprint(want) {
		t.Errorf("volume context %v; want %v", v.GetVolumeContext(), want)
	}
	// The context is one NodePublishVolume mounts as it is.
	pub := &csi.NodePublishVolumeRequest{VolumeId: v.GetVolumeId(), TargetPath: "/t", VolumeContext: v.GetVolumeContext(),
		VolumeCapability: volCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}
	if s, err := parsePublish(pub, nil); err != nil || s.Options["prefix"] != "volumes/pvc-1234/" || s.Options["fence_domain"] != "prefix" {
		t.Errorf("publishing the volume: %v, options %v", err, s.Options)
	}
	if got := keys(t, c.buckets["data"]); fmt.Sprint(got) != "[volumes/pvc-1234/.fencefs/csi-volume.json]" {
		t.Errorf("the bucket holds %v; want only the volume's record", got)
	}

	again, err := c.CreateVolume(ctx, createReq("pvc-1234", params))
	if err != nil || again.GetVolume().GetVolumeId() != v.GetVolumeId() || fmt.Sprint(again.GetVolume().GetVolumeContext()) != fmt.Sprint(want) {
		t.Errorf("the same CreateVolume again: %v, %v; want the same volume", again, err)
	}
	other := createReq("pvc-1234", params)
	other.CapacityRange.RequiredBytes = 2 << 30
	_, err = c.CreateVolume(ctx, other)
	wantCode(t, err, codes.AlreadyExists, "the same name with another capacity")
	_, err = c.CreateVolume(ctx, createReq("pvc-1234", map[string]string{ParamBucket: "data", ParamPrefix: "volumes", "uid": "2000"}))
	wantCode(t, err, codes.AlreadyExists, "the same name with other parameters")

	// A second claim is a second prefix, a fence domain of its own.
	two, err := c.CreateVolume(ctx, createReq("pvc-5678", params))
	if err != nil || two.GetVolume().GetVolumeContext()["prefix"] != "volumes/pvc-5678/" {
		t.Errorf("a second volume: %v, %v", two, err)
	}
}

func TestCreateVolumeRefusesWithOneLine(t *testing.T) {
	c := newTestController(t, "data")
	put(t, c.buckets["data"], "taken/pvc-1/file", "vols/outer/x")
	ctx := context.Background()
	if _, err := c.CreateVolume(ctx, createReq("outer", map[string]string{ParamBucket: "data", ParamPrefix: "vols2"})); err != nil {
		t.Fatal(err)
	}
	noCaps := createReq("pvc-1", map[string]string{ParamBucket: "data"})
	noCaps.VolumeCapabilities = nil
	block := createReq("pvc-1", map[string]string{ParamBucket: "data"})
	block.VolumeCapabilities[0].AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	for _, tc := range []struct {
		what string
		req  *csi.CreateVolumeRequest
		code codes.Code
		msg  string
	}{
		{"no name", createReq("", map[string]string{ParamBucket: "data"}), codes.InvalidArgument, "name is missing"},
		{"no capabilities", noCaps, codes.InvalidArgument, "volume_capabilities is missing"},
		{"block", block, codes.InvalidArgument, "block access"},
		{"no bucket", createReq("pvc-1", nil), codes.InvalidArgument, "bucketName is missing"},
		{"a bucket that does not exist", createReq("pvc-1", map[string]string{ParamBucket: "nope"}), codes.FailedPrecondition, "bucket nope"},
		{"the fence domain", createReq("pvc-1", map[string]string{ParamBucket: "data", "fence_domain": "bucket"}), codes.InvalidArgument, "a fence domain of its own"},
		{"an endpoint", createReq("pvc-1", map[string]string{ParamBucket: "data", "endpoint": "http://x"}), codes.InvalidArgument, "the controller's"},
		{"a token", createReq("pvc-1", map[string]string{ParamBucket: "data", "token": "5"}), codes.InvalidArgument, "without a token"},
		{"credentials", createReq("pvc-1", map[string]string{ParamBucket: "data", "secret_key": "s"}), codes.InvalidArgument, "secret"},
		{"onDelete", createReq("pvc-1", map[string]string{ParamBucket: "data", ParamOnDelete: "Delete"}), codes.InvalidArgument, "retain, delete"},
		{"a prefix with ..", createReq("pvc-1", map[string]string{ParamBucket: "data", ParamPrefix: "a/../b"}), codes.InvalidArgument, `segment ".."`},
		{"a prefix in the protocol directory", createReq("pvc-1", map[string]string{ParamBucket: "data", ParamPrefix: ".fencefs"}), codes.InvalidArgument, "protocol directory"},
		{"a prefix holding a user's objects", createReq("pvc-1", map[string]string{ParamBucket: "data", ParamPrefix: "taken"}), codes.FailedPrecondition, "no CreateVolume made (taken/pvc-1/file)"},
		{"inside another volume", createReq("inner", map[string]string{ParamBucket: "data", ParamPrefix: "vols2/outer"}), codes.FailedPrecondition, "lies inside volume"},
		{"a secret with another key", func() *csi.CreateVolumeRequest {
			r := createReq("pvc-1", map[string]string{ParamBucket: "data"})
			r.Secrets = map[string]string{"password": "x"}
			return r
		}(), codes.InvalidArgument, `secret key "password" is not accepted`},
	} {
		_, err := c.CreateVolume(ctx, tc.req)
		wantCode(t, err, tc.code, tc.what)
		if !strings.Contains(status.Convert(err).Message(), tc.msg) {
			t.Errorf("%s: %q; want it to say %q", tc.what, status.Convert(err).Message(), tc.msg)
		}
	}
	if got := keys(t, c.buckets["data"]); len(got) != 3 {
		t.Errorf("refused calls changed the bucket: %v", got)
	}
}

func TestDeleteVolumeRemovesEveryObjectOfItsPrefixAndNothingElse(t *testing.T) {
	c := newTestController(t, "data")
	ctx := context.Background()
	params := map[string]string{ParamBucket: "data", ParamPrefix: "v", ParamOnDelete: OnDeleteDelete}
	resp, err := c.CreateVolume(ctx, createReq("pvc-1", params))
	if err != nil {
		t.Fatal(err)
	}
	st := c.buckets["data"]
	// The volume's files and its fence domain's protocol objects, beside
	// neighbours that share a prefix of its name, and the base prefix.
	put(t, st, "v/pvc-1/a.txt", "v/pvc-1/dir/b.txt", "v/pvc-1/.fencefs/epoch", "v/pvc-1/.fencefs/epochs/00000000000000000007",
		"v/pvc-1/.fencefs/intents/7/c-1", "v/pvc-1/.fencefs/tombstones/7-c",
		"v/pvc-10/keep.txt", "v/pvc-1x", "v/keep.txt", "pvc-1/keep.txt", ".fencefs/epoch")
	upload := st.AddUpload("v/pvc-1/big.bin", time.Now())
	other := st.AddUpload("v/pvc-10/big.bin", time.Now())
	if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: resp.GetVolume().GetVolumeId()}); err != nil {
		t.Fatal(err)
	}
	want := "[.fencefs/epoch pvc-1/keep.txt v/keep.txt v/pvc-10/keep.txt v/pvc-1x]"
	if got := keys(t, st); fmt.Sprint(got) != want {
		t.Errorf("after DeleteVolume the bucket holds %v; want %s", got, want)
	}
	var uploads []string
	_ = st.ListUploads(ctx, "", func(u objstore.Upload) error { uploads = append(uploads, u.UploadID); return nil })
	if fmt.Sprint(uploads) != fmt.Sprint([]string{other}) {
		t.Errorf("uploads left %v; want only the neighbour's %s (the volume's %s aborted)", uploads, other, upload)
	}
	// Again, and ids of no volume: success, nothing deleted.
	for _, id := range []string{resp.GetVolume().GetVolumeId(), "reallyfakevolumeid", "data/", "data", "data/v", "nope/v/pvc-1", "data/v/../v", "data/v/pvc-10"} {
		if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Errorf("DeleteVolume %q: %v; want success", id, err)
		}
	}
	if got := keys(t, st); fmt.Sprint(got) != want {
		t.Errorf("deleting ids of no volume changed the bucket: %v", got)
	}
	_, err = c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{})
	wantCode(t, err, codes.InvalidArgument, "no volume id")
}

func TestDeleteVolumeRetainsByDefault(t *testing.T) {
	c := newTestController(t, "data")
	ctx := context.Background()
	params := map[string]string{ParamBucket: "data"}
	resp, err := c.CreateVolume(ctx, createReq("pvc-1", params))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	put(t, c.buckets["data"], "pvc-1/a.txt")
	for i := 0; i < 2; i++ {
		if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatal(err)
		}
	}
	if got := keys(t, c.buckets["data"]); fmt.Sprint(got) != "[pvc-1/.fencefs/csi-volume.json pvc-1/a.txt]" {
		t.Errorf("a retained volume's bucket holds %v", got)
	}
	_, err = c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id,
		VolumeCapabilities: []*csi.VolumeCapability{volCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}})
	wantCode(t, err, codes.NotFound, "validating a deleted volume")
	_, err = c.CreateVolume(ctx, createReq("pvc-1", params))
	wantCode(t, err, codes.AlreadyExists, "making a retained volume again")
	if !strings.Contains(status.Convert(err).Message(), "objects were kept under s3://data/pvc-1/") {
		t.Errorf("making a retained volume again: %v", err)
	}
}

func TestDeleteVolumeLeavesAPrefixThatIsNotAllItsOwn(t *testing.T) {
	c := newTestController(t, "data")
	ctx := context.Background()
	st := c.buckets["data"]
	// A prefix whose record is not this volume's, and one holding another
	// volume's record below it: nothing of either is deleted.
	put(t, st, "a/x.txt")
	if _, err := st.Put(ctx, "a/"+recordKey, strings.NewReader(`{"format":1,"driver":"csi.fencefs.io","bucket":"data","prefix":"b/"}`), 66, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "data/a"})
	wantCode(t, err, codes.FailedPrecondition, "a record of another prefix")

	if _, err := c.CreateVolume(ctx, createReq("outer", map[string]string{ParamBucket: "data", ParamOnDelete: OnDeleteDelete})); err != nil {
		t.Fatal(err)
	}
	body := encodeRecord(volumeRecord{Format: 1, Driver: Name, Bucket: "data", Prefix: "outer/inner/"})
	if _, err := st.Put(ctx, "outer/inner/"+recordKey, strings.NewReader(string(body)), int64(len(body)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	put(t, st, "outer/inner/data.txt")
	_, err = c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "data/outer"})
	wantCode(t, err, codes.FailedPrecondition, "another volume's record below")
	if got := keys(t, st); len(got) != 5 {
		t.Errorf("refused deletes changed the bucket: %v", got)
	}
}

func TestVolumeIDsOfLongNamesStayWithinTheSpecsLimit(t *testing.T) {
	long := strings.Repeat("n", 128)
	for _, name := range []string{"pvc-0b9f8a6e-4a4c-4a8e-9a3e-3f1b2c0d9e7a", long, "a/b", ".fencefs", "..", "x y", strings.Repeat("é", 64)} {
		seg := volumeSegment(name)
		id := volumeID(strings.Repeat("b", 63), "p/"+seg+"/")
		if len(id) > maxVolumeID {
			t.Errorf("name %q: volume id %q is %d bytes", name, id, len(id))
		}
		if b, p, ok := parseVolumeID(id); !ok || p != "p/"+seg+"/" || len(b) != 63 {
			t.Errorf("name %q: id %q does not parse back: %q %q %v", name, id, b, p, ok)
		}
		if seg != volumeSegment(name) || strings.HasPrefix(seg, ".") || strings.Contains(seg, "/") {
			t.Errorf("name %q: segment %q", name, seg)
		}
	}
	if volumeSegment(long) == volumeSegment(long[:127]+"m") {
		t.Error("two long names share a prefix")
	}
}

func TestValidateVolumeCapabilities(t *testing.T) {
	c := newTestController(t, "data")
	ctx := context.Background()
	resp, err := c.CreateVolume(ctx, createReq("pvc-1", map[string]string{ParamBucket: "data"}))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	caps := []*csi.VolumeCapability{volCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}
	r, err := c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: caps})
	if err != nil || r.GetConfirmed() == nil {
		t.Errorf("a mount capability: %v, %v; want it confirmed", r, err)
	}
	block := []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}}
	r, err = c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: block})
	if err != nil || r.GetConfirmed() != nil || r.GetMessage() == "" {
		t.Errorf("block: %v, %v; want it unconfirmed, with a message", r, err)
	}
	for _, tc := range []struct {
		id   string
		caps []*csi.VolumeCapability
		code codes.Code
	}{{"", caps, codes.InvalidArgument}, {id, nil, codes.InvalidArgument}, {"data/pvc-2", caps, codes.NotFound}, {"fake", caps, codes.NotFound}, {"nope/pvc-1", caps, codes.NotFound}} {
		_, err := c.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: tc.id, VolumeCapabilities: tc.caps})
		wantCode(t, err, tc.code, "validate "+tc.id)
	}
}

// A request's secret reaches the store, and never an error message.
func TestControllerSecretsReachTheStoreOnlyAndNeverAMessage(t *testing.T) {
	c := newTestController(t, "data")
	secrets := map[string]string{SecretAccessKeyID: "AKIDEXAMPLE", SecretSecretAccessKey: "very-secret-key-value"}
	c.open = func(_ context.Context, bucket string, s map[string]string) (objstore.Store, func(), error) {
		c.lastSecrets = s
		return nil, nil, fmt.Errorf("signature of very-secret-key-value refused: %w", objstore.ErrAuth)
	}
	req := createReq("pvc-1", map[string]string{ParamBucket: "data"})
	req.Secrets = secrets
	_, err := c.CreateVolume(context.Background(), req)
	wantCode(t, err, codes.PermissionDenied, "refused credentials")
	if strings.Contains(err.Error(), "very-secret-key-value") || c.lastSecrets[SecretSecretAccessKey] != "very-secret-key-value" {
		t.Errorf("error %q (the store was given %d secrets)", err, len(c.lastSecrets))
	}
}

// The record an unknown newer controller wrote is left alone.
func TestARecordOfANewerFormatIsRefused(t *testing.T) {
	_, err := decodeRecord([]byte(`{"format":2,"driver":"csi.fencefs.io","bucket":"b","prefix":"p/"}`), "b", "p/")
	if err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("a record of format 2: %v", err)
	}
	_, err = decodeRecord([]byte(`not json`), "b", "p/")
	if err == nil || errors.Is(err, io.EOF) {
		t.Errorf("garbage: %v", err)
	}
}
