package lease

import (
	"time"

	"github.com/fencefs/fencefs/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a Lease's Prometheus metrics, labelled by lease name (a
// process holds few leases); a nil *metrics records nothing. Several
// Leases in one process share the collectors.
type metrics struct {
	name         string
	held         *prometheus.GaugeVec
	token        *prometheus.GaugeVec
	renewed      *prometheus.GaugeVec   // Unix time of the last successful write
	acquisitions *prometheus.CounterVec // by how
	renewals     *prometheus.CounterVec // by outcome
	losses       *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, name string) *metrics {
	if reg == nil {
		return nil
	}
	opts := func(n, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "fencefs", Subsystem: "lease", Name: n, Help: help}
	}
	m := &metrics{
		name: name,
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("held",
			"1 while this process holds the lease (by its own clock), else 0.")), []string{"lease"}),
		token: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("token",
			"The fencing token bound for the lease (0: none yet).")), []string{"lease"}),
		renewed: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("last_renewal_timestamp_seconds",
			"Unix time of the last successful write of the lease object (acquisition, renewal, token record).")), []string{"lease"}),
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts(opts("acquisitions_total",
			"Leases acquired, by how (created, released, expired).")), []string{"lease", "how"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts(opts("renewals_total",
			"Background renewals, by outcome (ok, error: retried, lost).")), []string{"lease", "outcome"}),
		losses: prometheus.NewCounterVec(prometheus.CounterOpts(opts("losses_total",
			"Leases lost (not renewed in time, or taken over).")), []string{"lease"}),
	}
	m.held = promreg.Register(reg, m.held)
	m.token = promreg.Register(reg, m.token)
	m.renewed = promreg.Register(reg, m.renewed)
	m.acquisitions = promreg.Register(reg, m.acquisitions)
	m.renewals = promreg.Register(reg, m.renewals)
	m.losses = promreg.Register(reg, m.losses)
	// Exported from the start: 0 while waiting.
	m.held.WithLabelValues(name).Set(0)
	m.token.WithLabelValues(name).Set(0)
	m.losses.WithLabelValues(name).Add(0)
	return m
}

func (m *metrics) acquired(how string) {
	if m != nil {
		m.acquisitions.WithLabelValues(m.name, how).Inc()
		m.held.WithLabelValues(m.name).Set(1)
	}
}

func (m *metrics) wrote() {
	if m != nil {
		m.renewed.WithLabelValues(m.name).Set(float64(time.Now().UnixNano()) / 1e9)
	}
}

func (m *metrics) renewal(outcome string) {
	if m != nil {
		m.renewals.WithLabelValues(m.name, outcome).Inc()
	}
}

func (m *metrics) setToken(tok uint64) {
	if m != nil {
		m.token.WithLabelValues(m.name).Set(float64(tok))
	}
}

// ended records the end of the holding (lost: a loss, else a release or
// an abandoned acquisition).
func (m *metrics) ended(lost bool) {
	if m != nil {
		m.held.WithLabelValues(m.name).Set(0)
		if lost {
			m.losses.WithLabelValues(m.name).Inc()
		}
	}
}
