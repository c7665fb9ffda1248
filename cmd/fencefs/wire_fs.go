package main

import (
	"context"
	"log/slog"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/fusefs"
	"github.com/fencefs/fencefs/objstore"
	"github.com/prometheus/client_golang/prometheus"
)

// fusefsOptions builds the fusefs.Options of cfg.
func fusefsOptions(cfg *config.Config, store objstore.Store, guard *fencing.Guard, caps *objstore.Capabilities, log *slog.Logger, reg prometheus.Registerer) fusefs.Options {
	fsName := cfg.S3.Bucket
	if cfg.S3.Prefix != "" {
		fsName += "/" + cfg.S3.Prefix
	}
	o := fusefs.Options{
		Store:          store,
		Prefix:         cfg.S3.Prefix,
		FenceDomain:    cfg.DomainKeyPrefix(),
		CacheDir:       cfg.Mount.CacheDir,
		UID:            cfg.Mount.UID,
		GID:            cfg.Mount.GID,
		FileMode:       cfg.Mount.FileMode,
		DirMode:        cfg.Mount.DirMode,
		AttrTTL:        cfg.Mount.AttrTTL,
		EntryTTL:       cfg.Mount.EntryTTL,
		MetaCacheTTL:   cfg.Mount.MetaTTL,
		LeaderCacheTTL: cfg.Mount.LeaderCacheTTL,
		AttrWriteback:  cfg.Mount.AttrWriteback,
		// HEADs ahead of the lookups after a listing: cheap requests,
		// more of them than parts in flight.
		PrefetchConcurrency: 4 * cfg.S3.Concurrency,
		// Deletes, like those HEADs, are small requests.
		DeleteConcurrency: deleteConcurrency(cfg),
		Access: fusefs.Access{
			ReadOnly:           cfg.Mount.ReadOnly,
			AllowOther:         cfg.Mount.AllowOther,
			DefaultPermissions: cfg.Mount.DefaultPermissions,
		},
		MaxDirRename:      cfg.Mount.MaxDirRename,
		UploadConcurrency: cfg.S3.Concurrency,
		StreamStaging:     streamStaging(cfg.Mount.StreamStagingMiB),
		FsName:            fsName,
		Logger:            log,
		Registerer:        reg,
	}
	if guard != nil {
		o.Guard = guard
	}
	if hooks, err := fencing.FailpointsFromEnv(); err == nil {
		o.BeforeReleaseCommit = hooks.BeforeReleaseCommit // newGuard reported a bad value
	}
	// Known from the probe (writable mounts); a read-only mount lists
	// without READDIRPLUS (its listings still answer each stat).
	o.ListingsCarryMetadata = caps != nil && caps.Has(objstore.CheckListMetadata)
	return o
}

// mountFS mounts the filesystem and returns once the kernel mount is ready.
// caps is the probe's result (nil when none ran).
func mountFS(ctx context.Context, cfg *config.Config, store objstore.Store, guard *fencing.Guard, caps *objstore.Capabilities, log *slog.Logger, reg prometheus.Registerer) (fsMount, error) {
	return fusefs.Mount(ctx, cfg.Mount.Mountpoint, fusefsOptions(cfg, store, guard, caps, log, reg))
}

// streamStaging is fusefs.Options.StreamStaging for mount.stream_staging_mib
// (0: no bound).
func streamStaging(mib int) int64 {
	if mib == 0 {
		return -1
	}
	return int64(mib) << 20
}

// deleteConcurrency is how many acknowledged deletes are in flight at once
// (fusefs.Options.DeleteConcurrency); with mount.sync_deletes, negative:
// deletes are sent before unlink returns.
func deleteConcurrency(cfg *config.Config) int {
	if cfg.Mount.SyncDeletes {
		return -1
	}
	return 4 * cfg.S3.Concurrency
}
