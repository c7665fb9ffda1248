package memstore

import (
	"context"
	"fmt"
	"maps"

	"github.com/fencefs/fencefs/objstore"
)

var _ objstore.Expirer = (*Store)(nil)

// EnsureTagExpiry implements objstore.Expirer: with Options.Lifecycle it
// records r (replacing a rule of the same ID that waits fewer days), else
// it fails with Options.LifecycleErr or ErrInvalid.
func (s *Store) EnsureTagExpiry(ctx context.Context, r objstore.TagExpiry) error {
	if !s.opts.Lifecycle {
		if s.opts.LifecycleErr != nil {
			return s.opts.LifecycleErr
		}
		return fmt.Errorf("lifecycle rule %s: %w (the store has no lifecycle rules)", r.ID, objstore.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, old := range s.rules {
		if old.ID == r.ID {
			if old.Days < r.Days || old.Key != r.Key || old.Value != r.Value || old.Prefix != r.Prefix {
				s.rules[i] = r
			}
			return nil
		}
	}
	s.rules = append(s.rules, r)
	return nil
}

// Rules returns the lifecycle rules EnsureTagExpiry recorded.
func (s *Store) Rules() []objstore.TagExpiry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]objstore.TagExpiry(nil), s.rules...)
}

// Tags returns the object tags stored with key (nil when absent or none).
func (s *Store) Tags(key string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.objects[key]; o != nil {
		return maps.Clone(o.tags)
	}
	return nil
}
