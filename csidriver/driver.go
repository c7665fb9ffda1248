package csidriver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Name is the driver's name: the CSIDriver object's, and the one
// PersistentVolumes name in spec.csi.driver.
const Name = "csi.fencefs.io"

// Options configure a Driver.
type Options struct {
	// NodeID is the name of the node (Kubernetes: spec.nodeName).
	NodeID string
	// StateDir holds a directory per published volume (its record, cache
	// directory and log); it must outlive the driver (a hostPath).
	StateDir string
	// KubeletDir is where the fencefs mounts the driver adopts without a
	// record may be (/var/lib/kubelet); "" adopts only recorded ones.
	KubeletDir string
	// Binary is the fencefs binary that mounts (the driver's own), when
	// the driver mounts by itself.
	Binary string
	// MounterSocket, when set, is the unix socket of the mounter (`fencefs
	// csi mounter`), which mounts and unmounts for the driver: the mount
	// processes are then the mounter's, not the driver's. The driver and
	// the mounter must share the node's state directory and process
	// namespace (it reads the mount processes in /proc).
	MounterSocket string
	// Version is reported by GetPluginInfo.
	Version string
	// Logger receives the driver's log; nil discards it.
	Logger *slog.Logger
}

// Driver serves the CSI Identity and Node services. Its methods are safe
// for concurrent use; calls on one target path are serialized (a second
// one while the first runs is Aborted, which the CO retries).
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer

	opts Options
	log  *slog.Logger
	run  runner

	busyTargets // calls on one target path, one at a time

	mu   sync.Mutex
	vols map[string]*record // GUARDED_BY(mu): by target path
}

// New returns a Driver for opts, with the volumes published before (by an
// earlier driver on this node) adopted again: see adopt.go.
func New(opts Options) (*Driver, error) {
	switch {
	case opts.NodeID == "":
		return nil, errors.New("the node id is missing (--node-id)")
	case opts.StateDir == "":
		return nil, errors.New("the state directory is missing (--state-dir)")
	case opts.Binary == "" && opts.MounterSocket == "":
		return nil, errors.New("the fencefs binary is missing")
	case opts.MounterSocket != "" && !filepath.IsAbs(opts.MounterSocket):
		return nil, fmt.Errorf("the mounter's socket %q is not an absolute path", opts.MounterSocket)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Join(opts.StateDir, "volumes"), 0o700); err != nil {
		return nil, fmt.Errorf("state directory %s: %v", opts.StateDir, unwrap(err))
	}
	d := &Driver{opts: opts, log: opts.Logger, vols: map[string]*record{}}
	d.run = localRunner{bin: opts.Binary, stateDir: opts.StateDir}
	if opts.MounterSocket != "" {
		d.run = newMounterClient(opts.MounterSocket)
	}
	if err := d.adopt(); err != nil {
		return nil, fmt.Errorf("finding the volumes published before: %v", err)
	}
	return d, nil
}

// Listen opens the endpoint, "unix:///PATH" or "unix:PATH" (a socket left
// by an earlier driver is removed first).
func Listen(endpoint string) (net.Listener, error) {
	path, ok := socketPath(endpoint)
	if !ok {
		return nil, fmt.Errorf("endpoint %q is not a unix socket (accepted: unix:///PATH)", endpoint)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("endpoint %s: %v", endpoint, unwrap(err))
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("endpoint %s: cannot remove the old socket: %v", endpoint, unwrap(err))
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: %v", endpoint, unwrap(err))
	}
	return ln, nil
}

// socketPath is the path of a unix endpoint.
func socketPath(endpoint string) (string, bool) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "unix" {
		return "", false
	}
	p := u.Path
	if p == "" {
		p = u.Opaque
	}
	if u.Host != "" || p == "" || !filepath.IsAbs(p) {
		return "", false
	}
	return filepath.Clean(p), true
}

// Serve answers CSI calls on ln until ctx ends, then stops the server
// (calls in progress are given stopGrace). The volumes stay mounted.
func (d *Driver) Serve(ctx context.Context, ln net.Listener) error {
	srv := grpc.NewServer(grpc.UnaryInterceptor(logCalls(d.log)))
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterNodeServer(srv, d)
	d.log.Info("serving", "driver", Name, "version", d.opts.Version, "node_id", d.opts.NodeID,
		"endpoint", ln.Addr().String(), "mounter", d.opts.MounterSocket, "volumes", d.count())
	return serveGRPC(ctx, srv, ln)
}

// serveGRPC serves srv on ln until ctx ends, then stops it (calls in
// progress are given stopGrace).
func serveGRPC(ctx context.Context, srv *grpc.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(stopGrace):
		srv.Stop()
	}
	return nil
}

// stopGrace is how long calls in progress may finish once Serve stops.
const stopGrace = 10 * time.Second

func (d *Driver) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.vols)
}

// logCalls logs every call once: its method, volume, name and target,
// how long it took and its error. Requests are never logged whole: they
// carry secrets.
func logCalls(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := h(ctx, req)
		attrs := []any{"method", strings.TrimPrefix(info.FullMethod, "/csi.v1."), "took", time.Since(start).Round(time.Millisecond)}
		if r, ok := req.(interface{ GetVolumeId() string }); ok && r.GetVolumeId() != "" {
			attrs = append(attrs, "volume_id", r.GetVolumeId())
		}
		if r, ok := req.(interface{ GetName() string }); ok && r.GetName() != "" {
			attrs = append(attrs, "name", r.GetName())
		}
		if r, ok := req.(interface{ GetTargetPath() string }); ok && r.GetTargetPath() != "" {
			attrs = append(attrs, "target", r.GetTargetPath())
		}
		switch {
		case err != nil:
			log.Warn("call failed", append(attrs, "code", status.Code(err).String(), "err", status.Convert(err).Message())...)
		case strings.Contains(info.FullMethod, "Publish"), strings.Contains(info.FullMethod, "Volume") && strings.Contains(info.FullMethod, "Controller/"):
			log.Info("call", attrs...)
		default:
			log.Debug("call", attrs...)
		}
		return resp, err
	}
}

// volume returns the record of target (nil when none).
func (d *Driver) volume(target string) *record {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.vols[target]
}

func (d *Driver) setVolume(target string, r *record) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r == nil {
		delete(d.vols, target)
		return
	}
	d.vols[target] = r
}

// GetPluginInfo names the driver and its version.
func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: Name, VendorVersion: d.opts.Version}, nil
}

// GetPluginCapabilities reports the Controller service, which the plugin
// has (`fencefs csi --controller`, the controller Deployment; static
// volumes need none), and no topology (every node reaches the bucket).
// The controller answers the same.
func (d *Driver) GetPluginCapabilities(ctx context.Context, req *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return (*Controller)(nil).GetPluginCapabilities(ctx, req)
}

// Probe is ready when the node can mount FUSE filesystems: the driver
// itself, or its mounter, which must answer.
func (d *Driver) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if err := d.run.probe(ctx); err != nil {
		return nil, err
	}
	return &csi.ProbeResponse{}, nil
}
