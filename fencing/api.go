package fencing

// This file holds the types of the API that fusefs and cmd/fencefs program
// against; signatures change only by agreement with those packages.

import (
	"errors"
	"log/slog"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/prometheus/client_golang/prometheus"
)

// Mode selects the fencing protocol; see the package documentation.
type Mode string

// Modes.
const (
	ModeStrict Mode = "strict"
	ModeFast   Mode = "fast"
	ModeOff    Mode = "off"
)

// Domain errors. Errors returned by Guard wrap one of these (or an objstore
// sentinel for plain storage failures such as ErrNotFound) and carry a
// human-readable reason (which epoch is newer, who holds it, which key).
var (
	// ErrFenced: a newer epoch exists (or this epoch is held by another
	// holder); the Guard is latched fenced and refuses every mutation. EROFS.
	ErrFenced = errors.New("fenced: a newer epoch holds the bucket")
	// ErrStale: someone else changed the object since the base version the
	// caller holds. ESTALE.
	ErrStale = errors.New("stale: object changed since it was read")
	// ErrUnverified: the epoch register could not be read, so the mutation
	// was not attempted (fail closed). EIO.
	ErrUnverified = errors.New("cannot verify the epoch")
	// ErrReadOnly: the Guard has no token (or is configured read-only). EROFS.
	ErrReadOnly = errors.New("read-only: no fencing token bound")
	// ErrBadToken: a token that can never bind (zero, below the register, or
	// not a number). EINVAL.
	ErrBadToken = errors.New("invalid fencing token")
)

// Config configures a Guard. Built by cmd/fencefs from config.Config.
type Config struct {
	// Mode is strict (the default when empty), fast or off.
	Mode Mode
	// Domain is the key prefix of the fence domain ("" for the whole
	// bucket, else ending in "/"). Protocol objects live under
	// Domain + ".fencefs/".
	Domain string
	// Holder identifies this mount instance in the register and stamps;
	// empty means a random per-instance id ("<host>-<pid>-<random>"). A
	// stable name lets a restart reclaim its epoch (fencing the previous
	// instance); two live instances must never share one. Printable ASCII
	// without ',' or '@'.
	Holder string
	// SignedRequestValidity bounds how long a signed request an old writer
	// holds may still be accepted (ETag ABA protection window). Default 15m.
	SignedRequestValidity time.Duration
	// TombstoneDeletes makes Delete write tombstones instead of conditional
	// DELETEs (for backends whose DELETE ignores If-Match). It also tells
	// the tombstone reaper that DELETE cannot be conditioned here.
	TombstoneDeletes bool
	// ReapTombstones says when the active Guard removes the tombstones it
	// knows of, once they are SignedRequestValidity old: ReapAuto ("", the
	// default: by a DELETE conditioned on the tombstone's ETag, or, with
	// TombstoneDeletes, by a bucket lifecycle rule the store applies when
	// the store takes one: objstore.Expirer), ReapAlways or ReapOff. See
	// "Tombstones" in the package documentation.
	ReapTombstones Reap
	// Logger receives the package's log records; nil means none.
	Logger *slog.Logger
	// Registerer receives the package's metrics; nil means none.
	Registerer prometheus.Registerer
	// Now is the clock (tests inject one); nil means time.Now.
	Now func() time.Time
	// IntentLinger is how long an intent whose writes have all settled
	// stays in the journal, so that a key committed again on the same base
	// reuses it (0: it leaves at once — the journal then holds only
	// commits in flight and dirty handles, and every write of it stays
	// small). Removal is batched into the journal's next write.
	IntentLinger time.Duration
	// ReleaseGrace is how long a takeover sweep waits for the owners of
	// the journals it sealed that name entries to release those whose
	// commits settled (release.go); a journal without a release keeps
	// every entry. 0 means DefaultReleaseGrace (1s); negative: no wait.
	ReleaseGrace time.Duration
	// OpTimeout bounds one validation round and one background protocol
	// write (intent, intent deletion), and is the retry deadline of one
	// mutation (see "Retries" in the package documentation); 0 means 30s.
	OpTimeout time.Duration
	// SpoolDir is where a takeover sweep or a Copy keeps an object larger
	// than 16 MiB that it must read to upload it again (fencefs:
	// mount.cache_dir; created if missing); "" means os.TempDir().
	SpoolDir string
	// Hooks are failpoints, for tests (and for the binary, through
	// FailpointsFromEnv). The zero value does nothing.
	Hooks Hooks
}

