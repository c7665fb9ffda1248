package csidriver

// Who starts and ends the fencefs processes of the volumes. In one
// container, the driver runs `fencefs mount` itself (localRunner): the
// mount processes are then processes of the driver's container, and a
// restart of that container stops them. In the node DaemonSet, the driver
// asks the mounter (`fencefs csi mounter`, the main process of another
// container of the same pod: mounterd.go) over a unix socket
// (mounterClient): the mount processes are the mounter's, and the
// driver's container restarts without them.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// runner starts and ends the fencefs processes of volumes. Its errors are
// gRPC statuses with one-line messages.
type runner interface {
	// mount runs `fencefs mount` of s (its cache and log in the volume's
	// directory, volumeDir) and returns the pid of the mount process.
	mount(ctx context.Context, s volumeSpec) (pid int, err error)
	// unmount removes the fencefs mount at target (nothing mounted there
	// is success); lazy reports a busy mount detached lazily. A mount
	// that is not fencefs's is FailedPrecondition.
	unmount(ctx context.Context, target string) (lazy bool, err error)
	// probe reports whether FUSE filesystems can be mounted.
	probe(ctx context.Context) error
}

// localRunner runs `fencefs mount` as the driver's own child.
type localRunner struct {
	bin      string // the fencefs binary
	stateDir string // the volumes' directories are under it
}

func (l localRunner) mount(ctx context.Context, s volumeSpec) (int, error) {
	dir := volumeDir(l.stateDir, s.Target)
	if s.Audience != "" {
		f, err := checkTokenFile(dir)
		if err != nil {
			return 0, err
		}
		s.TokenFile = f
	}
	return runMount(ctx, l.bin, s, filepath.Join(dir, cacheDir), filepath.Join(dir, logFile))
}

func (localRunner) unmount(ctx context.Context, target string) (bool, error) {
	return unmountStatus(ctx, target)
}

func (localRunner) probe(context.Context) error { return probeFUSE() }

// unmountStatus is unmount with its error a gRPC status.
func unmountStatus(ctx context.Context, target string) (bool, error) {
	lazy, err := unmount(ctx, target)
	if err == nil {
		return lazy, nil
	}
	if _, ok := status.FromError(err); ok {
		return false, err
	}
	if ctx.Err() != nil {
		return false, status.FromContextError(ctx.Err()).Err()
	}
	return false, status.Errorf(codes.Internal, "%v", err)
}

// probeFUSE is FailedPrecondition when this process cannot open FUSE
// mounts.
func probeFUSE() error {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return status.Errorf(codes.FailedPrecondition, "no /dev/fuse: %v (the container that mounts needs the host's /dev/fuse)", unwrap(err))
	}
	return nil
}

// The mounter's calls: JSON over HTTP on its unix socket. An error is any
// status but 200 with an errorResponse body.
const (
	pathMount   = "/v1/mount"
	pathUnmount = "/v1/unmount"
	pathProbe   = "/v1/probe"
)

// mountRequest asks the mounter to mount bucket at target (POST
// /v1/mount). It is the only place credentials travel: in the body, over
// the unix socket, never in a log.
type mountRequest struct {
	Target string `json:"target"`
	Bucket string `json:"bucket"`
	// Options are fencefs -o options by name (volumeSpec.Options).
	Options map[string]string `json:"options"`
	// Credentials are the mount process's AWS_* variables (the volume's
	// secret, or the driver's node-wide ones); none uses none.
	Credentials map[string]string `json:"credentials,omitempty"`
	// WebIdentity mounts with the pod's token that the driver wrote in
	// the volume's directory (podtoken.go), by web identity; the token
	// itself never travels here.
	WebIdentity bool `json:"web_identity,omitempty"`
}

type mountResponse struct {
	Pid int `json:"pid"`
}

// unmountRequest asks the mounter to unmount target (POST /v1/unmount).
type unmountRequest struct {
	Target string `json:"target"`
}

type unmountResponse struct {
	Lazy bool `json:"lazy"`
}

type probeResponse struct{}

// errorResponse is a failed call: the gRPC code the driver returns and a
// one-line message.
type errorResponse struct {
	Code  codes.Code `json:"code"`
	Error string     `json:"error"`
}

// maxBody bounds a request or answer body of the mounter's API.
const maxBody = 1 << 20

// mounterClient asks the mounter at socket.
type mounterClient struct {
	socket string
	http   *http.Client
}

func newMounterClient(socket string) *mounterClient {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		// A connection per call (calls are few): none is left to a
		// mounter that restarted.
		DisableKeepAlives: true,
	}
	return &mounterClient{socket: socket, http: &http.Client{Transport: tr}}
}

func (c *mounterClient) mount(ctx context.Context, s volumeSpec) (int, error) {
	req := mountRequest{Target: s.Target, Bucket: s.Bucket, Options: s.Options, WebIdentity: s.Audience != ""}
	for _, kv := range s.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			if req.Credentials == nil {
				req.Credentials = map[string]string{}
			}
			req.Credentials[k] = v
		}
	}
	var resp mountResponse
	if err := c.call(ctx, http.MethodPost, pathMount, req, &resp); err != nil {
		return 0, err
	}
	if resp.Pid <= 0 {
		return 0, status.Errorf(codes.Internal, "the mounter mounted %s but named no process", s.Target)
	}
	return resp.Pid, nil
}

func (c *mounterClient) unmount(ctx context.Context, target string) (bool, error) {
	var resp unmountResponse
	err := c.call(ctx, http.MethodPost, pathUnmount, unmountRequest{Target: target}, &resp)
	return resp.Lazy, err
}

func (c *mounterClient) probe(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, pathProbe, nil, &probeResponse{})
}

// call sends req (nil: no body) and decodes the answer into resp; a
// failure is a status: the mounter's own, or Unavailable when it does not
// answer.
func (c *mounterClient) call(ctx context.Context, method, path string, req, resp any) error {
	var body io.Reader
	if req != nil {
		b, err := json.Marshal(req)
		if err != nil {
			return status.Errorf(codes.Internal, "encoding a request to the mounter: %v", err)
		}
		body = bytes.NewReader(b)
	}
	hreq, err := http.NewRequestWithContext(ctx, method, "http://mounter"+path, body)
	if err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	hresp, err := c.http.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return status.Errorf(codes.Unavailable, "the mounter does not answer at %s: %v (is the mounter container running?)", c.socket, err)
	}
	defer hresp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(hresp.Body, maxBody))
	if err != nil {
		return status.Errorf(codes.Unavailable, "reading the mounter's answer: %v", err)
	}
	if hresp.StatusCode != http.StatusOK {
		var e errorResponse
		if json.Unmarshal(b, &e) != nil || e.Error == "" || e.Code == codes.OK {
			return status.Errorf(codes.Internal, "the mounter answered %s: %q", hresp.Status, lastLine(string(b)))
		}
		return status.Error(e.Code, e.Error)
	}
	if err := json.Unmarshal(b, resp); err != nil {
		return status.Errorf(codes.Internal, "the mounter's answer to %s: %v", path, err)
	}
	return nil
}
