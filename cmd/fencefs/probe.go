package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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
			return withAdmin(cmd, args[0], adminTimeout, func(ctx context.Context, env *adminEnv) error {
				caps := objstore.Probe(ctx, env.store, fencing.ProbeDir(env.cfg.S3.Prefix))
				if caps.Err != nil {
					return explainStoreErr(env.cfg, caps.Err)
				}
				modeErr := fencing.CheckStorage(fencing.Mode(env.cfg.Fence.Mode), caps)
				r := probeReport{cfg: env.cfg, caps: caps, strict: fencing.CheckStorage(fencing.ModeStrict, caps),
					fast: fencing.CheckStorage(fencing.ModeFast, caps), tombstones: fencing.TombstoneDeletes(caps)}
				write := r.text
				if asJSON {
					write = r.json
				}
				if err := write(cmd.OutOrStdout()); err != nil {
					return err
				}
				if modeErr != nil {
					return exitError{code: exitProbeLacking, msg: fmt.Sprintf("fencefs: probe: %s mode is not possible on %s: %v", env.cfg.Fence.Mode, env.cfg.EndpointURL(), modeErr)}
				}
				return nil
			})
		},
	}
	addAdminFlags(cmd, 0)
	cmd.Flags().String("fence-mode", config.ModeStrict, "the fencing mode whose feasibility sets the exit status: strict, fast or off")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// probeReport is what `fencefs probe` prints: the checks and which modes
// can run.
type probeReport struct {
	cfg          *config.Config
	caps         objstore.Capabilities
	strict, fast error // fencing.CheckStorage of each mode
	tombstones   bool
}

func (r probeReport) json(out io.Writer) error {
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
	}{Endpoint: r.cfg.EndpointURL(), Bucket: r.cfg.S3.Bucket, Prefix: r.cfg.S3.Prefix,
		Strict: r.strict == nil, Fast: r.fast == nil,
		TombstoneDeletes: r.tombstones, Seconds: r.caps.Duration.Seconds()}
	for _, c := range r.caps.Checks() {
		doc.Checks = append(doc.Checks, row{c.Name, c.OK, c.Reason})
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

func (r probeReport) text(out io.Writer) error {
	fmt.Fprintf(out, "endpoint  %s\nbucket    %s\n", r.cfg.EndpointURL(), r.cfg.S3.Bucket)
	if r.cfg.S3.Prefix != "" {
		fmt.Fprintf(out, "prefix    %s\n", r.cfg.S3.Prefix)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL")
	for _, c := range r.caps.Checks() {
		res := "ok"
		switch {
		case !c.OK && c.Optional:
			res = "no"
		case !c.OK:
			res = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, res, c.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "strict mode: %s\n", possible(r.strict))
	fmt.Fprintf(out, "fast mode:   %s\n", possible(r.fast))
	if r.tombstones {
		fmt.Fprintln(out, "deletes:     written as tombstones (DELETE ignores If-Match here); run fencefs gc to remove old ones")
	} else {
		fmt.Fprintln(out, "deletes:     conditional DELETE")
	}
	fmt.Fprintf(out, "took:        %v\n", r.caps.Duration.Round(1e6))
	return nil
}

func possible(err error) string {
	if err == nil {
		return "possible"
	}
	return "NOT possible: " + err.Error()
}
