package s3_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/objstore"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
)

// TestEnsureTagExpiryKeepsTheBucketsOtherRules: on MinIO the rule is added
// next to an operator's rule, is not rewritten when it is there, and a
// second call asking fewer days keeps the longer wait; on the Versity
// gateway, which has no lifecycle rules, it fails at once as a refusal
// (ErrInvalid), not as an outage to retry.
func TestEnsureTagExpiryKeepsTheBucketsOtherRules(t *testing.T) {
	gateway.ForEachServer(t, gateway.SingleDriveServers, func(t *testing.T, gw *gateway.Gateway) {
		cfg := config(t, gw)
		s := newStore(t, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rule := objstore.TagExpiry{ID: "fencefs-tombstones", Key: "fencefs-tombstone", Value: "1", Days: 2}
		if gw.Kind == gateway.Versity {
			start := time.Now()
			err := s.EnsureTagExpiry(ctx, rule)
			if !errors.Is(err, objstore.ErrInvalid) || time.Since(start) > 5*time.Second {
				t.Fatalf("EnsureTagExpiry on the gateway: %v after %v; want ErrInvalid at once", err, time.Since(start))
			}
			return
		}
		c := gw.Client()
		ops := lifecycle.NewConfiguration()
		ops.Rules = []lifecycle.Rule{{ID: "operator", Status: "Enabled", RuleFilter: lifecycle.Filter{Prefix: "logs/"},
			Expiration: lifecycle.Expiration{Days: 30}}}
		if err := c.SetBucketLifecycle(ctx, cfg.Bucket, ops); err != nil {
			t.Fatal(err)
		}
		for _, days := range []int{2, 2, 1} {
			rule.Days = days
			if err := s.EnsureTagExpiry(ctx, rule); err != nil {
				t.Fatalf("EnsureTagExpiry(%d days): %v", days, err)
			}
		}
		got, err := c.GetBucketLifecycle(ctx, cfg.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Rules) != 2 || got.Rules[0].ID != "operator" || got.Rules[1].ID != "fencefs-tombstones" ||
			got.Rules[1].RuleFilter.Tag.Key != "fencefs-tombstone" || got.Rules[1].Expiration.Days != 2 {
			t.Fatalf("rules %+v; want the operator's and fencefs-tombstones (tag filter, 2 days)", got.Rules)
		}
	})
}
