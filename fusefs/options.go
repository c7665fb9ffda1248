package fusefs

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/prometheus/client_golang/prometheus"
)

// Guard is the part of *fencing.Guard the filesystem uses: every mutation of
// the bucket goes through it. See fencing.Guard for the contracts; in short:
// Put/CopyFrom/Delete are conditioned on base (the zero Version means "must not
// exist") and fail with fencing.ErrFenced, ErrReadOnly, ErrStale or
// ErrUnverified.
// Implementations must be safe for concurrent use.
type Guard interface {
	Bind(ctx context.Context, token uint64) (uint64, error)
	Status() fencing.Status
	Binding() fencing.Binding
	Changed() <-chan struct{}
	Tombstones() fencing.TombstoneStatus
	Admit(op string) (fencing.Status, error)
	Reserve(ctx context.Context, intents ...fencing.Intent) (release func())
	StartStream(ctx context.Context, key string, base fencing.Version, meta fencing.Meta) (*fencing.Stream, error)
	CommitStream(ctx context.Context, s *fencing.Stream, parts []objstore.Part, meta fencing.Meta) (objstore.ObjectInfo, error)
	CommitReplacement(ctx context.Context, s *fencing.Stream, parts []objstore.Part, meta fencing.Meta) (objstore.ObjectInfo, error)
	Put(ctx context.Context, key string, body io.ReaderAt, size int64, base fencing.Version, meta fencing.Meta) (objstore.ObjectInfo, error)
	Create(ctx context.Context, key string, body io.ReaderAt, size int64, meta fencing.Meta) (objstore.ObjectInfo, error)
	Replace(ctx context.Context, key string, body io.ReaderAt, size int64, base fencing.Version, meta fencing.Meta) (objstore.ObjectInfo, error)
	CopyFrom(ctx context.Context, src objstore.ObjectInfo, dst string, dstBase fencing.Version, meta fencing.Meta) (objstore.ObjectInfo, error)
	Delete(ctx context.Context, key string, base fencing.Version) error
	Landed(ctx context.Context, key, wid string) (objstore.ObjectInfo, bool, error)
	Stale(ctx context.Context, op, key string, cause error) error
}

var _ Guard = (*fencing.Guard)(nil)

// DefaultStreamStaging is Options.StreamStaging's default.
const DefaultStreamStaging = 256 << 20

// Options configures a mount. Store and Guard are required (Guard may be nil
// only with ReadOnly); everything else has a default.
type Options struct {
	// Store serves every read (Stat, Get, List).
	Store objstore.Store
	// Guard performs every mutation.
	Guard Guard

	// Prefix is the key prefix of the mount inside the bucket: "" for the
	// whole bucket, else ending in "/".
	Prefix string
	// FenceDomain is the key prefix under which the protocol directory
	// ".fencefs/" lives ("" or ending in "/"); it is hidden from the
	// filesystem wherever it falls inside the mount.
	FenceDomain string
	// CacheDir holds staging files. The mount creates a private
	// subdirectory and removes it on a clean unmount. Default: os.TempDir().
	CacheDir string

	// UID, GID, FileMode and DirMode are the owner and permissions of
	// objects without POSIX metadata. Zero modes mean 0644 and 0755.
	UID, GID uint32
	FileMode os.FileMode
	DirMode  os.FileMode

	// AttrTTL and EntryTTL are the kernel's attribute and directory entry
	// cache timeouts (negative lookups use EntryTTL too). MetaCacheTTL is
	// how long the filesystem trusts object metadata it fetched before
	// asking the store again. Zero means no caching.
	AttrTTL, EntryTTL, MetaCacheTTL time.Duration
	// LeaderCacheTTL is how long what the mount fetched while it is the
	// active leader stays trusted (metadata, listings, and the kernel's
	// entries and attributes): no other fencefs writer can change the fence
	// domain meanwhile, only clients outside fencefs. Not above
	// MetaCacheTTL means no extra trust. Negative entries keep EntryTTL.
	LeaderCacheTTL time.Duration

	// AttrWriteback is how long a chmod, chown or utimens of a node with
	// nothing else to commit may wait before it is stored, so that the
	// calls programs make in a row share one commit (attrwb.go states the
	// durability point). Zero stores each before the call returns.
	AttrWriteback time.Duration

	// MaxDirRename is the largest number of objects a directory rename may
	// copy; beyond it rename fails with EXDEV (mv then copies file by file).
	// 0 refuses every directory rename; negative means no limit.
	MaxDirRename int
	// Access is who may do what on the mount.
	Access Access
	// FsName is the source shown in /proc/mounts (default "fencefs"); the
	// type is always fuse.fencefs.
	FsName string
	// StreamStaging is the most local disk a file written sequentially
	// keeps in its staging file once it is streamed: parts already
	// uploaded beyond it are released (file_upload.go, file_content_upload.go); a
	// stream bounds itself further by the room its cache disk had when it
	// started (file_upload_plan.go). Zero means 256 MiB; negative: only that
	// room bounds it (parts are released once the cache disk is full).
	StreamStaging int64
	// UploadConcurrency is how many parts of files being written are
	// uploaded at once, over all files (default 4).
	UploadConcurrency int
	// PrefetchConcurrency is how many HEADs of listed objects one
	// directory listing runs at once ahead of their lookups (default 16).
	PrefetchConcurrency int
	// DeleteConcurrency is how many deletes unlink(2) acknowledged are
	// sent at once in the background (default 16; deletewb.go states when
	// they are in the bucket). Negative: unlink deletes before it returns.
	DeleteConcurrency int
	// ListingsCarryMetadata says the store's listings carry each
	// object's metadata (the probe's list-metadata row): the mount then
	// answers READDIRPLUS, handing the kernel every listed entry's
	// attributes with the listing (listattrs.go), so ls -l's stats need
	// no round trip. Without it a READDIRPLUS would cost a HEAD per entry.
	ListingsCarryMetadata bool
	// HonorInterrupts lets a signal to the calling process cancel its
	// read-only requests (lookup, read, readdir…), which then fail with
	// EINTR. Mutations (close, fsync, mkdir, rename…) are never abandoned:
	// their outcome would be unknown. Off by default; see opctx.
	HonorInterrupts bool
	// Debug logs every FUSE request (very verbose).
	Debug bool

	// Logger receives the filesystem's log lines; nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives the filesystem's metrics; nil means none.
	Registerer prometheus.Registerer
	// BeforeReleaseCommit, for tests, is called in a file's last release
	// once it decided it is the last, before it looks for changes to store
	// (fencing.Hooks.BeforeReleaseCommit); nil does nothing.
	BeforeReleaseCommit func(ctx context.Context, key string)
}

