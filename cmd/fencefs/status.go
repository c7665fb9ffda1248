package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/fencefs/fencefs/fusefs"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

func newStatusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status MOUNTPOINT",
		Short: "Show the fencing state of a mount",
		Long: `Show the fencing state of the fencefs mount at MOUNTPOINT, read from its
root extended attributes user.fencefs.{state,token,epoch,holder,epoch_holder,
reason,bind_error,dirty_files,staging_bytes,tombstones}: bind_error says why
the last setfattr of user.fencefs.token was refused; dirty_files counts files whose
changes are not stored yet (what an unmount now must commit); tombstones
counts the deleted keys the mount knows other S3 clients still list, when the
first goes and how they are removed. Exits 1 if MOUNTPOINT is not a fencefs
mount.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mp, err := filepath.Abs(args[0])
			if err != nil {
				return err
			}
			vals, err := readStatus(mp)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				vals["mountpoint"] = mp
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(vals)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "mountpoint\t%s\n", mp)
			for _, name := range fusefs.ControlXattrs() {
				k := statusKey(name)
				fmt.Fprintf(tw, "%s\t%s\n", k, vals[k])
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// statusKey is the name `fencefs status` shows for a control attribute:
// without the user.fencefs. prefix.
func statusKey(xattr string) string { return strings.TrimPrefix(xattr, fusefs.XattrPrefix) }

// readStatus reads the control attributes (fusefs.ControlXattrs) of the
// mount at mp, by statusKey.
func readStatus(mp string) (map[string]string, error) {
	fi, err := os.Stat(mp)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", mp, unwrapPath(err))
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory, so not a mountpoint", mp)
	}
	if m, ok, err := mountAt(mp); err == nil && (!ok || m.FSType != fencefsType) {
		return nil, fmt.Errorf("%s is not a fencefs mount", mp)
	}
	vals := map[string]string{}
	buf := make([]byte, 4096)
	for _, name := range fusefs.ControlXattrs() {
		k := statusKey(name)
		n, err := unix.Getxattr(mp, name, buf)
		switch {
		case err == nil:
			vals[k] = string(buf[:n])
		case errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOTSUP):
			if name == fusefs.XattrState {
				return nil, fmt.Errorf("%s is not a fencefs mount (no %s attribute)", mp, name)
			}
			vals[k] = ""
		default:
			return nil, fmt.Errorf("cannot read %s of %s: %v", name, mp, err)
		}
	}
	return vals, nil
}
