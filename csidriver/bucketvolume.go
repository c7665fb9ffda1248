package csidriver

// A bucket per volume. A StorageClass with bucketPerVolume: "true" makes
// each volume a bucket of its own instead of a prefix of the class's
// bucket: for teams whose S3 policies, quotas, replication or billing are
// per bucket. The bucket is named for the volume (volumeBucketName: its
// name as Kubernetes gives it, pvc-<uid>, when that is a valid bucket
// name, else a readable head of it and a hash), its volume id is that
// name alone (no '/': a prefix volume's id always has one), and its
// record is the object .fencefs/csi-volume.json at the bucket's top level,
// of kind "bucket". Its fence domain is the bucket's.
//
// The rule is the prefix volumes' (provision.go): CreateVolume makes the
// bucket (a bucket that exists and is the caller's is not an error, so a
// retry after a crash goes on), then refuses it if it holds any object
// no CreateVolume made — it never adopts a user's data — and writes the
// record with If-None-Match. DeleteVolume with onDelete: delete removes
// every object of the bucket (files, intents, tombstones, the register),
// the record last, then the bucket; only when the record says it is this
// bucket's volume of kind bucket, and never when the bucket holds another
// volume's record. With retain, or with reclaimPolicy: Retain, the bucket
// stays. A bucket that refuses to be removed (object versions left, or an
// object written meanwhile) gets its record back, so that a retry goes on
// instead of leaving an unrecorded bucket behind.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/fencefs/fencefs/objstore/s3"
)

// ParamBucketPerVolume ("true" or "false", the default) makes each volume
// of a StorageClass a bucket of its own.
const ParamBucketPerVolume = "bucketPerVolume"

// kindBucket is the record kind of a bucket-per-volume volume ("" is a
// prefix of a bucket).
const kindBucket = "bucket"

// bucketAdmin makes and removes the buckets of bucket-per-volume volumes,
// with the credentials of a request's secrets (none: the controller's
// own). Its errors wrap the objstore sentinels.
type bucketAdmin interface {
	// makeBucket creates bucket; one that exists and is the caller's is
	// not an error.
	makeBucket(ctx context.Context, bucket string, secrets map[string]string) error
	// removeBucket deletes the empty bucket (objstore.ErrConflict when it
	// is not empty); a missing one is not an error.
	removeBucket(ctx context.Context, bucket string, secrets map[string]string) error
}

// s3Buckets is the bucketAdmin of the controller's S3 server.
type s3Buckets struct{ c *Controller }

func (b s3Buckets) makeBucket(ctx context.Context, bucket string, secrets map[string]string) error {
	return s3.MakeBucket(ctx, b.c.s3Config(bucket, secrets))
}

func (b s3Buckets) removeBucket(ctx context.Context, bucket string, secrets map[string]string) error {
	return s3.RemoveBucket(ctx, b.c.s3Config(bucket, secrets))
}

// bucketNameRE is an S3 bucket name of the strict kind every server
// takes: 3 to 63 lower-case letters, digits and '-', a letter or digit at
// either end (no '.': virtual-host TLS breaks on it).
var bucketNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$`)

// validBucketName reports whether name is a bucket name volumeBucketName
// may return (and so a bucket volume's id).
func validBucketName(name string) bool {
	return bucketNameRE.MatchString(name) && !strings.HasPrefix(name, "xn--") && !strings.HasPrefix(name, "sthree-") &&
		!strings.HasSuffix(name, "-s3alias") && !strings.HasSuffix(name, "--ol-s3")
}

// volumeBucketName is the bucket of the volume named name: the name
// itself when it is a valid bucket name (Kubernetes gives pvc-<uid>),
// else "fencefs-", a readable head of it and a hash of the whole, so that
// two names never share a bucket.
func volumeBucketName(name string) string {
	if validBucketName(name) {
		return name
	}
	var head strings.Builder
	for _, r := range strings.ToLower(name) {
		if head.Len() >= 30 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			head.WriteRune(r)
		} else if s := head.String(); s != "" && !strings.HasSuffix(s, "-") {
			head.WriteByte('-')
		}
	}
	sum := sha256.Sum256([]byte(name))
	h := strings.TrimSuffix(head.String(), "-")
	if h != "" {
		h += "-"
	}
	return "fencefs-" + h + hex.EncodeToString(sum[:8])
}

// parseBoolParam reads a "true"/"false" StorageClass parameter.
func parseBoolParam(name, v string) (bool, error) {
	switch v {
	case "true":
		return true, nil
	case "false", "":
		return false, nil
	}
	return false, invalid("parameter %s %q is not accepted (accepted: true, false)", name, v)
}

// checkPerVolumeParams refuses what a bucket-per-volume class cannot
// have: a bucket or a prefix of its own.
func checkPerVolumeParams(p classParams) error {
	if p.Bucket != "" || p.BasePrefix != "" {
		return invalid("parameters %s and %s are not accepted with %s: true: each volume is a bucket of its own, named for the volume", ParamBucket, ParamPrefix, ParamBucketPerVolume)
	}
	return nil
}

// removeBucketVolume removes the bucket of the volume r after
// removePrefix emptied it; when the bucket refuses, its record is written
// again so that DeleteVolume is retried to the end, not left with an
// unrecorded bucket.
func (c *Controller) removeBucketVolume(ctx context.Context, r volumeRecord, secrets map[string]string, putRecord func() error) error {
	err := c.buckets.removeBucket(ctx, r.Bucket, secrets)
	if err == nil {
		return nil
	}
	if perr := putRecord(); perr != nil {
		return fmt.Errorf("%v; writing its record back: %v", err, perr)
	}
	return err
}
