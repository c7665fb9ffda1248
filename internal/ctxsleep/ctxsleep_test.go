package ctxsleep_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencefs/fencefs/internal/ctxsleep"
)

func TestSleepReturnsNilAfterTheFullDuration(t *testing.T) {
	const d = 20 * time.Millisecond
	start := time.Now()
	if err := ctxsleep.Sleep(context.Background(), d); err != nil {
		t.Fatalf("Sleep = %v, want nil", err)
	}
	if got := time.Since(start); got < d {
		t.Fatalf("Sleep returned after %v, before %v", got, d)
	}
}

func TestSleepEndsWithTheContextsError(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		d    time.Duration
		want error
	}{
		{"already cancelled, long sleep", cancelled, time.Hour, context.Canceled},
		{"already cancelled, zero sleep", cancelled, 0, context.Canceled},
		{"deadline during the sleep", expired, time.Hour, context.DeadlineExceeded},
		{"zero sleep, live context", context.Background(), 0, nil},
		{"negative sleep, live context", context.Background(), -time.Second, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := ctxsleep.Sleep(tc.ctx, tc.d); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("Sleep = %v, want %v", err, tc.want)
			}
		})
	}
}
