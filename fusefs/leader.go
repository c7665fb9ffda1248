package fusefs

// The leader's trust: while this mount is the active leader no other fencefs
// writer can change the fence domain, so what it fetched since it became the
// leader (activate.go) is trusted for Options.LeaderCacheTTL instead of
// MetaCacheTTL, and the kernel is told the same.

import (
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// leading returns when the mount became the leader it still is (zero when
// it is not the active leader, or does not know of a token to lead with).
// While leading, nothing but clients outside fencefs can change the fence
// domain, so what the mount fetched since then is trusted for
// Options.LeaderCacheTTL instead of MetaCacheTTL, and the kernel is told
// the same (leaderEntryTimeout, leaderAttrTimeout).
func (fsys *filesystem) leading() time.Time {
	if fsys.opts.LeaderCacheTTL <= fsys.opts.MetaCacheTTL {
		return time.Time{}
	}
	return fsys.leaderSince()
}

// leaderSince is when the mount became the active leader it still is, zero
// when it is not.
func (fsys *filesystem) leaderSince() time.Time {
	if fsys.guard == nil {
		return time.Time{}
	}
	since := fsys.leadingSince.Load()
	if since == 0 {
		return time.Time{}
	}
	return time.Unix(0, since)
}

// fresh reports whether a version fetched at fetched may still be used:
// younger than MetaCacheTTL, or fetched while leading and younger than
// LeaderCacheTTL.
func (fsys *filesystem) fresh(fetched time.Time) bool {
	return fsys.freshFor(fetched, fsys.opts.MetaCacheTTL)
}

// negativeFresh reports whether a directory's name knowledge gained at
// listed still answers lookups of absent names: younger than EntryTTL (the
// kernel's promise for negative entries), or gained while leading and
// younger than LeaderCacheTTL.
func (fsys *filesystem) negativeFresh(listed time.Time) bool {
	return fsys.freshFor(listed, fsys.opts.EntryTTL)
}

// freshFor is fresh with base instead of MetaCacheTTL.
func (fsys *filesystem) freshFor(t time.Time, base time.Duration) bool {
	age := time.Since(t)
	if age < base {
		return true
	}
	lead := fsys.leading()
	return !lead.IsZero() && !t.Before(lead) && age < fsys.opts.LeaderCacheTTL
}

// leaderEntryTimeout sets the kernel's entry and attribute timeouts of a reply
// to LeaderCacheTTL while leading (the defaults, EntryTTL and AttrTTL,
// otherwise). The notifications of forgetCached take them back when the
// mount stops leading.
func (fsys *filesystem) leaderEntryTimeout(out *fuse.EntryOut) {
	if !fsys.leading().IsZero() {
		out.SetEntryTimeout(fsys.opts.LeaderCacheTTL)
		out.SetAttrTimeout(fsys.opts.LeaderCacheTTL)
	}
}

// leaderAttrTimeout is leaderEntryTimeout for a Getattr's reply.
func (fsys *filesystem) leaderAttrTimeout(out *fuse.AttrOut) {
	if !fsys.leading().IsZero() {
		out.SetTimeout(fsys.opts.LeaderCacheTTL)
	}
}
