package fencing

import (
	"sync"
	"testing"
	"time"
)

// TestABatchRunKnowsWhetherACallerWaitsForIt checks batchRun.waited: a run
// that only background work joined may give up early; one that a waiting
// caller joined — before it started, or while it runs unfixed — may not.
func TestABatchRunKnowsWhetherACallerWaitsForIt(t *testing.T) {
	for _, tc := range []struct {
		name       string
		lateWaited bool // a waiting caller joins while the run is unfixed
		wantWaited bool
	}{
		{"background only", false, false},
		{"a waiting caller joined the running run", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b batch[bool]
			var wg sync.WaitGroup
			started, release := make(chan struct{}), make(chan struct{})
			op := func(r *batchRun[bool]) bool {
				close(started)
				<-release
				r.fixed.Store(true)
				return r.waited.Load()
			}
			r := b.joinAs(&wg, true, false, time.Time{}, op)
			<-started
			if tc.lateWaited {
				if got := b.joinAs(&wg, true, true, time.Now(), op); got != r {
					t.Fatal("a caller did not join the unfixed run")
				}
			}
			close(release)
			waited, _ := r.wait(t.Context())
			wg.Wait()
			if waited != tc.wantWaited {
				t.Errorf("waited = %v, want %v", waited, tc.wantWaited)
			}
		})
	}
	var b batch[bool]
	var wg sync.WaitGroup
	r := b.joinAs(&wg, false, true, time.Now(), func(r *batchRun[bool]) bool { return r.waited.Load() })
	if waited, _ := r.wait(t.Context()); !waited {
		t.Error("a run a waiting caller started is not waited for")
	}
	wg.Wait()
}
