package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/csidriver"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// csiOptions are the flags of `fencefs csi`.
type csiOptions struct {
	csiShared
	endpoint string
	nodeID   string
	mounter  string
	// controller serves the Controller service instead of the Node
	// service, with the volumes on the S3 server s3.
	controller bool
	s3         csiS3
}

// csiS3 is the S3 server of the volumes the controller provisions.
type csiS3 struct {
	endpoint  string
	region    string
	pathStyle bool
	caFile    string
}

// csiShared are the flags the driver and its mounter share: the state and
// kubelet directories (the mounter must be given the driver's) and the
// log.
type csiShared struct {
	stateDir   string
	kubeletDir string
	logLevel   string
	logFormat  string
}

// flags registers the shared flags on f, the directories with the
// command's own usage.
func (c *csiShared) flags(f *pflag.FlagSet, stateUsage, kubeletUsage string) {
	f.StringVar(&c.stateDir, "state-dir", "/var/lib/fencefs-csi", stateUsage)
	f.StringVar(&c.kubeletDir, "kubelet-dir", "/var/lib/kubelet", kubeletUsage)
	f.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
}

// logger is the logger of `fencefs csi` and its mounter, on stderr.
func (c *csiShared) logger() (*slog.Logger, func(), error) {
	switch c.logLevel {
	case "debug", "info", "warn", "error":
	default:
		return nil, nil, usageErrorf("--log-level %q is not a log level (accepted: debug, info, warn, error)", c.logLevel)
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		return nil, nil, usageErrorf("--log-format %q is not a log format (accepted: text, json)", c.logFormat)
	}
	return newLogger(config.Log{Level: c.logLevel, Format: c.logFormat}, false)
}

func newCSICmd() *cobra.Command {
	var o csiOptions
	cmd := &cobra.Command{
		Use:   "csi --endpoint unix:///csi/csi.sock --node-id NODE",
		Short: "Serve the CSI node driver (Kubernetes)",
		Long: `Serve the CSI Identity and Node services of the driver ` + csidriver.Name + ` on a
unix socket, for kubelet: each NodePublishVolume mounts the volume's bucket
at the pod's target path with a fencefs process of its own (started as
"fencefs mount", in its own session, so that it outlives this process),
without a token: read-only until the pod's "fencefs run --mount" binds one.
The volume's attributes are bucketName and fencefs -o options by name; its
secret holds AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.

The driver keeps a directory per volume under --state-dir (a record, the
mount's cache directory and its log); restarted, it adopts the mounts it
finds there and the fencefs mounts under --kubelet-dir. SIGTERM or SIGINT
stop the server; the mounts stay.

With --controller, it serves the Identity and Controller services instead
(beside the external-provisioner, in a Deployment): CreateVolume makes a
prefix of the StorageClass's bucket on the S3 server of --s3-endpoint,
with a fence domain of its own; DeleteVolume removes it or keeps it, as the
StorageClass's onDelete parameter says. Credentials come from each
request's secret (the StorageClass's provisioner secret), else from the
controller's environment (AWS_ACCESS_KEY_ID …, or web identity:
AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN).

With --mounter-socket, the driver does not start the mount processes: it
asks "fencefs csi mounter", the main process of another container of the
same pod, to mount and unmount, so that a restart of the driver's
container leaves the mounts serving. See docs/CSI.md.`,
		Example: `  # In the node DaemonSet (deploy/kubernetes/node.yaml), beside the mounter:
  fencefs csi --endpoint unix:///csi/csi.sock --node-id "$NODE_NAME" \
    --mounter-socket /run/fencefs-csi/mounter.sock

  # In the controller Deployment (deploy/kubernetes/controller.yaml):
  fencefs csi --controller --endpoint unix:///csi/csi.sock \
    --s3-endpoint https://minio.example:9000 --s3-path-style`,
		// No arguments; one is an unknown subcommand (fencefs csi mountr).
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{errors.New(unknownCommand(cmd, args[0], ""))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return runCSI(o) },
	}
	cmd.AddCommand(newCSIMounterCmd())
	f := cmd.Flags()
	f.StringVar(&o.endpoint, "endpoint", "unix:///csi/csi.sock", "unix socket to serve the CSI services on")
	f.StringVar(&o.nodeID, "node-id", "", "name of this node (required; Kubernetes: spec.nodeName)")
	o.flags(f, "directory of the volumes' records, caches and logs (must outlive the driver: a hostPath)",
		"kubelet's directory: fencefs mounts below it are adopted after a restart even without a record")
	f.StringVar(&o.mounter, "mounter-socket", "", `unix socket of "fencefs csi mounter", which then mounts and unmounts the volumes (default: the driver mounts them itself)`)
	f.BoolVar(&o.controller, "controller", false, "serve the Controller service (CreateVolume, DeleteVolume: a prefix of a bucket per volume) instead of the Node service")
	f.StringVar(&o.s3.endpoint, "s3-endpoint", "", "with --controller: URL of the S3 server of the volumes (required)")
	f.StringVar(&o.s3.region, "s3-region", "", "with --controller: region of the S3 server (default: us-east-1)")
	f.BoolVar(&o.s3.pathStyle, "s3-path-style", false, "with --controller: path-style requests (MinIO, the Versity gateway)")
	f.StringVar(&o.s3.caFile, "s3-ca-file", "", "with --controller: PEM bundle of CAs trusted for the S3 server, in the controller's container")
	return cmd
}

