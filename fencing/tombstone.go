package fencing

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// tombstoneSize is the exact length of every tombstone body. A listing
// without metadata (objstore.Entry.Meta nil) tells only sizes, so readers use
// the size to decide whether an entry needs a HEAD to be recognised as a
// tombstone.
const tombstoneSize = 128

// tombstoneBody returns the fixed-length body of a tombstone written by
// epoch with write id wid. It differs for every write id, so no two
// tombstones share an ETag.
func tombstoneBody(epoch uint64, wid string) []byte {
	s := fmt.Sprintf("fencefs tombstone: deleted key; epoch=%s wid=%s", epochName(epoch), wid)
	if len(s) > tombstoneSize-1 {
		s = s[:tombstoneSize-1]
	}
	s += strings.Repeat(" ", tombstoneSize-1-len(s)) + "\n"
	return []byte(s)
}

// isTombstone reports whether info (with metadata) describes a tombstone.
func isTombstone(info objstore.ObjectInfo) bool {
	return info.Size == tombstoneSize && info.Meta[MetaTombstone] == "1"
}

// putTombstone writes a tombstone of epoch ts.token with write id wid at
// key, keeping the stamps and the ETag-ABA record of meta, and carrying
// the tag of the bucket lifecycle rule that removes tombstones where there
// is one (tombExpiry).
func (o objects) putTombstone(ctx context.Context, key string, ts tokenState, wid string, cond objstore.Condition, meta map[string]string) (objstore.ObjectInfo, error) {
	m := map[string]string{}
	for k, v := range meta {
		if k == MetaEpoch || k == MetaHolder || k == MetaWID || k == MetaSwept {
			m[k] = v
		}
	}
	m[MetaTombstone] = "1"
	stampMeta(m, ts, o.holder, wid)
	body := tombstoneBody(ts.token, wid)
	return o.store.Put(ctx, key, bytes.NewReader(body), int64(len(body)), objstore.PutOptions{
		Cond: cond, Meta: m, Tags: o.expiry.tags(ctx), Shape: objstore.ShapePlain, ContentType: "application/x-fencefs-tombstone"})
}

// Tombstones on a store whose DELETE ignores If-Match (MinIO's last
// community release).
//
// There a tombstone cannot be removed exactly by the client: between a
// check and an unconditional DELETE, a newer leader or another client may
// write the key, and the DELETE would remove that write. The store itself
// can: a bucket lifecycle rule that expires objects carrying the tag
// fencefs-tombstone=1 is evaluated by MinIO again on the object's current
// version, under the object's namespace lock, before it expires it
// (DeleteObject with Expiration.Expire in cmd/erasure-object.go). Only
// tombstones carry the tag — a write over a tombstone replaces the object
// and its tags, and fencefs copies never carry tags — so the rule removes
// exactly the tombstones still current, and a listing stops showing them
// when they are due (MinIO hides expired objects from listings at once).
//
// The rule expires a tombstone Days after it was written, at the next
// midnight UTC (objstore.TagExpiry.Due): Days is the signed-request
// validity in whole days, at least 1, so no tombstone goes before any
// request an old writer signed has expired, nor before its ETag-ABA record.
// A tombstone is thus gone between one and two days after it was written
// with the default validity.
//
// The rule is installed (or checked) once per Guard, before the first
// tombstone is written; tombstones carry the tag only once it is there.
// Credentials that may not read or write the bucket's lifecycle leave the
// tombstones for `fencefs gc` (which does not delete them where DELETE
// ignores If-Match while mounts write): logged once with the permission
// named, and shown by Guard.Tombstones.

// Tag and rule of the tombstones' bucket lifecycle rule.
const (
	tombTagKey   = "fencefs-tombstone"
	tombTagValue = "1"
	expiryRuleID = "fencefs-tombstones"
)

// expiryRetry is how long after a failed installation of the rule the next
// tombstone write tries again.
const expiryRetry = 10 * time.Minute

// tombExpiry is a Guard's bucket lifecycle rule for its tombstones. A nil
// *tombExpiry (a store whose DELETE honours If-Match, or reaping off or
// always) tags nothing. Safe for concurrent use.
type tombExpiry struct {
	store objstore.Expirer // nil: the store cannot hold rules
	rule  objstore.TagExpiry
	log   *slog.Logger

	mu        sync.Mutex // held across the installation: writers wait for its outcome
	installed bool       // GUARDED_BY(mu)
	reason    string     // why there is no rule; GUARDED_BY(mu)
	next      time.Time  // earliest next attempt after a failure; GUARDED_BY(mu)
}

// newTombExpiry returns the tombstone expiry of a Guard configured by cfg
// over store, or nil when tombstones need none (DELETE honours If-Match)
// or the configuration chose another way (ReapAlways, ReapOff).
func newTombExpiry(store objstore.Store, cfg Config) *tombExpiry {
	if !cfg.TombstoneDeletes || (cfg.ReapTombstones != ReapAuto && cfg.ReapTombstones != "") || cfg.Mode == ModeOff {
		return nil
	}
	days := int((cfg.SignedRequestValidity + 24*time.Hour - 1) / (24 * time.Hour))
	x := &tombExpiry{
		rule: objstore.TagExpiry{ID: expiryRuleID, Prefix: cfg.Domain, Key: tombTagKey, Value: tombTagValue, Days: max(days, 1)},
		log:  cfg.Logger,
	}
	if cfg.Domain != "" {
		x.rule.ID = expiryRuleID + " " + cfg.Domain
	}
	if x.log == nil {
		x.log = slog.New(slog.DiscardHandler)
	}
	x.store, _ = store.(objstore.Expirer)
	if x.store == nil {
		x.reason = "the store has no bucket lifecycle rules"
	}
	return x
}

