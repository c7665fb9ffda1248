// Command fencefs mounts an S3 bucket as a FUSE filesystem whose writers are
// fenced by epoch tokens, and administers the fencing state of a bucket.
//
// See docs/CLI.md for the commands, flags, -o options, environment variables
// and the fstab form. Every failure prints ONE line on stderr, prefixed with
// "fencefs: <command>: ", and exits with a non-zero status (2 for usage and
// configuration errors, 1 for everything else).
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/fencefs/fencefs/config"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// version is set at link time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError marks errors in the command line or configuration (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, a ...any) error {
	return usageError{fmt.Errorf(format, a...)}
}

// exitError carries a specific exit status with an already printed (or no)
// message.
type exitError struct {
	code int
	msg  string // printed by main when non-empty
}

func (e exitError) Error() string { return e.msg }

func main() {
	surviveClosedOutput()
	os.Exit(run(os.Args))
}

// surviveClosedOutput keeps the process alive when the reader of its
// standard output or error goes away (`fencefs mount -f | tee log`, then
// Ctrl-C ends tee): Go kills a program whose write to fd 1 or 2 fails with
// EPIPE unless SIGPIPE is notified. A mount must not die with its log pipe
// (its kernel mount would be left answering ENOTCONN), nor `fencefs run`
// (its command would lose its supervisor and the lease would stay held);
// they stop only on SIGTERM, SIGINT or an unmount. Such writes now fail
// with EPIPE, and the logger drops them (redactWriter).
//
// Notify, not signal.Ignore: an ignored signal stays ignored across exec,
// and the commands fencefs starts (run's COMMAND, fusermount3) must get
// the default SIGPIPE. Nobody reads the channel; the signal package never
// blocks on it.
func surviveClosedOutput() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}

// run executes the command line and returns the exit status. It prints
// errors as one line: "fencefs: <command>: <message>".
func run(args []string) int {
	root := newRootCmd()
	// The mount helper form: mount(8) runs /sbin/mount.fuse.fencefs (or
	// mount.fuse3 runs "fencefs") as "BUCKET MOUNTPOINT -o opts"; such an
	// invocation reaches the root command's RunE. A binary invoked as
	// mount.fencefs or mount.fuse.fencefs behaves the same.
	root.SetArgs(args[1:])
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	name := "fencefs"
	if cmd != nil && cmd != root {
		name = strings.TrimPrefix(cmd.CommandPath(), root.Name()+" ")
		name = "fencefs: " + name
	} else if cmd == root && looksLikeMount(args) {
		name = "fencefs: mount"
	}
	var ee exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(os.Stderr, oneLine(ee.msg))
		}
		return ee.code
	}
	fmt.Fprintf(os.Stderr, "%s: %s\n", name, oneLine(redact(err.Error())))
	var ue usageError
	if errors.As(err, &ue) || isFlagError(err) {
		return exitUsage
	}
	return exitFailure
}

func looksLikeMount(args []string) bool {
	return len(args) > 1 && !strings.HasPrefix(args[1], "-")
}

// isFlagError recognizes cobra/pflag parse errors, which are usage errors.
func isFlagError(err error) bool {
	s := err.Error()
	for _, p := range []string{"unknown flag", "unknown shorthand flag", "flag needs an argument", "invalid argument", "unknown command", "accepts ", "requires "} {
		if strings.HasPrefix(s, p) || strings.Contains(s, " "+p) {
			return true
		}
	}
	return false
}

// oneLine joins a multi-line message into one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	s = strings.ReplaceAll(s, "\r", "")
	return strings.ReplaceAll(s, "\n", "; ")
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "fencefs",
		Short: "Mount an S3 bucket with fenced writers",
		Long: `fencefs mounts an S3-compatible bucket as a FUSE filesystem. Every mount
carries a fencing token (a leader epoch); writes from a mount whose token is
older than the bucket's newest epoch are refused by the storage itself.

  fencefs mount BUCKET[/PREFIX] MOUNTPOINT [flags]
  fencefs BUCKET[/PREFIX] MOUNTPOINT -o opt=val,...     (the mount(8) helper form)

See docs/CLI.md for configuration files, environment variables and fstab.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs,
		// The helper form: "fencefs BUCKET MOUNTPOINT -o ...".
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			// A misspelt command ("fencefs stauts /mnt") is refused unless
			// -o says that mount(8) runs the helper form.
			if len(args) != 2 || (!cmd.Flags().Changed(config.FlagOptions) && len(cmd.SuggestionsFor(args[0])) > 0) {
				return exitError{code: exitUsage, msg: "fencefs: " + unknownCommand(cmd, args[0],
					fmt.Sprintf("to mount a bucket named %s: fencefs mount %s MOUNTPOINT", args[0], args[0]))}
			}
			return runMountCmd(cmd, args)
		},
		Version: versionString(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetUsageTemplate(usageTemplate)
	root.PersistentFlags().String("config", "", "configuration file (YAML); default: $XDG_CONFIG_HOME/fencefs/config.yaml, /etc/fencefs/config.yaml [env FENCEFS_CONFIG]")
	addMountFlags(root)
	// Options mount(8) passes to helpers (-n no mtab, -s sloppy, -v verbose):
	// accepted and ignored on the helper form.
	root.Flags().BoolP("no-mtab", "n", false, "ignored (mount helper compatibility)")
	root.Flags().BoolP("sloppy", "s", false, "ignored (mount helper compatibility)")
	root.Flags().BoolP("verbose", "v", false, "ignored (mount helper compatibility)")
	// The root command's own flags are those of the helper form; they are
	// documented under "fencefs mount --help", not in the command list.
	root.Flags().VisitAll(func(f *pflag.Flag) { f.Hidden = true })
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	root.AddCommand(newMountCmd(), newVersionCmd(), newStatusCmd(), newProbeCmd(), newEpochCmd(), newGCCmd(), newRunCmd(), newCSICmd(), newManCmd())
	root.InitDefaultCompletionCmd()
	for _, c := range append(root.Commands(), root) {
		c.SuggestionsMinimumDistance = 2
		if c.HasSubCommands() && !c.Runnable() {
			c.Args, c.RunE = cobra.ArbitraryArgs, groupRunE
		}
	}
	return root
}

// groupRunE runs a command that only groups subcommands (fencefs epoch):
// alone it prints its help; an unknown subcommand is a usage error
// (cobra itself would print the help and exit 0).
func groupRunE(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	return usageError{errors.New(unknownCommand(cmd, args[0], ""))}
}

// unknownCommand says that name is not a subcommand of cmd, with cobra's
// suggestion, else the commands accepted; then hint, if not empty.
func unknownCommand(cmd *cobra.Command, name, hint string) string {
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	var notes []string
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	} else {
		var accepted []string
		for _, c := range cmd.Commands() {
			if c.IsAvailableCommand() {
				accepted = append(accepted, c.Name())
			}
		}
		notes = append(notes, "accepted: "+strings.Join(accepted, ", "))
	}
	if hint != "" {
		notes = append(notes, hint)
	}
	if len(notes) == 0 {
		return msg
	}
	return msg + " (" + strings.Join(notes, "; ") + ")"
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), versionString())
			return nil
		},
	}
}

// binaryName is the name the binary was invoked as, without directories.
func binaryName() string { return filepath.Base(os.Args[0]) }
