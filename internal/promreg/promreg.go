// Package promreg registers Prometheus collectors that several instances
// in one process share (stores, Guards, leases on one Registerer).
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c with reg and returns it; if a collector with the
// same descriptors is already registered (another instance registered
// it), it returns that one instead, so that all instances update the same
// series. On any other registration error c is returned unregistered: its
// updates are then not exported (a programming error, such as a clash of
// names with other labels, that tests catch).
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}

// GaugeValue returns the value of the gauge called name when g exports it
// as exactly one sample (tests and status pages read single gauges so).
func GaugeValue(g prometheus.Gatherer, name string) (float64, bool) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, false
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 && mf.GetMetric()[0].GetGauge() != nil {
			return mf.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}
