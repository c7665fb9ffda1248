package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/spf13/cobra"
)

func newEpochCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "epoch",
		Short: "Show or raise the fencing epoch of a bucket",
	}
	cmd.AddCommand(newEpochShowCmd(), newEpochRaiseCmd())
	return cmd
}

// registerView is what epoch show prints.
type registerView struct {
	Bucket string            `json:"bucket"`
	Domain string            `json:"domain"`
	Exists bool              `json:"exists"`
	Reg    *fencing.Register `json:"register,omitempty"`
	Recent []uint64          `json:"recent_epochs"` // newest first
}

func newEpochShowCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show BUCKET[/PREFIX]",
		Short: "Show the epoch register, its holder and the recent epochs",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withAdmin(cmd, args[0], adminTimeout, func(ctx context.Context, env *adminEnv) error {
				v := &registerView{Bucket: env.cfg.S3.Bucket, Domain: env.cfg.DomainKeyPrefix(), Recent: []uint64{}}
				reg, recent, err := fencing.ReadRegister(ctx, env.store, env.cfg.DomainKeyPrefix())
				switch {
				case errors.Is(err, objstore.ErrNotFound):
				case err != nil:
					return explainStoreErr(env.cfg, err)
				default:
					v.Exists, v.Reg = true, &reg
				}
				for i := len(recent) - 1; i >= 0; i-- {
					v.Recent = append(v.Recent, recent[i])
				}
				out := cmd.OutOrStdout()
				if asJSON {
					enc := json.NewEncoder(out)
					enc.SetIndent("", "  ")
					return enc.Encode(v)
				}
				return printRegisterView(out, v)
			})
		},
	}
	addAdminFlags(cmd, 0)
	cmd.Flags().String("fence-domain", config.DomainBucket, "fence domain: bucket or prefix")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printRegisterView(out io.Writer, v *registerView) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "bucket\t%s\n", v.Bucket)
	dom := "(whole bucket)"
	if v.Domain != "" {
		dom = v.Domain
	}
	fmt.Fprintf(tw, "domain\t%s\n", dom)
	if !v.Exists {
		fmt.Fprintf(tw, "epoch\tnone (no token has ever been bound)\n")
	} else {
		fmt.Fprintf(tw, "epoch\t%d\n", v.Reg.Epoch)
		fmt.Fprintf(tw, "holder\t%s\n", v.Reg.Holder)
		fmt.Fprintf(tw, "claimed\t%s\n", v.Reg.ClaimedAt.Format(time.RFC3339))
		fmt.Fprintf(tw, "previous\t%d\n", v.Reg.PrevEpoch)
	}
	recent := make([]string, len(v.Recent))
	for i, n := range v.Recent {
		recent[i] = strconv.FormatUint(n, 10)
	}
	if len(recent) == 0 {
		recent = []string{"none"}
	}
	fmt.Fprintf(tw, "recent epochs\t%s\n", strings.Join(recent, " "))
	return tw.Flush()
}

func newEpochRaiseCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "raise BUCKET[/PREFIX] N|auto",
		Short: "Raise the epoch to N, fencing every older writer (with the takeover sweep)",
		Long: `Bind epoch N (or the register's newest + 1 with auto) without mounting: the
register moves to N and the takeover sweep invalidates every commit an older
writer may still have in flight. From then on every mount with a token below
N is fenced. The epoch is recorded with holder --holder (default
"fencefs-epoch-raise"); a mount may bind the same N only with the same
holder name, so a new leader usually mounts with N+1 (or auto).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(args[1]) == "" {
				return usageError{fmt.Errorf("N: empty token")}
			}
			n, err := fencing.ParseToken(args[1])
			if err != nil {
				return usageError{fmt.Errorf("N: %v", err)}
			}
			return withAdmin(cmd, args[0], adminTimeout, func(ctx context.Context, env *adminEnv) error {
				fcfg := fencingConfig(env.cfg, env.log, nil)
				if fcfg.Holder == "" {
					fcfg.Holder = "fencefs-epoch-raise"
					if h, err := os.Hostname(); err == nil {
						fcfg.Holder += "-" + sanitizeHolder(h)
					}
				}
				start := time.Now()
				got, err := fencing.Raise(ctx, env.store, fcfg, n)
				if err != nil {
					return fmt.Errorf("cannot raise the epoch of bucket %q to %s: %w", env.cfg.S3.Bucket, args[1], explainStoreErr(env.cfg, err))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "bucket %s: epoch raised to %d (holder %s) in %v; writers with older tokens are fenced\n",
					env.cfg.S3.Bucket, got, fcfg.Holder, time.Since(start).Round(time.Millisecond))
				return nil
			})
		},
	}
	addAdminFlags(cmd, 0)
	cmd.Flags().String("fence-domain", config.DomainBucket, "fence domain: bucket or prefix")
	cmd.Flags().String("holder", "", "holder name recorded with the epoch (default fencefs-epoch-raise-HOSTNAME)")
	return cmd
}

// sanitizeHolder keeps the characters a holder name may contain.
func sanitizeHolder(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r > 0x20 && r < 0x7f && r != ',' && r != '@' {
			b.WriteRune(r)
		}
	}
	return b.String()
}
