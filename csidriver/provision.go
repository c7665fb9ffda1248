package csidriver

// What a CreateVolumeRequest asks for, as the prefix of a bucket it
// becomes, and the record of it that the controller keeps in the bucket.
// Pure functions, no I/O: controller.go does the calls.
//
// A provisioned volume is the prefix PREFIX/NAME/ of a bucket (PREFIX the
// StorageClass's prefix parameter, NAME the volume's name as Kubernetes
// gives it, pvc-<uid>), mounted with fence_domain=prefix: its own epoch
// register under PREFIX/NAME/.fencefs/, so that the leaders of two claims
// never fence each other. Its volume id is "BUCKET/PREFIX/NAME": everything
// DeleteVolume, which is given nothing else, needs to find it. The volume's
// record (volumeRecord) is the object PREFIX/NAME/.fencefs/csi-volume.json:
// written first, with If-None-Match, by CreateVolume, it makes a repeated
// CreateVolume return the same volume, and it is what DeleteVolume checks
// before it removes anything: a prefix without it was not made by this
// controller and is never deleted.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/fencefs/fencefs/fencing"
)

// The StorageClass parameters the controller reads itself; every other
// parameter without a '/' is a volume attribute of the volumes it makes
// (a fencefs -o option: uid, gid, fence_mode, meta_ttl …).
const (
	// ParamBucket names the bucket the volumes are prefixes of (required;
	// the bucket must exist: the controller makes prefixes, not buckets).
	ParamBucket = AttrBucket
	// ParamPrefix is the key prefix under which each volume gets its own
	// prefix ("" for the bucket's top level).
	ParamPrefix = "prefix"
	// ParamOnDelete is what DeleteVolume does with the volume's objects:
	// OnDeleteRetain (the default) or OnDeleteDelete.
	ParamOnDelete = "onDelete"

	OnDeleteRetain = "retain"
	OnDeleteDelete = "delete"
)

// serverAttrs are the volume attributes of the S3 server: a provisioned
// volume's are the controller's own (its --s3-* flags), which DeleteVolume
// must reach again with nothing but the volume id.
var serverAttrs = map[string]bool{"endpoint": true, "region": true, "path_style": true, "s3.endpoint": true, "s3.region": true, "s3.path_style": true}

// recordKey is the key of a volume's record, under its prefix: in its
// fence domain's protocol directory, hidden from the volume's mounts.
const recordKey = fencing.ProtocolDir + "/csi-volume.json"

// recordFormat is the format of volumeRecord; a newer one is refused.
const recordFormat = 1

// maxVolumeID is the CSI specification's size limit of a string field.
const maxVolumeID = 128

// classParams are a CreateVolume's StorageClass parameters.
type classParams struct {
	Bucket     string
	BasePrefix string // "" or ending in '/'
	OnDelete   string // OnDeleteRetain or OnDeleteDelete
	// PerVolume: each volume is a bucket of its own (bucketvolume.go).
	PerVolume bool
	// Attrs are the volume attributes passed through to the node (fencefs
	// -o options), checked as NodePublishVolume checks them.
	Attrs map[string]string
	// Given are the parameters as given, without the CO's own ('/'): two
	// CreateVolume calls of one name must give the same.
	Given map[string]string
}

// parseClassParams reads a CreateVolume's parameters; a mistake is an
// InvalidArgument status whose message is one line naming the parameter.
func parseClassParams(params map[string]string) (classParams, error) {
	p := classParams{Attrs: map[string]string{}, Given: map[string]string{}, OnDelete: OnDeleteRetain}
	names := make([]string, 0, len(params))
	for k := range params {
		if !strings.Contains(k, "/") { // csi.storage.k8s.io/…: the CO's
			names = append(names, k)
			p.Given[k] = params[k]
		}
	}
	sort.Strings(names)
	attrs := volumeSpec{Options: map[string]string{}}
	for _, k := range names {
		v := strings.TrimSpace(params[k])
		switch {
		case k == ParamBucket:
			p.Bucket = v
		case k == ParamPrefix:
			base, err := normalizeBasePrefix(v)
			if err != nil {
				return p, err
			}
			p.BasePrefix = base
		case k == ParamBucketPerVolume:
			b, err := parseBoolParam(k, v)
			if err != nil {
				return p, err
			}
			p.PerVolume = b
		case k == ParamOnDelete:
			if v != OnDeleteRetain && v != OnDeleteDelete {
				return p, invalid("parameter %s %q is not accepted (accepted: %s, %s)", ParamOnDelete, v, OnDeleteRetain, OnDeleteDelete)
			}
			p.OnDelete = v
		case k == "fence_domain" || k == "fence.domain":
			return p, invalid("parameter %s is not accepted: every provisioned volume is a fence domain of its own (fence_domain=prefix)", k)
		case serverAttrs[k]:
			return p, invalid("parameter %s is not accepted: the S3 server of provisioned volumes is the controller's (fencefs csi --controller --s3-endpoint, --s3-region, --s3-path-style)", k)
		case k == "s3.prefix" || k == "s3.bucket" || k == "bucket":
			return p, invalid("parameter %s is not accepted: the bucket is %s, the prefix under which volumes are made %s", k, ParamBucket, ParamPrefix)
		default:
			if err := attrs.setOption("parameter", k, v); err != nil {
				return p, err
			}
		}
	}
	if p.PerVolume {
		if err := checkPerVolumeParams(p); err != nil {
			return p, err
		}
	} else if err := checkBucket("parameter "+ParamBucket, p.Bucket); err != nil {
		return p, err
	}
	// authenticationSource and tokenAudience reach the node as attributes
	// (podtoken.go); a mistake in them is the class's.
	if _, err := podAuthFrom("parameter", params); err != nil {
		return p, err
	}
	p.Attrs = attrs.Options
	return p, nil
}

