package objstore

import (
	"context"
	"time"
)

// TagExpiry is a bucket lifecycle rule that has the store itself remove
// every object under Prefix that carries the object tag Key=Value, Days
// days after the object was written (S3 semantics: at the first midnight
// UTC after that, see Due). The store decides on the object's current
// version when it removes it: an object replaced by one without the tag is
// not removed (MinIO evaluates the rule again under the object's lock
// before it expires it).
type TagExpiry struct {
	ID         string // the rule's ID in the bucket's lifecycle configuration
	Prefix     string // "" for the whole bucket
	Key, Value string // the tag
	Days       int    // at least 1
}

// Due is when an object written at written is removed under r, as S3 and
// MinIO compute it: the midnight UTC after written + Days days (so between
// Days and Days+1 days after it was written). A listing stops showing the
// object then; the store deletes it at that time or soon after.
func (r TagExpiry) Due(written time.Time) time.Time {
	return written.UTC().Add(time.Duration(r.Days+1) * 24 * time.Hour).Truncate(24 * time.Hour)
}

// Expirer is a Store whose bucket can hold TagExpiry rules.
type Expirer interface {
	// EnsureTagExpiry makes the bucket's lifecycle configuration hold r
	// (or a rule of the same ID and filter that waits more days) under
	// r.ID, keeping every other rule (the configuration is read,
	// changed and written back: an operator's concurrent change of
	// another rule may be lost, so it is written only when r is missing
	// or differs). Errors: ErrAuth when the credentials may not read or
	// write the bucket's lifecycle configuration
	// (s3:GetLifecycleConfiguration, s3:PutLifecycleConfiguration);
	// ErrInvalid when the store refuses the rule or has no lifecycle
	// rules.
	EnsureTagExpiry(ctx context.Context, r TagExpiry) error
}
