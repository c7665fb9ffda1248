package csidriver

// The mounter (`fencefs csi mounter`): the main process of a container of
// its own in the node plugin's pod, which starts `fencefs mount`
// processes when the driver asks, and unmounts them. It holds no CSI
// logic — no records, no idempotency, no access modes: the driver keeps
// those — so that it has little reason to crash or to be updated, and
// the mount processes, its children, live in its container, not in the
// driver's. Its API is JSON over HTTP on a unix socket (runner.go: the
// requests); a malformed request is refused with one line, before
// anything runs. It never logs a request body (it holds credentials).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MounterOptions configure a Mounter.
type MounterOptions struct {
	// StateDir holds the volumes' directories (their cache and log): the
	// driver's --state-dir, the same directory of the node.
	StateDir string
	// KubeletDir is the directory every target must be below; "" accepts
	// any absolute path.
	KubeletDir string
	// Binary is the fencefs binary that mounts (the mounter's own).
	Binary string
	// Logger receives the mounter's log; nil discards it.
	Logger *slog.Logger
}

// Mounter serves the mounter's API. Calls on one target are serialized (a
// second one while the first runs is Aborted).
type Mounter struct {
	opts        MounterOptions
	log         *slog.Logger
	busyTargets // calls on one target, one at a time
}

// NewMounter returns a Mounter for opts.
func NewMounter(opts MounterOptions) (*Mounter, error) {
	switch {
	case opts.StateDir == "":
		return nil, errors.New("the state directory is missing (--state-dir)")
	case opts.Binary == "":
		return nil, errors.New("the fencefs binary is missing")
	case opts.KubeletDir != "" && !filepath.IsAbs(opts.KubeletDir):
		return nil, fmt.Errorf("the kubelet directory %q is not an absolute path", opts.KubeletDir)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.KubeletDir != "" {
		opts.KubeletDir = filepath.Clean(opts.KubeletDir)
	}
	if err := os.MkdirAll(filepath.Join(opts.StateDir, "volumes"), 0o700); err != nil {
		return nil, fmt.Errorf("state directory %s: %v", opts.StateDir, unwrap(err))
	}
	return &Mounter{opts: opts, log: opts.Logger}, nil
}

// ListenMounter opens the mounter's unix socket at path (a socket left by
// an earlier mounter is removed first), accessible to root only.
func ListenMounter(path string) (net.Listener, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("socket %q is not an absolute path", path)
	}
	ln, err := Listen("unix://" + path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket %s: %v", path, unwrap(err))
	}
	return ln, nil
}

// Handler is the mounter's API.
func (m *Mounter) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+pathMount, m.serveMount)
	mux.HandleFunc("POST "+pathUnmount, m.serveUnmount)
	mux.HandleFunc("GET "+pathProbe, m.serveProbe)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		m.fail(w, r, "", status.Errorf(codes.Unimplemented, "no call %s %s (accepted: POST %s, POST %s, GET %s)",
			r.Method, r.URL.Path, pathMount, pathUnmount, pathProbe))
	})
	return mux
}

// Serve answers on ln until ctx ends, then stops (calls in progress are
// given stopGrace, then cancelled). The mounts stay.
func (m *Mounter) Serve(ctx context.Context, ln net.Listener) error {
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return base }}
	m.log.Info("serving", "socket", ln.Addr().String(), "state_dir", m.opts.StateDir, "kubelet_dir", m.opts.KubeletDir)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), stopGrace)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		cancel()
		_ = srv.Close()
	}
	return nil
}

func (m *Mounter) serveMount(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var req mountRequest
	if err := decodeRequest(w, r, &req); err != nil {
		m.fail(w, r, req.Target, err)
		return
	}
	s, err := m.mountSpec(req)
	if err != nil {
		m.fail(w, r, req.Target, err)
		return
	}
	if err := m.claim(s.Target); err != nil {
		m.fail(w, r, s.Target, err)
		return
	}
	defer m.release(s.Target)
	dir := volumeDir(m.opts.StateDir, s.Target)
	if err := os.MkdirAll(filepath.Join(dir, cacheDir), 0o700); err != nil {
		m.fail(w, r, s.Target, status.Errorf(codes.Internal, "volume directory %s: %v", dir, unwrap(err)))
		return
	}
	pid, err := runMount(r.Context(), m.opts.Binary, s, filepath.Join(dir, cacheDir), filepath.Join(dir, logFile))
	if err != nil {
		m.fail(w, r, s.Target, err)
		return
	}
	m.log.Info("mounted", "target", s.Target, "bucket", s.Bucket, "options", s.optionList(), "pid", pid,
		"took", time.Since(start).Round(time.Millisecond))
	writeJSON(w, http.StatusOK, mountResponse{Pid: pid})
}

