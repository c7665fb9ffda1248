package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/prometheus/client_golang/prometheus"
)

// This file turns config.Config into the plain configuration structs of the
// other packages. No viper type crosses it.

// fsMount is the running filesystem, as cmd needs it.
type fsMount interface {
	// Wait blocks until the kernel mount is gone.
	Wait()
	// Unmount flushes dirty files and unmounts.
	Unmount(ctx context.Context) error
}

// fencingConfig builds the fencing.Config of cfg.
func fencingConfig(cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) fencing.Config {
	return fencing.Config{
		Mode:                  fencing.Mode(cfg.Fence.Mode),
		Domain:                cfg.DomainKeyPrefix(),
		Holder:                cfg.Fence.Holder,
		SignedRequestValidity: cfg.Fence.SignedRequestValidity,
		ReapTombstones:        fencing.Reap(cfg.Fence.ReapTombstones),
		OpTimeout:             cfg.S3.RetryDeadline,
		SpoolDir:              cfg.Mount.CacheDir,
		Logger:                log,
		Registerer:            reg,
	}
}

// newGuard creates the mount's Guard (unbound). caps is the probe result
// (nil when no probe ran: fencing off or a read-only mount); failpoints come
// from $FENCEFS_FAILPOINTS (fencing.FailpointsFromEnv).
func newGuard(cfg *config.Config, store objstore.Store, caps *objstore.Capabilities, log *slog.Logger, reg prometheus.Registerer) (*fencing.Guard, error) {
	fc := fencingConfig(cfg, log, reg)
	if caps != nil {
		fc.TombstoneDeletes = fencing.TombstoneDeletes(*caps)
	}
	hooks, err := fencing.FailpointsFromEnv()
	if err != nil {
		return nil, usageError{fmt.Errorf("%s: %v", fencing.EnvFailpoints, err)}
	}
	fc.Hooks = hooks
	return fencing.New(store, fc)
}