// tags returns the tags a tombstone written now carries: the rule's tag
// once the rule is in the bucket, else none. The first call installs the
// rule (and a call after a failure, once expiryRetry has passed).
func (x *tombExpiry) tags(ctx context.Context) map[string]string {
	if x.ensure(ctx) {
		return map[string]string{x.rule.Key: x.rule.Value}
	}
	return nil
}

// ensure installs the rule unless it is known to be there (or a recent
// attempt failed) and reports whether it is there.
func (x *tombExpiry) ensure(ctx context.Context) bool {
	if x == nil {
		return false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.installed || x.store == nil || time.Now().Before(x.next) {
		return x.installed
	}
	err := x.store.EnsureTagExpiry(ctx, x.rule)
	if err == nil {
		x.installed, x.reason = true, ""
		x.log.Info("tombstones are removed by a bucket lifecycle rule", "rule", x.rule.ID,
			"tag", x.rule.Key+"="+x.rule.Value, "days", x.rule.Days)
		return true
	}
	if ctx.Err() != nil {
		return false // the caller gave up: the next write asks again
	}
	x.next = time.Now().Add(expiryRetry)
	why := err.Error()
	if errors.Is(err, objstore.ErrAuth) {
		why = "the credentials may not install the bucket lifecycle rule that removes them (s3:GetLifecycleConfiguration and s3:PutLifecycleConfiguration): " + why
	}
	if why != x.reason {
		x.log.Warn("tombstones stay in the bucket for fencefs gc: "+why, "rule", x.rule.ID, "retry_in", expiryRetry)
	}
	x.reason = why
	return false
}

// state reports whether the rule is in the bucket, and else why not.
func (x *tombExpiry) state() (bool, string) {
	if x == nil {
		return false, ""
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.installed, x.reason
}

// due is when the rule removes a tombstone written at written.
func (x *tombExpiry) due(written time.Time) time.Time { return x.rule.Due(written) }

// expiryRecheck is how long the reaper waits to look again at a tombstone
// that was still there when the lifecycle rule should have removed it (one
// written before the rule, or the store late).
const expiryRecheck = time.Hour

// errNotExpired: a tombstone is still there after the lifecycle rule's due
// time; it is looked at again expiryRecheck later.
var errNotExpired = errors.New("still there after the lifecycle rule's due time")

// expired checks with a HEAD whether the lifecycle rule removed e (gone),
// or someone replaced it (gone=false, no error); a tombstone still there
// is errNotExpired, due again expiryRecheck from now.
func (r *reaper) expired(ctx context.Context, e tombEntry) (bool, error) {
	info, exists, err := r.head(ctx, e.Key)
	switch {
	case err != nil:
		return false, err
	case !exists:
		return true, nil
	case objstore.NormalizeETag(info.ETag) != e.ETag:
		return false, nil
	}
	r.mu.Lock()
	if k, ok := r.known[e.Key]; ok && k.ETag == e.ETag {
		k.Due = r.now().Add(expiryRecheck)
		r.known[e.Key] = k
	}
	r.mu.Unlock()
	return false, errNotExpired
}

// TombstoneStatus is what a Guard knows of the tombstones in its bucket.
type TombstoneStatus struct {
	// Known counts the tombstones this Guard wrote or adopted from the
	// ledgers of earlier mounts and has not seen go.
	Known int
	// Oldest is when the oldest of them was written; NextRemoval when
	// the first of them is due to go (zero: none, or none goes by itself).
	Oldest, NextRemoval time.Time
	// Removal says how they go: "conditional DELETE by the leading
	// mount", the bucket lifecycle rule, or why they wait for fencefs gc.
	Removal string
}

// statusLocked builds the TombstoneStatus. LOCKS_REQUIRED(r.mu)
func (r *reaper) statusLocked(now time.Time, enabled bool) TombstoneStatus {
	var st TombstoneStatus
	st.Known = len(r.known)
	for _, e := range r.known {
		if st.Oldest.IsZero() || e.Written.Before(st.Oldest) {
			st.Oldest = e.Written
		}
		if enabled && (st.NextRemoval.IsZero() || e.Due.Before(st.NextRemoval)) {
			st.NextRemoval = e.Due
		}
	}
	return st
}

// Tombstones returns what the Guard knows of its tombstones and how they
// are removed. No I/O.
func (g *Guard) Tombstones() TombstoneStatus {
	r := g.tombs
	enabled := r.enabled()
	installed, why := r.expiry.state()
	r.mu.Lock()
	st := r.statusLocked(r.now(), enabled)
	r.mu.Unlock()
	switch {
	case r.reap == ReapOff:
		st.Removal = "kept for fencefs gc (fence.reap_tombstones=off)"
	case !r.tombDel:
		st.Removal = "conditional DELETE by the leading mount"
	case r.reap == ReapAlways:
		st.Removal = "unconditional DELETE by the leading mount (fence.reap_tombstones=always)"
	case installed:
		x := r.expiry.rule
		st.Removal = fmt.Sprintf("bucket lifecycle rule %q (tag %s=%s, %d days, at the next midnight UTC)", x.ID, x.Key, x.Value, x.Days)
	case why != "":
		st.Removal = "kept for fencefs gc: " + why
	default:
		st.Removal = "bucket lifecycle rule, installed before the first tombstone"
	}
	return st
}