// Access is who may do what on a mount: the mount options ro, allow_other
// and default_permissions.
type Access struct {
	// ReadOnly refuses every mutation with EROFS (including token binding).
	ReadOnly bool
	// AllowOther lets other users access the mount. It implies
	// DefaultPermissions: with other users on the mount, permission checks
	// are never off.
	AllowOther bool
	// DefaultPermissions mounts with the kernel's default_permissions: the
	// kernel checks every access (open, create, unlink, rename, chmod,
	// chown, the sticky bit …) against the mode, uid and gid that getattr
	// reports, which are the ones stored in the object's metadata (or the
	// mount's defaults). Without it the mounting user, the only one who can
	// enter the mount, is not checked.
	DefaultPermissions bool
}

func (o *Options) normalize() error {
	if o.Store == nil {
		return fmt.Errorf("fusefs: Options.Store is required")
	}
	if o.Guard == nil && !o.Access.ReadOnly {
		return fmt.Errorf("fusefs: Options.Guard is required unless ReadOnly")
	}
	if o.Prefix != "" && !strings.HasSuffix(o.Prefix, "/") {
		return fmt.Errorf("fusefs: Options.Prefix %q must end in '/'", o.Prefix)
	}
	if o.FenceDomain != "" && !strings.HasSuffix(o.FenceDomain, "/") {
		return fmt.Errorf("fusefs: Options.FenceDomain %q must end in '/'", o.FenceDomain)
	}
	if o.CacheDir == "" {
		o.CacheDir = os.TempDir()
	}
	if o.FileMode == 0 {
		o.FileMode = 0o644
	}
	if o.DirMode == 0 {
		o.DirMode = 0o755
	}
	if o.FileMode&^os.ModePerm != 0 || o.DirMode&^os.ModePerm != 0 {
		return fmt.Errorf("fusefs: FileMode/DirMode must be permission bits only")
	}
	if o.PrefetchConcurrency <= 0 {
		o.PrefetchConcurrency = 16
	}
	if o.DeleteConcurrency == 0 {
		o.DeleteConcurrency = 16
	}
	if o.UploadConcurrency <= 0 {
		o.UploadConcurrency = 4
	}
	switch {
	case o.StreamStaging == 0:
		o.StreamStaging = DefaultStreamStaging
	case o.StreamStaging < 0:
		o.StreamStaging = math.MaxInt64
	}
	if o.FsName == "" {
		o.FsName = "fencefs"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// maxIO is the largest read and write request the kernel sends.
const maxIO = 1 << 20
