package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/spf13/cobra"
)

// Exit status of probe when the probe ran but the mode is not possible.
const exitProbeLacking = 3

func newProbeCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "probe BUCKET[/PREFIX]",
		Short: "Check which conditional operations the storage honours",
		Long: `Run the capability probe on scratch keys under PREFIX/.fencefs/probe/ (removed
afterwards) and print one row per check. The exit status says whether the
fencing mode of --fence-mode (default strict) can run on this storage:
0 yes, 3 no (a check it depends on failed), 1 the probe could not run
(credentials, missing bucket, unreachable endpoint).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
			defer cancel()
			env, err := openAdmin(ctx, cmd, args[0], nil)
			if err != nil {
				return err
			}
			defer env.close()
			caps := objstore.Probe(ctx, env.store, fencing.ProbeDir(env.cfg.S3.Prefix))
			if caps.Err != nil {
				return explainStoreErr(env.cfg, caps.Err)
			}
			modeErr := fencing.CheckStorage(fencing.Mode(env.cfg.Fence.Mode), caps)
			strictErr := fencing.CheckStorage(fencing.ModeStrict, caps)
			fastErr := fencing.CheckStorage(fencing.ModeFast, caps)
			tombstones := fencing.TombstoneDeletes(caps)
			out := cmd.OutOrStdout()
			if asJSON {
				type row struct {
					Check  objstore.Capability `json:"check"`
					OK     bool                `json:"ok"`
					Reason string              `json:"reason,omitempty"`
				}
				doc := struct {
					Endpoint         string  `json:"endpoint"`
					Bucket           string  `json:"bucket"`
					Prefix           string  `json:"prefix"`
					Checks           []row   `json:"checks"`
					Strict           bool    `json:"strict_possible"`
					Fast             bool    `json:"fast_possible"`
					TombstoneDeletes bool    `json:"tombstone_deletes"`
					Seconds          float64 `json:"seconds"`
				}{Endpoint: env.cfg.EndpointURL(), Bucket: env.cfg.S3.Bucket, Prefix: env.cfg.S3.Prefix,
					Strict: strictErr == nil, Fast: fastErr == nil,
					TombstoneDeletes: tombstones, Seconds: caps.Duration.Seconds()}
				for _, c := range caps.Checks() {
					doc.Checks = append(doc.Checks, row{c.Name, c.OK, c.Reason})
				}
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(doc); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "endpoint  %s\nbucket    %s\n", env.cfg.EndpointURL(), env.cfg.S3.Bucket)
				if env.cfg.S3.Prefix != "" {
					fmt.Fprintf(out, "prefix    %s\n", env.cfg.S3.Prefix)
				}
				fmt.Fprintln(out)
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL")
				for _, c := range caps.Checks() {
					res := "ok"
					if !c.OK {
						res = "FAIL"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, res, c.Reason)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				fmt.Fprintln(out)
				fmt.Fprintf(out, "strict mode: %s\n", possible(strictErr))
				fmt.Fprintf(out, "fast mode:   %s\n", possible(fastErr))
				if tombstones {
					fmt.Fprintln(out, "deletes:     written as tombstones (DELETE ignores If-Match here); run fencefs gc to remove old ones")
				} else {
					fmt.Fprintln(out, "deletes:     conditional DELETE")
				}
				fmt.Fprintf(out, "took:        %v\n", caps.Duration.Round(1e6))
			}
			if modeErr != nil {
				return exitError{code: exitProbeLacking, msg: fmt.Sprintf("fencefs: probe: %s mode is not possible on %s: %v", env.cfg.Fence.Mode, env.cfg.EndpointURL(), modeErr)}
			}
			return nil
		},
	}
	addAdminFlags(cmd, 0)
	cmd.Flags().String("fence-mode", config.ModeStrict, "the fencing mode whose feasibility sets the exit status: strict, fast or off")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func possible(err error) string {
	if err == nil {
		return "possible"
	}
	return "NOT possible: " + err.Error()
}