// runCSI serves the driver until SIGTERM or SIGINT.
func runCSI(o csiOptions) error {
	if o.controller {
		return runCSIController(o)
	}
	if o.s3 != (csiS3{}) {
		return usageErrorf("--s3-endpoint, --s3-region, --s3-path-style and --s3-ca-file are the controller's (--controller): a volume's node mount takes them from its attributes")
	}
	if o.nodeID == "" {
		return usageErrorf("--node-id is required (the node's name; in the DaemonSet, spec.nodeName)")
	}
	if o.mounter != "" && !filepath.IsAbs(o.mounter) {
		return usageErrorf("--mounter-socket %q is not an absolute path", o.mounter)
	}
	log, closeLog, err := o.logger()
	if err != nil {
		return err
	}
	defer closeLog()
	exe := ""
	if o.mounter == "" {
		if exe, err = os.Executable(); err != nil {
			return fmt.Errorf("cannot find own executable, which mounts the volumes: %v", err)
		}
	}
	d, err := csidriver.New(csidriver.Options{NodeID: o.nodeID, StateDir: o.stateDir, KubeletDir: o.kubeletDir,
		Binary: exe, MounterSocket: o.mounter, Version: versionString(), Logger: log})
	if err != nil {
		return err
	}
	ln, err := csidriver.Listen(o.endpoint)
	if err != nil {
		return usageError{err}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return d.Serve(ctx, ln)
}

// runCSIController serves the Controller service until SIGTERM or SIGINT.
func runCSIController(o csiOptions) error {
	switch {
	case o.nodeID != "" || o.mounter != "":
		return usageErrorf("--node-id and --mounter-socket are the node driver's: --controller serves the Controller service only")
	case o.s3.endpoint == "":
		return usageErrorf("--s3-endpoint is required with --controller (the S3 server of the volumes)")
	}
	log, closeLog, err := o.logger()
	if err != nil {
		return err
	}
	defer closeLog()
	c, err := csidriver.NewController(csidriver.ControllerOptions{Endpoint: o.s3.endpoint, Region: o.s3.region,
		PathStyle: o.s3.pathStyle, CAFile: o.s3.caFile, WebIdentityTokenFile: os.Getenv("AWS_WEB_IDENTITY_TOKEN_FILE"),
		RoleARN: os.Getenv("AWS_ROLE_ARN"), Version: versionString(), Logger: log})
	if err != nil {
		return usageError{err}
	}
	ln, err := csidriver.Listen(o.endpoint)
	if err != nil {
		return usageError{err}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return c.Serve(ctx, ln)
}

// csiMounterOptions are the flags of `fencefs csi mounter`.
type csiMounterOptions struct {
	csiShared
	socket string
}

func newCSIMounterCmd() *cobra.Command {
	var o csiMounterOptions
	cmd := &cobra.Command{
		Use:   "mounter --socket /run/fencefs-csi/mounter.sock",
		Short: "Start and stop the CSI driver's mount processes (its own container)",
		Long: `Serve the mounter of the CSI node driver on a unix socket: when the driver
("fencefs csi --mounter-socket") asks, start a volume's "fencefs mount"
process (in its own session, with its cache and log in the volume's
directory under --state-dir) or unmount it. It keeps no state and knows
nothing of CSI: run as the main process of its own container in the node
plugin's pod, it lets the driver's container restart while the mounts
serve on. A restart of the mounter's own container stops every mount of
the node (docs/CSI.md). Requests are refused, with one line, unless their
target is below --kubelet-dir. SIGTERM or SIGINT stop the server; the
mounts stay (in a container: until the container stops).`,
		Example: `  # In the node DaemonSet (deploy/kubernetes/node.yaml), beside the driver:
  fencefs csi mounter --socket /run/fencefs-csi/mounter.sock --state-dir /var/lib/fencefs-csi`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCSIMounter(o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.socket, "socket", "/run/fencefs-csi/mounter.sock", "unix socket to serve on (the driver's --mounter-socket; root only)")
	o.flags(f, "the driver's --state-dir: the volumes' caches and logs are in it",
		"kubelet's directory: every target must be below it")
	return cmd
}

// runCSIMounter serves the mounter until SIGTERM or SIGINT.
func runCSIMounter(o csiMounterOptions) error {
	if !filepath.IsAbs(o.socket) {
		return usageErrorf("--socket %q is not an absolute path", o.socket)
	}
	if !filepath.IsAbs(o.kubeletDir) {
		return usageErrorf("--kubelet-dir %q is not an absolute path", o.kubeletDir)
	}
	log, closeLog, err := o.logger()
	if err != nil {
		return err
	}
	defer closeLog()
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find own executable, which mounts the volumes: %v", err)
	}
	m, err := csidriver.NewMounter(csidriver.MounterOptions{StateDir: o.stateDir, KubeletDir: o.kubeletDir, Binary: exe, Logger: log})
	if err != nil {
		return err
	}
	ln, err := csidriver.ListenMounter(o.socket)
	if err != nil {
		return usageError{err}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return m.Serve(ctx, ln)
}
