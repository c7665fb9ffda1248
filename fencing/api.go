package fencing

// This file fixes the API that fusefs and cmd/fencefs program against.
// Bodies are filled in by the implementation; signatures change only by
// agreement with those packages.

import (
	"context"
	"errors"
	"io"
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
	Mode Mode
	// Domain is the key prefix of the fence domain ("" for the whole
	// bucket, else ending in "/"). Protocol objects live under
	// Domain + ".fencefs/".
	Domain string
	// Holder identifies this mount instance in the register and stamps;
	// empty means a random per-instance id.
	Holder string
	// SignedRequestValidity bounds how long a signed request an old writer
	// holds may still be accepted (ETag ABA protection window). Default 15m.
	SignedRequestValidity time.Duration
	// TombstoneDeletes makes Delete write tombstones instead of conditional
	// DELETEs (for backends whose DELETE ignores If-Match).
	TombstoneDeletes bool
	Logger           *slog.Logger
	// Registerer receives the package's metrics; nil means none.
	Registerer prometheus.Registerer
	// Now is the clock (tests inject one); nil means time.Now.
	Now func() time.Time
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
	Reason      string // why fenced, when fenced
}

// Version is the base version a mutation is conditioned on: the object the
// caller last saw at the key. The zero Version means "the key must not exist"
// (create).
type Version struct {
	ETag string // "" means absent
	// Tombstone reports that the version seen is a tombstone (a deleted key);
	// creating over it is conditioned on its ETag.
	Tombstone bool
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
)

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

var _ io.ReaderAt // body type of Guard.Put

// Guard is the single door for mutations of the bucket. Safe for concurrent
// use. Methods:
//
//	New(store, cfg) (*Guard, error)
//	(*Guard).Bind(ctx, token uint64) (uint64, error)   token 0 = auto (max+1)
//	(*Guard).Status() Status
//	(*Guard).Prepare(key string)                       hint: a handle on key became dirty
//	(*Guard).Put(ctx, key, body io.ReaderAt, size int64, base Version, meta Meta) (objstore.ObjectInfo, error)
//	(*Guard).Copy(ctx, src string, srcETag string, dst string, dstBase Version, meta Meta) (objstore.ObjectInfo, error)
//	(*Guard).Delete(ctx, key string, base Version) error
//	(*Guard).Close(ctx) error                          flush async intent deletions
//
// Without a bound token, mutations fail with ErrReadOnly (unless Mode is off).
var _ = context.Background
