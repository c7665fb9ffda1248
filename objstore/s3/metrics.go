package s3

import (
	"time"

	"github.com/fencefs/fencefs/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the package's Prometheus collectors; a nil *metrics records
// nothing. Labels are low-cardinality: op is the S3 request kind
// (check_bucket, head, get, put, create_multipart, upload_part, upload_part_copy,
// complete, abort, delete, list, list_uploads, make_bucket),
// outcome one of ok, not_found, precondition, not_modified, conflict,
// auth, no_bucket, unavailable, invalid, canceled, other.
type metrics struct {
	requests *prometheus.CounterVec   // fencefs_s3_requests_total{op,outcome}
	latency  *prometheus.HistogramVec // fencefs_s3_request_duration_seconds{op}
	retries  *prometheus.CounterVec   // fencefs_s3_retries_total{op}
	bytes    *prometheus.CounterVec   // fencefs_s3_bytes_total{direction="up"|"down"}
	unreach  prometheus.Gauge         // fencefs_s3_unreachable: stores whose breaker is open
	fast     *prometheus.CounterVec   // fencefs_s3_fast_failures_total{op}
}

func newMetrics(reg prometheus.Registerer) *metrics {
	if reg == nil {
		return nil
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencefs_s3_requests_total",
			Help: "S3 requests (attempts) by request kind and outcome.",
		}, []string{"op", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fencefs_s3_request_duration_seconds",
			Help:    "Latency of S3 requests (to response headers for reads) by request kind.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"op"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencefs_s3_retries_total",
			Help: "S3 requests retried after a retryable failure, by request kind.",
		}, []string{"op"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencefs_s3_bytes_total",
			Help: "Object bytes sent (up) and received (down).",
		}, []string{"direction"}),
		unreach: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencefs_s3_unreachable",
			Help: "Stores that currently count the storage as down (no answer; requests fail at once while it is probed).",
		}),
		fast: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencefs_s3_fast_failures_total",
			Help: "S3 requests not sent because the storage was known down and a probe got no answer, by request kind.",
		}, []string{"op"}),
	}
	m.requests = promreg.Register(reg, m.requests)
	m.latency = promreg.Register(reg, m.latency)
	m.retries = promreg.Register(reg, m.retries)
	m.bytes = promreg.Register(reg, m.bytes)
	m.unreach = promreg.Register(reg, m.unreach)
	m.fast = promreg.Register(reg, m.fast)
	return m
}

func (m *metrics) request(op string, err error, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(op, outcome(err)).Inc()
	m.latency.WithLabelValues(op).Observe(d.Seconds())
}

func (m *metrics) retry(op string) {
	if m != nil {
		m.retries.WithLabelValues(op).Inc()
	}
}

func (m *metrics) up(n int64) {
	if m != nil && n > 0 {
		m.bytes.WithLabelValues("up").Add(float64(n))
	}
}

func (m *metrics) down(n int64) {
	if m != nil && n > 0 {
		m.bytes.WithLabelValues("down").Add(float64(n))
	}
}

func (m *metrics) fastFailure(op string) {
	if m != nil {
		m.fast.WithLabelValues(op).Inc()
	}
}

func (m *metrics) reachable(up bool) {
	if m == nil {
		return
	}
	if up {
		m.unreach.Dec()
	} else {
		m.unreach.Inc()
	}
}
