package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// listenMetrics binds addr now (so that a busy port fails the command
// before it does anything) and prepares /metrics (reg) and /healthz (the
// status code and one-line body health returns). Serving starts with
// serve.
func listenMetrics(addr string, reg *prometheus.Registry, health func() (int, string)) (*metricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics.addr: cannot listen on %s: %v", addr, unwrapOpErr(err))
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		code, body := health()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		fmt.Fprintln(w, body)
	})
	return &metricsServer{ln: ln, srv: &http.Server{Handler: mux}}, nil
}

// healthz is 200 while the kernel mount is up (whatever the fencing state:
// a fenced mount still serves reads), else 503. The body names the state.
func healthz(m *mountRun) (int, string) {
	if m == nil || !m.Mounted() {
		return http.StatusServiceUnavailable, "not mounted"
	}
	g := m.guardSnapshot()
	if g == nil {
		return http.StatusServiceUnavailable, "not mounted"
	}
	st := g.Status()
	body := fmt.Sprintf("ok state=%s token=%d epoch=%d", st.State, st.Token, st.Epoch)
	if st.Reason != "" {
		body += " reason=" + fmt.Sprintf("%q", st.Reason)
	}
	return http.StatusOK, body
}

func (m *mountRun) guardSnapshot() *fencing.Guard {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.mounted {
		return nil
	}
	return m.guard
}

func (s *metricsServer) serve(log *slog.Logger) {
	go func() {
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
}

func (s *metricsServer) close(ctx context.Context) {
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	_ = s.ln.Close()
}

func unwrapOpErr(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err
	}
	return err
}

// buildInfo is fencefs_build_info{version,goversion} 1.
func buildInfo() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "fencefs_build_info",
		Help:        "Build of the running fencefs binary (always 1).",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}

// mountUp is fencefs_mount_up: 1 while the kernel mount is up. The fencing
// state, token and epoch are the fencing package's fencefs_fencing_* gauges.
func mountUp(run *mountRun) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fencefs_mount_up",
		Help: "1 while the kernel mount is up, else 0.",
	}, func() float64 {
		if run.Mounted() {
			return 1
		}
		return 0
	})
}

// registerProbeMetrics exports the capability probe's result as
// fencefs_probe_check{check} (1 passed, 0 failed). Registration errors (a
// second probe in the same registry) are ignored.
func registerProbeMetrics(reg prometheus.Registerer, caps objstore.Capabilities) {
	if reg == nil {
		return
	}
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fencefs_probe_check",
		Help: "Result of each storage capability check at mount (1 passed, 0 failed).",
	}, []string{"check"})
	for _, c := range caps.Checks() {
		v := 0.0
		if c.OK {
			v = 1
		}
		g.WithLabelValues(string(c.Name)).Set(v)
	}
	_ = reg.Register(g)
}