func (m *Mounter) serveUnmount(w http.ResponseWriter, r *http.Request) {
	var req unmountRequest
	if err := decodeRequest(w, r, &req); err != nil {
		m.fail(w, r, req.Target, err)
		return
	}
	if err := m.checkTarget(req.Target); err != nil {
		m.fail(w, r, req.Target, err)
		return
	}
	if err := m.claim(req.Target); err != nil {
		m.fail(w, r, req.Target, err)
		return
	}
	defer m.release(req.Target)
	lazy, err := unmountStatus(r.Context(), req.Target)
	if err != nil {
		m.fail(w, r, req.Target, err)
		return
	}
	m.log.Info("unmounted", "target", req.Target, "lazy", lazy)
	writeJSON(w, http.StatusOK, unmountResponse{Lazy: lazy})
}

func (m *Mounter) serveProbe(w http.ResponseWriter, r *http.Request) {
	if err := probeFUSE(); err != nil {
		m.fail(w, r, "", err)
		return
	}
	writeJSON(w, http.StatusOK, probeResponse{})
}

// mountSpec checks req as the driver's parsePublish checks a publish (the
// mounter trusts no caller to have) and returns what to mount.
func (m *Mounter) mountSpec(req mountRequest) (volumeSpec, error) {
	s := volumeSpec{Target: req.Target, Bucket: req.Bucket, Options: map[string]string{}}
	if err := m.checkTarget(s.Target); err != nil {
		return s, err
	}
	if err := checkBucket("bucket", s.Bucket); err != nil {
		return s, err
	}
	names := make([]string, 0, len(req.Options))
	for k := range req.Options {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if err := s.setOption("option", k, req.Options[k]); err != nil {
			return s, err
		}
	}
	if req.WebIdentity {
		if len(req.Credentials) > 0 {
			return s, invalid("a mount with web identity takes no credentials")
		}
		f, err := checkTokenFile(volumeDir(m.opts.StateDir, s.Target))
		if err != nil {
			return s, err
		}
		s.TokenFile = f
		return s, nil
	}
	if len(req.Credentials) > 0 {
		env, err := credentialsEnv(req.Credentials, nil)
		if err != nil {
			return s, err
		}
		s.Env = env
	}
	return s, nil
}

// checkTarget refuses a target that is not a clean absolute path below
// the kubelet directory.
func (m *Mounter) checkTarget(target string) error {
	switch {
	case target == "":
		return invalid("target is missing")
	case !filepath.IsAbs(target) || filepath.Clean(target) != target:
		return invalid("target %q is not a clean absolute path", target)
	case m.opts.KubeletDir != "" && !strings.HasPrefix(target, strings.TrimSuffix(m.opts.KubeletDir, "/")+"/"):
		return invalid("target %s is not below the kubelet directory %s (--kubelet-dir)", target, m.opts.KubeletDir)
	}
	return nil
}

// decodeRequest reads one JSON object of at most maxBody bytes into v,
// refusing unknown fields and anything after it.
func decodeRequest(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalid("request body: %s", oneLine([]byte(err.Error())))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalid("request body: more than one JSON object")
	}
	return nil
}

// fail answers err (a status) and logs it, with the call and its target
// but never the request's body.
func (m *Mounter) fail(w http.ResponseWriter, r *http.Request, target string, err error) {
	st := status.Convert(err)
	msg := strings.Join(strings.Fields(st.Message()), " ")
	m.log.Warn("call failed", "call", r.Method+" "+r.URL.Path, "target", target, "code", st.Code().String(), "err", msg)
	writeJSON(w, httpStatus(st.Code()), errorResponse{Code: st.Code(), Error: msg})
}

// httpStatus is the HTTP status of a failed call of code (the driver
// reads the code from the body; the status is for people with curl).
func httpStatus(code codes.Code) int {
	switch code {
	case codes.InvalidArgument, codes.FailedPrecondition:
		return http.StatusBadRequest
	case codes.NotFound, codes.Unimplemented:
		return http.StatusNotFound
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Aborted, codes.AlreadyExists:
		return http.StatusConflict
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.Canceled, codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