// normalizeBasePrefix is the StorageClass's prefix, "" or ending in '/'.
func normalizeBasePrefix(v string) (string, error) {
	v = strings.TrimSuffix(v, "/")
	if v == "" {
		return "", nil
	}
	if err := checkPrefix(v); err != nil {
		return "", invalid("parameter %s %q is not a key prefix: %s", ParamPrefix, v, err)
	}
	return v + "/", nil
}

// checkPrefix checks a key prefix without its final '/': segments of
// printable characters, none empty, ".", ".." or the protocol directory.
func checkPrefix(p string) error {
	for _, seg := range strings.Split(p, "/") {
		switch {
		case seg == "":
			return fmt.Errorf("a leading, trailing or doubled '/'")
		case seg == "." || seg == "..":
			return fmt.Errorf("a segment %q", seg)
		case seg == fencing.ProtocolDir:
			return fmt.Errorf("a segment %s (fencefs's protocol directory)", fencing.ProtocolDir)
		}
		for _, r := range seg {
			if r < 0x20 || r == 0x7f {
				return fmt.Errorf("a control character")
			}
		}
	}
	return nil
}

// volumeSegment is the last segment of a volume's prefix for its name:
// the name itself when it is a short run of [A-Za-z0-9._-] (Kubernetes
// gives pvc-<uid>), else a readable head of it and a hash of the whole,
// so that any name of up to 128 bytes makes a volume id of at most 128.
func volumeSegment(name string) string {
	safe := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
	}
	ok := len(name) <= 63 && !strings.HasPrefix(name, ".")
	for _, r := range name {
		ok = ok && safe(r)
	}
	if ok {
		return name
	}
	var head strings.Builder
	for _, r := range name {
		if head.Len() >= 24 {
			break
		}
		if !safe(r) {
			r = '-'
		}
		head.WriteRune(r)
	}
	sum := sha256.Sum256([]byte(name))
	return strings.TrimLeft(head.String(), ".") + "-" + hex.EncodeToString(sum[:8])
}

// volumeID is the id of the volume at prefix (ending in '/') of bucket;
// a bucket volume's (prefix "") is the bucket's name.
func volumeID(bucket, prefix string) string {
	if prefix == "" {
		return bucket
	}
	return bucket + "/" + strings.TrimSuffix(prefix, "/")
}

// parseVolumeID is the bucket and prefix (ending in '/') of a volume id;
// false for an id no CreateVolume of this controller returns. The prefix
// is "" only for an id without '/', a bucket volume's: the bucket's top
// level is a volume only when its record says it is of kind bucket.
func parseVolumeID(id string) (bucket, prefix string, ok bool) {
	if !strings.Contains(id, "/") {
		return id, "", validBucketName(id)
	}
	bucket, p, found := strings.Cut(id, "/")
	if !found || p == "" || checkBucket("", bucket) != nil || checkPrefix(p) != nil || len(id) > maxVolumeID {
		return "", "", false
	}
	return bucket, p + "/", true
}

// volumeRecord is what CreateVolume stored of a volume, at its recordKey.
type volumeRecord struct {
	Format int    `json:"format"`
	Driver string `json:"driver"`
	// Name is the CreateVolume's name, Bucket and Prefix where it is.
	Name   string `json:"name"`
	Bucket string `json:"bucket"`
	Prefix string `json:"prefix"`
	// RequiredBytes and LimitBytes are the capacity asked for (recorded
	// for idempotency; not enforced).
	RequiredBytes int64 `json:"required_bytes,omitempty"`
	LimitBytes    int64 `json:"limit_bytes,omitempty"`
	// Parameters are the StorageClass parameters, Context the volume
	// context returned (what NodePublishVolume mounts).
	Parameters map[string]string `json:"parameters"`
	// Kind is kindBucket for a volume that is a bucket of its own
	// (Prefix ""), "" for a prefix of a bucket.
	Kind      string            `json:"kind,omitempty"`
	Context   map[string]string `json:"context"`
	OnDelete  string            `json:"on_delete"`
	CreatedAt time.Time         `json:"created_at"`
	// RetainedAt is set by a DeleteVolume that kept the objects
	// (OnDeleteRetain): the volume is gone for the CO, its data is not.
	RetainedAt *time.Time `json:"retained_at,omitempty"`
}

