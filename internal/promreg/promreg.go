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
