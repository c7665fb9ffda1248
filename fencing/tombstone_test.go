package fencing

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
)

// TestTombstonesCarryTheLifecycleTagOnlyWhereTheRuleIsInstalled: on a store
// whose DELETE ignores If-Match, the Guard installs the bucket lifecycle
// rule before its first tombstone (days: the signed-request validity
// rounded up, here 36 h → 2) and tags tombstones for it; a file written
// over a tombstone carries no tag. Where the rule cannot be installed the
// tombstones carry none, and Tombstones says why they wait for gc, naming
// the permission when it is one.
func TestTombstonesCarryTheLifecycleTagOnlyWhereTheRuleIsInstalled(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    memstore.Options
		tagged  bool
		removal string
	}{
		{"the rule is installed", memstore.Options{Lifecycle: true}, true, `bucket lifecycle rule "fencefs-tombstones" (tag fencefs-tombstone=1, 2 days`},
		{"the credentials may not", memstore.Options{LifecycleErr: fmt.Errorf("s3 put bucket lifecycle: Access Denied: %w", objstore.ErrAuth)}, false,
			"kept for fencefs gc: the credentials may not install the bucket lifecycle rule that removes them (s3:GetLifecycleConfiguration and s3:PutLifecycleConfiguration)"},
		{"the store has no lifecycle rules", memstore.Options{}, false, "kept for fencefs gc: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t, time.Minute)
			tc.opts.IgnoreDeleteConditions = true
			s := memstore.NewWithOptions(tc.opts)
			g := newGuard(t, s, Config{Holder: "A", SignedRequestValidity: 36 * time.Hour, TombstoneDeletes: true})
			bind(t, ctx, g, 1)
			info := rawPut(t, ctx, s, "d/f", "x")
			if err := g.Delete(ctx, "d/f", VersionOf(info)); err != nil {
				t.Fatal(err)
			}
			st, err := s.Stat(ctx, "d/f")
			if err != nil || !isTombstone(st) {
				t.Fatalf("d/f after the delete: %+v, %v; want a tombstone", st, err)
			}
			if got := s.Tags("d/f")[tombTagKey] == tombTagValue; got != tc.tagged {
				t.Errorf("tombstone tagged %v (%v); want %v", got, s.Tags("d/f"), tc.tagged)
			}
			rules := s.Rules()
			if tc.tagged && (len(rules) != 1 || rules[0].Days != 2 || rules[0].Key != tombTagKey || rules[0].Value != tombTagValue || rules[0].Prefix != "") {
				t.Errorf("rules %+v; want one of 2 days for the tombstone tag over the bucket", rules)
			}
			ts := g.Tombstones()
			if ts.Known != 1 || !strings.Contains(ts.Removal, tc.removal) {
				t.Errorf("Tombstones() = %+v; want 1 known, removal %q", ts, tc.removal)
			}
			if tc.tagged && !ts.NextRemoval.Equal(rules[0].Due(ts.Oldest)) {
				t.Errorf("next removal %v; want the rule's due time %v", ts.NextRemoval, rules[0].Due(ts.Oldest))
			}
			if _, err := gput(ctx, g, "d/f", "again", Version{ETag: st.ETag, Tombstone: true}); err != nil {
				t.Fatal(err)
			}
			if tags := s.Tags("d/f"); len(tags) != 0 {
				t.Errorf("a file written over a tombstone carries tags %v", tags)
			}
		})
	}
}