// State is the Guard's lifecycle state, as shown in user.fencefs.state.
type State string

// States.
const (
	StateUnbound  State = "unbound"
	StateSweeping State = "sweeping"
	StateActive   State = "active"
	StateFenced   State = "fenced"
	StateOff      State = "off"
)

// Status is a snapshot of the Guard for xattrs, metrics and `fencefs status`.
type Status struct {
	State  State
	Token  uint64 // the bound token; 0 when unbound
	Epoch  uint64 // the newest epoch seen in the register
	Holder string // this Guard's holder id
	// EpochHolder is the holder of Epoch in the register.
	EpochHolder string
	// Reason says why the Guard is fenced, or why its sweep failed.
	Reason string
}

// Version is the base version a mutation is conditioned on: the object the
// caller last saw at the key. The zero Version means "the key must not exist"
// (create).
//
// Build it with VersionOf from the ObjectInfo the caller read: then Guard
// also knows the object's fencefs-swept record and saves a HEAD before
// committing. A Version built by hand (ETag only) is fine too.
type Version struct {
	ETag string // "" means absent
	// Tombstone reports that the version seen is a tombstone (a deleted key);
	// creating over it is conditioned on its ETag.
	Tombstone bool
	// Swept is the object's MetaSwept value as read together with ETag,
	// valid only when SweptKnown is set (VersionOf sets both).
	Swept      string
	SweptKnown bool
}

// VersionOf returns the Version of the object described by info (which must
// come from Stat, Get, Put or Copy, or objstore.Entry.Info of a listing that
// carried the object's metadata). A zero info
// (no ETag) gives the zero Version, "absent".
func VersionOf(info objstore.ObjectInfo) Version {
	if info.ETag == "" {
		return Version{}
	}
	return Version{
		ETag:       objstore.NormalizeETag(info.ETag),
		Tombstone:  isTombstone(info),
		Swept:      info.Meta[MetaSwept],
		SweptKnown: info.Meta != nil,
	}
}

// Exists reports whether v names an existing object (possibly a tombstone).
func (v Version) Exists() bool { return v.ETag != "" }

// Meta is user metadata to store with an object (keys lower-case, without
// the x-amz-meta- prefix). Guard adds its stamp keys.
type Meta map[string]string

// Stamp metadata keys written on every committed object.
const (
	MetaEpoch  = "fencefs-epoch"
	MetaHolder = "fencefs-holder"
	MetaWID    = "fencefs-wid"
	// MetaTombstone is "1" on tombstones.
	MetaTombstone = "fencefs-tombstone"
	// MetaSwept is the ETag-ABA record written by takeover sweeps and
	// carried forward by every commit while young: a comma-separated list
	// of "<etag>@<unix seconds>" ("_" for "absent") naming versions an old
	// writer may still hold as its base.
	MetaSwept = "fencefs-swept"
	// MetaSweptFrom is set by a takeover sweep's rewrite of an object to
	// the ETag it found: the same content under a fresh ETag. A commit of
	// a newer or the same epoch whose base is that ETag retries on the
	// rewrite instead of failing as stale. Commits do not carry it.
	MetaSweptFrom = "fencefs-swept-from"
	// MetaSweptWID is set beside MetaSweptFrom to the write id of the
	// content the sweep rewrote (carried through a sweep of a sweep's
	// rewrite): a writer whose commit landed but whose answer was lost,
	// and that retries after the sweep, finds its own write there and
	// reports it stored instead of fenced. Commits do not carry it.
	MetaSweptWID = "fencefs-swept-wid"
)

// IsStampKey reports whether a metadata key is one of the keys Guard
// manages (stamps, tombstone marker, swept record); callers copying user
// metadata drop them.
func IsStampKey(k string) bool {
	switch k {
	case MetaEpoch, MetaHolder, MetaWID, MetaTombstone, MetaSwept, MetaSweptFrom, MetaSweptWID:
		return true
	}
	return false
}

// IsTombstone reports whether info describes a tombstone object, which
// readers must treat as absent. Listings do not carry metadata: an entry
// whose size equals TombstoneSize must be confirmed with Stat; any other size
// is never a tombstone.
func IsTombstone(info objstore.ObjectInfo) bool { return isTombstone(info) }

// TombstoneSize is the exact size of every tombstone body.
const TombstoneSize = tombstoneSize

// ProtocolDir is the name of the hidden directory under the domain holding
// the protocol objects; filesystems must hide it.
const ProtocolDir = ".fencefs"
