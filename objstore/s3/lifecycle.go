package s3

import (
	"context"
	"fmt"

	"github.com/fencefs/fencefs/objstore"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
)

var _ objstore.Expirer = (*Store)(nil)

// EnsureTagExpiry implements objstore.Expirer with GetBucketLifecycle and,
// when the rule is missing or differs, PutBucketLifecycle of the whole
// configuration with the rule added or replaced.
func (s *Store) EnsureTagExpiry(ctx context.Context, r objstore.TagExpiry) error {
	if r.ID == "" || r.Days < 1 {
		return fmt.Errorf("lifecycle rule %q of %d days: %w", r.ID, r.Days, objstore.ErrInvalid)
	}
	if err := objstore.ValidateTags(map[string]string{r.Key: r.Value}); err != nil {
		return err
	}
	var cfg *lifecycle.Configuration
	err := s.call(ctx, "get_lifecycle", false, func(ctx context.Context) error {
		var err error
		cfg, err = s.core.GetBucketLifecycle(ctx, s.cfg.Bucket)
		if minio.ToErrorResponse(err).Code == "NoSuchLifecycleConfiguration" {
			cfg, err = lifecycle.NewConfiguration(), nil
		}
		return s.classify(err, "get bucket lifecycle", "")
	})
	if err != nil {
		return err
	}
	want := tagExpiryRule(r)
	i := 0
	for ; i < len(cfg.Rules); i++ {
		if cfg.Rules[i].ID == r.ID {
			break
		}
	}
	if i < len(cfg.Rules) && sameTagExpiry(cfg.Rules[i], want) {
		return nil
	}
	if i < len(cfg.Rules) {
		cfg.Rules[i] = want
	} else {
		cfg.Rules = append(cfg.Rules, want)
	}
	return s.call(ctx, "put_lifecycle", false, func(ctx context.Context) error {
		return s.classify(s.core.SetBucketLifecycle(ctx, s.cfg.Bucket, cfg), "put bucket lifecycle", "")
	})
}

// tagExpiryRule is the lifecycle rule of r.
func tagExpiryRule(r objstore.TagExpiry) lifecycle.Rule {
	rule := lifecycle.Rule{ID: r.ID, Status: "Enabled", Expiration: lifecycle.Expiration{Days: lifecycle.ExpirationDays(r.Days)}}
	tag := lifecycle.Tag{Key: r.Key, Value: r.Value}
	if r.Prefix == "" {
		rule.RuleFilter = lifecycle.Filter{Tag: tag}
	} else {
		rule.RuleFilter = lifecycle.Filter{And: lifecycle.And{Prefix: r.Prefix, Tags: []lifecycle.Tag{tag}}}
	}
	return rule
}

// sameTagExpiry reports whether the installed rule got does what want does,
// keeping objects at least as long (a mount configured for a longer wait
// is never overruled by one configured for a shorter).
func sameTagExpiry(got, want lifecycle.Rule) bool {
	gf, wf := got.RuleFilter, want.RuleFilter
	tagOf := func(f lifecycle.Filter) (string, lifecycle.Tag, bool) {
		switch {
		case !f.Tag.IsEmpty() && f.And.IsEmpty() && f.Prefix == "":
			return "", f.Tag, true
		case f.Tag.IsEmpty() && len(f.And.Tags) == 1 && f.Prefix == "" && f.And.ObjectSizeLessThan == 0 && f.And.ObjectSizeGreaterThan == 0:
			return f.And.Prefix, f.And.Tags[0], true
		}
		return "", lifecycle.Tag{}, false
	}
	gp, gt, gok := tagOf(gf)
	wp, wt, _ := tagOf(wf)
	return gok && gp == wp && gt.Key == wt.Key && gt.Value == wt.Value && got.Status == "Enabled" &&
		got.Prefix == "" && got.Expiration.Days >= want.Expiration.Days && got.Expiration.IsDateNull()
}
