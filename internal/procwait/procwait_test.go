package procwait

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestReadyReturnsOnceTheProbeSucceeds(t *testing.T) {
	n := 0
	err := Ready(context.Background(), 5*time.Second, nil, func() bool { n++; return n == 3 })
	if err != nil || n != 3 {
		t.Fatalf("Ready = %v after %d probes, want nil after 3", err, n)
	}
}

func TestReadyReportsAnExitedProcess(t *testing.T) {
	done := make(chan struct{})
	close(done)
	if err := Ready(context.Background(), 5*time.Second, done, func() bool { return false }); !errors.Is(err, ErrExited) {
		t.Fatalf("Ready = %v, want ErrExited", err)
	}
}

func TestReadyTimesOut(t *testing.T) {
	start := time.Now()
	err := Ready(context.Background(), 200*time.Millisecond, nil, func() bool { return false })
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("Ready = %v after %v, want DeadlineExceeded after ~200ms", err, time.Since(start))
	}
}
