package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestSecondRegistrationSharesTheFirstCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	newVec := func() *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"l"})
	}
	a := Register(reg, newVec())
	b := Register(reg, newVec())
	if a != b {
		t.Fatal("the second registration returned a collector of its own")
	}
	b.WithLabelValues("v").Inc()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetMetric()[0].GetCounter().GetValue() != 1 {
		t.Errorf("gathered %v, want x_total{l=v} 1", mfs)
	}
}

func TestGaugeValueReadsOneSampleGaugesOnly(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "one"})
	g.Set(7)
	v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "many"}, []string{"l"})
	v.WithLabelValues("a").Set(1)
	v.WithLabelValues("b").Set(2)
	reg.MustRegister(g, v)
	if got, ok := GaugeValue(reg, "one"); !ok || got != 7 {
		t.Errorf("GaugeValue(one) = %v, %v; want 7, true", got, ok)
	}
	for _, name := range []string{"many", "absent"} {
		if _, ok := GaugeValue(reg, name); ok {
			t.Errorf("GaugeValue(%s) found a single sample", name)
		}
	}
}
