package csidriver

import (
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// busyTargets serialises the calls on one target path, in the driver and
// in the mounter: a second call while the first runs is Aborted, which
// the caller (kubelet, the driver) retries. The zero value is ready; safe
// for concurrent use.
type busyTargets struct {
	mu   sync.Mutex
	busy map[string]bool // GUARDED_BY(mu): targets with a call in progress
}

// claim marks target busy for the caller, which must call release; a
// target already busy is Aborted.
func (b *busyTargets) claim(target string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.busy[target] {
		return status.Errorf(codes.Aborted, "an operation on target path %s is in progress", target)
	}
	if b.busy == nil {
		b.busy = map[string]bool{}
	}
	b.busy[target] = true
	return nil
}

func (b *busyTargets) release(target string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.busy, target)
}