// newRecord is the record of a volume made for req with p.
func newRecord(req *csi.CreateVolumeRequest, p classParams, server map[string]string, now time.Time) volumeRecord {
	bucket, prefix, kind := p.Bucket, p.BasePrefix+volumeSegment(req.GetName())+"/", ""
	ctx := map[string]string{AttrBucket: bucket, "prefix": prefix, "fence_domain": "prefix"}
	if p.PerVolume {
		// The bucket's own fence domain, the default.
		bucket, prefix, kind = volumeBucketName(req.GetName()), "", kindBucket
		ctx = map[string]string{AttrBucket: bucket}
	}
	maps.Copy(ctx, p.Attrs)
	maps.Copy(ctx, server)
	return volumeRecord{Format: recordFormat, Driver: Name, Name: req.GetName(), Bucket: bucket, Prefix: prefix, Kind: kind,
		RequiredBytes: req.GetCapacityRange().GetRequiredBytes(), LimitBytes: req.GetCapacityRange().GetLimitBytes(),
		Parameters: p.Given, Context: ctx, OnDelete: p.OnDelete, CreatedAt: now.UTC().Truncate(time.Second)}
}

// sameRequest is why a volume recorded as r is not the one want asks for
// ("" when it is): CreateVolume then answers AlreadyExists.
func (r volumeRecord) sameRequest(want volumeRecord) string {
	switch {
	case r.Name != want.Name:
		return fmt.Sprintf("its prefix holds volume %q", r.Name)
	case r.RetainedAt != nil:
		return fmt.Sprintf("it was deleted on %s with %s: %s, and its objects were kept under s3://%s/%s (remove them to make it again)",
			r.RetainedAt.Format(time.RFC3339), ParamOnDelete, OnDeleteRetain, r.Bucket, r.Prefix)
	case r.RequiredBytes != want.RequiredBytes || r.LimitBytes != want.LimitBytes:
		return fmt.Sprintf("it was made with capacity required %d, limit %d bytes; now asked with %d, %d", r.RequiredBytes, r.LimitBytes, want.RequiredBytes, want.LimitBytes)
	case !maps.Equal(r.Parameters, want.Parameters):
		return "it was made with other parameters"
	}
	return ""
}

// encodeRecord is the object's content.
func encodeRecord(r volumeRecord) []byte {
	b, _ := json.MarshalIndent(r, "", "  ")
	return append(b, '\n')
}

// decodeRecord reads the record at recordKey of the volume at bucket and
// prefix; an object that is not one of this controller's, for this place,
// is an error (and the prefix is then left alone).
func decodeRecord(b []byte, bucket, prefix string) (volumeRecord, error) {
	var r volumeRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("s3://%s/%s%s is not a volume record: %v", bucket, prefix, recordKey, err)
	}
	switch {
	case r.Format > recordFormat:
		return r, fmt.Errorf("s3://%s/%s%s has format %d, newer than this driver's %d: upgrade the controller", bucket, prefix, recordKey, r.Format, recordFormat)
	case r.Driver != Name || r.Bucket != bucket || r.Prefix != prefix || (r.Kind == kindBucket) != (prefix == ""):
		return r, fmt.Errorf("s3://%s/%s%s is the record of s3://%s/%s (driver %q), not of this prefix", bucket, prefix, recordKey, r.Bucket, r.Prefix, r.Driver)
	}
	return r, nil
}

// isNestedRecord reports whether key, under prefix, is the record of a
// volume nested below prefix's own (DeleteVolume then deletes nothing).
func isNestedRecord(key, prefix string) bool {
	return key != prefix+recordKey && strings.HasSuffix(key, "/"+recordKey)
}

// ancestors are the prefixes (ending in '/') above prefix, outermost
// first, without the bucket's top level: where an enclosing volume's
// record would be.
func ancestors(prefix string) []string {
	var out []string
	p := strings.TrimSuffix(prefix, "/")
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i+1])
		}
	}
	return out
}

// CheckClassParameters reports whether CreateVolume takes a StorageClass's
// parameters (nil), else why not, in one line.
func CheckClassParameters(params map[string]string) error {
	_, err := parseClassParams(params)
	return err
}
