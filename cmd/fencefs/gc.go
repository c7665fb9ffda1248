package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// gcFlags are the flags of `fencefs gc` beyond the configuration.
type gcFlags struct {
	dryRun, verbose, unconditional bool
	uploadAge, tombstoneAge        time.Duration
}

func newGCCmd() *cobra.Command {
	var f gcFlags
	cmd := &cobra.Command{
		Use:   "gc BUCKET[/PREFIX]",
		Short: "Remove finished intents, old tombstones and incomplete multipart uploads",
		Long: `Remove the garbage the fencing protocol leaves behind (fencing.GC):

  - intents of epochs older than the newest epoch whose takeover sweep
    completed (they can no longer matter);
  - tombstones under PREFIX older than --tombstone-age and than
    fence.signed_request_validity (so that no request an old writer signed
    can still use them), each by a DELETE conditioned on its ETag. On a
    backend whose DELETE ignores If-Match (MinIO; gc runs the probe to
    know) a file created over the tombstone at the same moment could be
    deleted with it, so gc keeps them there and says how many: the bucket
    lifecycle rule the mounts install removes them exactly
    (fencefs status shows it); --unconditional-tombstones deletes them
    anyway, only for while no mount writes;
  - incomplete multipart uploads older than --upload-age.

The register and the epoch reservations are never touched. With --dry-run
nothing is removed. Progress is shown on a terminal; -v lists every item.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, args[0], 6*adminTimeout, func(ctx context.Context, env *adminEnv) error {
				return runGC(ctx, env, cmd.OutOrStdout(), f)
			})
		},
	}
	addAdminFlags(cmd, 0)
	cmd.Flags().String("fence-domain", config.DomainBucket, "fence domain: bucket or prefix")
	cmd.Flags().String("signed-request-validity", "15m", "tombstones (and their ETag records) younger than this are kept")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "only report what would be removed")
	cmd.Flags().BoolVarP(&f.verbose, "verbose", "v", false, "list every item")
	cmd.Flags().DurationVar(&f.uploadAge, "upload-age", 24*time.Hour, "abort incomplete multipart uploads older than this")
	cmd.Flags().DurationVar(&f.tombstoneAge, "tombstone-age", 0, "keep tombstones younger than this (in addition to the signed-request window)")
	cmd.Flags().BoolVar(&f.unconditional, "unconditional-tombstones", false, "where DELETE ignores If-Match, delete old tombstones anyway (only while no mount writes)")
	return cmd
}

// runGC is the body of `fencefs gc`: it runs fencing.GC, prints the totals
// to out and fails if the GC or any removal failed.
func runGC(ctx context.Context, env *adminEnv, out io.Writer, f gcFlags) error {
	p := newProgress(os.Stderr)
	now := time.Now()
	domain := env.cfg.DomainKeyPrefix()
	opts := fencing.GCOptions{
		Domain:                  domain,
		Prefix:                  strings.TrimPrefix(env.cfg.S3.Prefix, domain),
		TombstonesBefore:        now.Add(-f.tombstoneAge),
		UploadsBefore:           now.Add(-f.uploadAge),
		SignedRequestValidity:   env.cfg.Fence.SignedRequestValidity,
		DryRun:                  f.dryRun,
		Report:                  gcReporter(env, out, p, f),
		UnconditionalTombstones: f.unconditional,
	}
	caps := objstore.Probe(ctx, env.store, fencing.ProbeDir(env.cfg.S3.Prefix))
	if caps.Err != nil {
		return explainStoreErr(env.cfg, caps.Err)
	}
	opts.DeleteIgnoresIfMatch = fencing.TombstoneDeletes(caps)
	limitPlainPuts(env.store, caps)
	res, err := fencing.GC(ctx, env.store, opts)
	p.clear()
	verb := "removed"
	if f.dryRun {
		verb = "would remove"
	}
	fmt.Fprintf(out, "%s %d intents, %d tombstones, %d incomplete uploads; %d failed\n", verb, res.Intents, res.Tombstones, res.Uploads, res.Failed)
	if res.TombstonesKept > 0 {
		fmt.Fprintf(out, "kept %d old tombstones: DELETE ignores If-Match on %s, so deleting one could delete a file a mount creates at its name at that moment; "+
			"tombstones tagged fencefs-tombstone=1 go by the bucket lifecycle rule the mounts install (see fencefs status); "+
			"--unconditional-tombstones deletes them, only while no mount writes\n", res.TombstonesKept, env.cfg.EndpointURL())
	}
	if err != nil {
		return explainStoreErr(env.cfg, err)
	}
	if res.Failed > 0 {
		return fmt.Errorf("%d removals failed", res.Failed)
	}
	return nil
}

// gcReporter returns the GC's Report: it counts the items on p, logs each
// failure, and lists on out every failed item (every item with -v).
func gcReporter(env *adminEnv, out io.Writer, p *progress, f gcFlags) func(fencing.GCItem) {
	var seen [3]int
	return func(it fencing.GCItem) {
		switch it.Kind {
		case "intent":
			seen[0]++
		case "tombstone":
			seen[1]++
		case "upload":
			seen[2]++
		}
		p.update("gc: %d intents, %d tombstones, %d uploads", seen[0], seen[1], seen[2])
		if it.Err != nil {
			env.log.Error("gc: cannot remove", "kind", it.Kind, "key", it.Key, "err", it.Err)
		}
		if f.verbose || it.Err != nil {
			p.clear()
			status := "removed"
			if f.dryRun {
				status = "would remove"
			}
			if it.Err != nil {
				status = "FAILED: " + it.Err.Error()
			}
			fmt.Fprintf(out, "%-9s %s (%s): %s\n", it.Kind, it.Key, it.Reason, status)
		}
	}
}

// progress prints a one-line, self-overwriting progress indicator when w is
// a terminal, at most five times a second; otherwise nothing.
type progress struct {
	w    io.Writer
	tty  bool
	last time.Time
	line bool
}

func newProgress(f *os.File) *progress {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return &progress{w: f, tty: err == nil}
}

func (p *progress) update(format string, a ...any) {
	if !p.tty || time.Since(p.last) < 200*time.Millisecond {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.w, "\r\033[K"+format, a...)
	p.line = true
}

// clear erases the progress line, if one is shown.
func (p *progress) clear() {
	if p.line {
		fmt.Fprint(p.w, "\r\033[K")
		p.line = false
	}
}
