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
