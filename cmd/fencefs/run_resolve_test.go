package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencefs/fencefs/lease"
)

// confirmLeader is a lease.Leader whose Confirm answers from a script; a
// loss (an answer wrapping lease.ErrLost) closes Lost as the real ones do.
type confirmLeader struct {
	mu      sync.Mutex
	answers []error // Confirm's answers in turn; the last one repeats
	calls   int
	held    func() bool
	err     error
	lost    chan struct{}
}

func (l *confirmLeader) Name() string          { return "leader" }
func (l *confirmLeader) Token() uint64         { return 7 }
func (l *confirmLeader) Lost() <-chan struct{} { return l.lost }
func (l *confirmLeader) Held() bool            { return l.Err() == nil && l.held() }
func (l *confirmLeader) Release(context.Context) error {
	return nil
}

func (l *confirmLeader) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *confirmLeader) Confirm(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.answers[min(l.calls, len(l.answers)-1)]
	l.calls++
	if errors.Is(a, lease.ErrLost) && l.err == nil {
		l.err = a
		close(l.lost)
	}
	return a
}

func TestRunResolvesTheLeadershipWhenTheCommandEndsFirst(t *testing.T) {
	lostByCoordinator := fmt.Errorf("%w: the leader znode /e/n is gone", lease.ErrLost)
	unreachable := errors.New("dial tcp 127.0.0.1:2181: connection refused")
	tests := []struct {
		name     string
		answers  []error
		heldFor  time.Duration // Held turns false this long after the start
		wantLost string        // "" = confirmed
	}{
		{"confirmed at once keeps the command's status", []error{nil}, time.Hour, ""},
		{"confirmed once the coordinator answers again", []error{unreachable, unreachable, nil}, time.Hour, ""},
		{"the coordinator says it is lost", []error{lostByCoordinator}, time.Hour, "the leader znode /e/n is gone"},
		{"never confirmed before its own deadline counts as lost", []error{unreachable}, 500 * time.Millisecond, "it could not be confirmed after the command ended"},
	}
	env := &adminEnv{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			l := &confirmLeader{answers: tc.answers, lost: make(chan struct{}), held: func() bool { return time.Since(start) < tc.heldFor }}
			err := resolveLeadership(env, runOptions{lease: "leader", ttl: 2 * time.Second}, l, t.TempDir())
			switch {
			case tc.wantLost == "" && err != nil:
				t.Fatalf("resolveLeadership = %v, want confirmed", err)
			case tc.wantLost != "" && (!errors.Is(err, lease.ErrLost) || !strings.Contains(err.Error(), tc.wantLost)):
				t.Fatalf("resolveLeadership = %v, want a loss saying %q", err, tc.wantLost)
			}
		})
	}
}
