package fencing

import (
	"errors"

	"github.com/fencefs/fencefs/internal/promreg"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the package's Prometheus metrics; a nil *metrics records
// nothing. Labels are low-cardinality: op, outcome, state.
type metrics struct {
	token       prometheus.Gauge
	epochSeen   prometheus.Gauge
	state       *prometheus.GaugeVec
	refusals    *prometheus.CounterVec // fenced refusals by op
	outcomes    *prometheus.CounterVec // commit outcomes by op and outcome
	validations *prometheus.CounterVec // by result
	binds       *prometheus.CounterVec // Bind calls by result
	sweeps      prometheus.Counter
	sweptIntent prometheus.Counter
	sweptKeys   prometheus.Counter
	tombs       prometheus.Gauge   // known tombstones (sum over Guards)
	tombAge     prometheus.Gauge   // age of the oldest known tombstone
	tombNext    prometheus.Gauge   // seconds until the next known tombstone goes; -1 never by itself
	tombReaped  prometheus.Counter // tombstones removed by the reaper
}

func newMetrics(reg prometheus.Registerer) *metrics {
	if reg == nil {
		return nil
	}
	m := &metrics{
		token: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "fencefs", Subsystem: "fencing",
			Name: "token", Help: "The fencing token this mount is bound to (0 when unbound)."}),
		epochSeen: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "fencefs", Subsystem: "fencing",
			Name: "epoch_seen", Help: "The newest epoch seen in the bucket's register."}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "fencefs", Subsystem: "fencing",
			Name: "state", Help: "Number of mounts of this process in each fencing state (a single mount shows 1 for its current state)."}, []string{"state"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "fencefs", Subsystem: "fencing",
			Name: "fenced_refusals_total", Help: "Mutations refused because the mount is fenced, by operation."}, []string{"op"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "fencefs", Subsystem: "fencing",
			Name: "commit_outcomes_total", Help: "Outcomes of conditional commits, by operation and outcome."}, []string{"op", "outcome"}),
		validations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "fencefs", Subsystem: "fencing",
			Name: "validations_total", Help: "Register validations, by result (not_modified, changed, fenced, error)."}, []string{"result"}),
		binds: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "fencefs", Subsystem: "fencing",
			Name: "binds_total", Help: "Token binds (at mount, by the token xattr or file, by fencefs run), by result (ok, bad_token, fenced, error)."}, []string{"result"}),
		sweeps: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "fencefs", Subsystem: "fencing",
			Name: "sweeps_total", Help: "Takeover sweeps completed."}),
		sweptIntent: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "fencefs", Subsystem: "fencing",
			Name: "swept_intents_total", Help: "Intents of older epochs processed by takeover sweeps."}),
		sweptKeys: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "fencefs", Subsystem: "fencing",
			Name: "swept_keys_total", Help: "Keys rewritten or tombstoned by takeover sweeps."}),
		tombs: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "fencefs", Subsystem: "fencing",
			Name: "tombstones", Help: "Tombstones in the bucket this mount knows of (written by its sweeps and deletes, or adopted from an earlier mount's ledger) and has not removed yet."}),
		tombAge: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "fencefs", Subsystem: "fencing",
			Name: "tombstone_oldest_age_seconds", Help: "Age of the oldest tombstone this mount knows of (0 when none)."}),
		tombNext: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "fencefs", Subsystem: "fencing",
			Name: "tombstone_next_removal_seconds", Help: "Seconds until the first tombstone this mount knows of is due to go (by its DELETE or the bucket lifecycle rule; 0 when none or due now); -1 when they stay until fencefs gc."}),
		tombReaped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "fencefs", Subsystem: "fencing",
			Name: "tombstones_removed_total", Help: "Tombstones removed once older than fence.signed_request_validity: by the mount's DELETE, or seen gone by the bucket lifecycle rule."}),
	}
	m.token = promreg.Register(reg, m.token)
	m.epochSeen = promreg.Register(reg, m.epochSeen)
	m.state = promreg.Register(reg, m.state)
	m.refusals = promreg.Register(reg, m.refusals)
	m.outcomes = promreg.Register(reg, m.outcomes)
	m.validations = promreg.Register(reg, m.validations)
	m.binds = promreg.Register(reg, m.binds)
	m.sweeps = promreg.Register(reg, m.sweeps)
	m.sweptIntent = promreg.Register(reg, m.sweptIntent)
	m.sweptKeys = promreg.Register(reg, m.sweptKeys)
	m.tombs = promreg.Register(reg, m.tombs)
	m.tombAge = promreg.Register(reg, m.tombAge)
	m.tombNext = promreg.Register(reg, m.tombNext)
	m.tombReaped = promreg.Register(reg, m.tombReaped)
	for _, st := range []State{StateUnbound, StateSweeping, StateActive, StateFenced, StateOff} {
		m.state.WithLabelValues(string(st)).Add(0) // every state is exported, 0 when empty
	}
	for _, r := range []string{"ok", "bad_token", "fenced", "error"} {
		m.binds.WithLabelValues(r).Add(0) // an alert on failures sees 0 before the first
	}
	return m
}

// moveState moves one Guard's count in the state gauge from one state to
// another; "" stands for none (a new or a closed Guard). Safe for
// concurrent use (gauge updates are atomic).
func (m *metrics) moveState(from, to State) {
	if m == nil || from == to {
		return
	}
	if from != "" {
		m.state.WithLabelValues(string(from)).Dec()
	}
	if to != "" {
		m.state.WithLabelValues(string(to)).Inc()
	}
}

// setTokens records the token and the newest epoch seen. With several
// Guards in one process the last report wins.
func (m *metrics) setTokens(token, epoch uint64) {
	if m == nil {
		return
	}
	m.token.Set(float64(token))
	m.epochSeen.Set(float64(epoch))
}

func (m *metrics) refused(op string) {
	if m != nil {
		m.refusals.WithLabelValues(op).Inc()
	}
}

func (m *metrics) outcome(op, outcome string) {
	if m != nil {
		m.outcomes.WithLabelValues(op, outcome).Inc()
	}
}

// bound counts one Bind by its error's class.
func (m *metrics) bound(err error) {
	if m == nil {
		return
	}
	result := "error"
	switch {
	case err == nil:
		result = "ok"
	case errors.Is(err, ErrBadToken):
		result = "bad_token"
	case errors.Is(err, ErrFenced):
		result = "fenced"
	}
	m.binds.WithLabelValues(result).Inc()
}

func (m *metrics) validation(result string) {
	if m != nil {
		m.validations.WithLabelValues(result).Inc()
	}
}

func (m *metrics) swept(intents, keys int) {
	if m != nil {
		m.sweeps.Inc()
		m.sweptIntent.Add(float64(intents))
		m.sweptKeys.Add(float64(keys))
	}
}

// tombstones adds delta to the known-tombstone gauge and sets the oldest
// age (with several Guards in one process the last report wins).
func (m *metrics) tombstones(delta int, oldestAge, nextRemoval float64) {
	if m != nil {
		m.tombs.Add(float64(delta))
		m.tombAge.Set(oldestAge)
		m.tombNext.Set(nextRemoval)
	}
}

func (m *metrics) tombstonesRemoved(n int) {
	if m != nil {
		m.tombReaped.Add(float64(n))
	}
}
