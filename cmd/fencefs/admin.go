package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/objstore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

// adminTimeout bounds one administrative command (probe, epoch, gc).
const adminTimeout = 10 * time.Minute

// adminEnv is what an administrative command works with.
type adminEnv struct {
	cfg   *config.Config
	log   *slog.Logger
	store objstore.Store
	close func()
}

// openAdmin loads the configuration for a command on BUCKET[/PREFIX] and
// opens the store (its metrics go to reg, when not nil). Logs go to stderr (or log.file) at log.level, which
// defaults to warn for these commands so that their output stays readable.
func openAdmin(ctx context.Context, cmd *cobra.Command, target string, reg prometheus.Registerer) (*adminEnv, error) {
	cfg, err := config.Load(config.Source{Flags: cmd.Flags(), Target: target}, false)
	if err != nil {
		return nil, usageError{err}
	}
	setSecrets(cfg.Secrets())
	if f := cmd.Flags().Lookup("log-level"); f != nil && !f.Changed && os.Getenv("FENCEFS_LOG_LEVEL") == "" {
		cfg.Log.Level = "warn"
	}
	log, closeLog, err := newLogger(cfg.Log, false)
	if err != nil {
		return nil, usageError{fmt.Errorf("log.file: cannot open %s: %v", cfg.Log.File, unwrapPath(err))}
	}
	store, err := openStore(ctx, cfg, log, reg)
	if err != nil {
		closeLog()
		return nil, explainStoreErr(cfg, err)
	}
	if err := checkBucket(ctx, cfg, store); err != nil {
		closeLog()
		return nil, err
	}
	return &adminEnv{cfg: cfg, log: log, store: store, close: closeLog}, nil
}

// withAdmin runs fn on the store of BUCKET[/PREFIX] target (openAdmin,
// without metrics) within timeout, and closes what openAdmin opened.
func withAdmin(cmd *cobra.Command, target string, timeout time.Duration, fn func(ctx context.Context, env *adminEnv) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	env, err := openAdmin(ctx, cmd, target, nil)
	if err != nil {
		return err
	}
	defer env.close()
	return fn(ctx, env)
}

func addAdminFlags(cmd *cobra.Command, groups config.Group) {
	config.RegisterFlags(cmd.Flags(), groups|config.GroupS3|config.GroupLog)
}
