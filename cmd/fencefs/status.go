package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// Root xattrs of a fencefs mount (DESIGN.md §3).
var statusXattrs = []string{"state", "token", "epoch", "holder", "epoch_holder", "reason"}

const xattrPrefix = "user.fencefs."

func newStatusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status MOUNTPOINT",
		Short: "Show the fencing state of a mount",
		Long: `Show the fencing state of the fencefs mount at MOUNTPOINT, read from its
root extended attributes user.fencefs.{state,token,epoch,holder,epoch_holder,
reason}. Exits 1 if
MOUNTPOINT is not a fencefs mount.`,
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
			for _, k := range statusXattrs {
				fmt.Fprintf(tw, "%s\t%s\n", k, vals[k])
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// readStatus reads the fencefs root xattrs of the mount at mp.
func readStatus(mp string) (map[string]string, error) {
	fi, err := os.Stat(mp)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", mp, unwrapPath(err))
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory, so not a mountpoint", mp)
	}
	if ok, err := isFencefsMount(mp); err == nil && !ok {
		return nil, fmt.Errorf("%s is not a fencefs mount", mp)
	}
	vals := map[string]string{}
	buf := make([]byte, 4096)
	for _, k := range statusXattrs {
		n, err := unix.Getxattr(mp, xattrPrefix+k, buf)
		switch {
		case err == nil:
			vals[k] = string(buf[:n])
		case errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOTSUP):
			if k == "state" {
				return nil, fmt.Errorf("%s is not a fencefs mount (no %s%s attribute)", mp, xattrPrefix, k)
			}
			vals[k] = ""
		default:
			return nil, fmt.Errorf("cannot read %s%s of %s: %v", xattrPrefix, k, mp, err)
		}
	}
	return vals, nil
}

// isFencefsMount reports whether mp is the mountpoint of a fuse.fencefs
// filesystem, from /proc/self/mountinfo.
func isFencefsMount(mp string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	mp = filepath.Clean(mp)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || unescapeMountinfo(fields[4]) != mp {
			continue
		}
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "fuse.fencefs" {
				return true, nil
			}
		}
	}
	return false, sc.Err()
}

// isMountpoint reports whether mp is a mountpoint of any filesystem.
func isMountpoint(mp string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	mp = filepath.Clean(mp)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 && unescapeMountinfo(fields[4]) == mp {
			return true, nil
		}
	}
	return false, sc.Err()
}

// unescapeMountinfo decodes the octal escapes (\040 for space …) of
// /proc/self/mountinfo paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			o := s[i+1 : i+4]
			if len(o) == 3 && o[0] >= '0' && o[0] <= '3' && o[1] >= '0' && o[1] <= '7' && o[2] >= '0' && o[2] <= '7' {
				b.WriteByte((o[0]-'0')<<6 | (o[1]-'0')<<3 | (o[2] - '0'))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
