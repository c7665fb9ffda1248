package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/csidriver"
	"github.com/spf13/cobra"
)

// csiOptions are the flags of `fencefs csi`.
type csiOptions struct {
	endpoint   string
	nodeID     string
	stateDir   string
	kubeletDir string
	logLevel   string
	logFormat  string
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
stop the server; the mounts stay. See docs/CSI.md.`,
		Example: `  # In the node DaemonSet (deploy/kubernetes/node.yaml):
  fencefs csi --endpoint unix:///csi/csi.sock --node-id "$NODE_NAME"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCSI(o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.endpoint, "endpoint", "unix:///csi/csi.sock", "unix socket to serve the CSI services on")
	f.StringVar(&o.nodeID, "node-id", "", "name of this node (required; Kubernetes: spec.nodeName)")
	f.StringVar(&o.stateDir, "state-dir", "/var/lib/fencefs-csi", "directory of the volumes' records, caches and logs (must outlive the driver: a hostPath)")
	f.StringVar(&o.kubeletDir, "kubelet-dir", "/var/lib/kubelet", "kubelet's directory: fencefs mounts below it are adopted after a restart even without a record")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	return cmd
}

// runCSI serves the driver until SIGTERM or SIGINT.
func runCSI(o csiOptions) error {
	if o.nodeID == "" {
		return usageErrorf("--node-id is required (the node's name; in the DaemonSet, spec.nodeName)")
	}
	switch o.logLevel {
	case "debug", "info", "warn", "error":
	default:
		return usageErrorf("--log-level %q is not a log level (accepted: debug, info, warn, error)", o.logLevel)
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return usageErrorf("--log-format %q is not a log format (accepted: text, json)", o.logFormat)
	}
	lc := config.Log{Level: o.logLevel, Format: o.logFormat}
	log, closeLog, err := newLogger(lc, false)
	if err != nil {
		return err
	}
	defer closeLog()
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find own executable, which mounts the volumes: %v", err)
	}
	d, err := csidriver.New(csidriver.Options{NodeID: o.nodeID, StateDir: o.stateDir, KubeletDir: o.kubeletDir,
		Binary: exe, Version: versionString(), Logger: log})
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
