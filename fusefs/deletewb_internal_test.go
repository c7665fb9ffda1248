package fusefs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore/memstore"
)

type recordingDir struct {
	mu     sync.Mutex
	failed []string
}

func (d *recordingDir) deleteFailed(key string) {
	d.mu.Lock()
	d.failed = append(d.failed, key)
	d.mu.Unlock()
}

// TestDeleteWritebackSendsAtMostItsSendersAtOnceAndReportsFailures queues
// many deletes behind a slow store: no more than the senders are in flight
// at once, the waits see every outcome, a failed delete is reported to
// its directory and to failed, and nothing stays pending.
func TestDeleteWritebackSendsAtMostItsSendersAtOnceAndReportsFailures(t *testing.T) {
	const senders, n = 4, 200
	var inFlight, most atomic.Int64
	refuse := errors.New("refused")
	var failures atomic.Int64
	w := newDeleteWriteback(senders, func(key string, _ fencing.Version, _ fencing.Binding) error {
		cur := inFlight.Add(1)
		for {
			m := most.Load()
			if cur <= m || most.CompareAndSwap(m, cur) {
				break
			}
		}
		time.Sleep(time.Millisecond)
		inFlight.Add(-1)
		if key == "a/f8" {
			return refuse
		}
		return nil
	}, func(string, error) { failures.Add(1) })
	a, b := &recordingDir{}, &recordingDir{}
	ctx := context.Background()
	for i := range n {
		dir, prefix := a, "a/"
		if i%2 == 1 {
			dir, prefix = b, "b/"
		}
		if err := w.add(ctx, dir, fmt.Sprintf("%sf%d", prefix, i), fencing.Version{ETag: "e"}); err != nil {
			t.Fatal(err)
		}
	}
	if w.count() == 0 {
		t.Fatal("nothing pending right after the adds")
	}
	if err := w.waitDir(ctx, "b/"); err != nil {
		t.Errorf("waitDir(b) = %v, want nil: no delete of b failed", err)
	}
	// A wait reports the failures of the deletes it waited for; one that
	// ended before is the directory's to report (deleteFailed).
	if err := w.waitPrefix(ctx, "a/"); err != nil && !errors.Is(err, refuse) {
		t.Errorf("waitPrefix(a/) = %v, want nil or the refusal", err)
	}
	if err := w.waitAll(ctx); err != nil && !errors.Is(err, refuse) {
		t.Errorf("waitAll = %v, want nil or the refusal", err)
	}
	if got := most.Load(); got > senders {
		t.Errorf("%d deletes in flight at once, want at most %d", got, senders)
	}
	if failures.Load() != 1 || len(a.failed) != 1 || a.failed[0] != "a/f8" || len(b.failed) != 0 {
		t.Errorf("failures %d, a %v, b %v; want a/f8 once, to a", failures.Load(), a.failed, b.failed)
	}
	if c := w.count(); c != 0 || w.isPending("a/f0") {
		t.Errorf("%d still pending after every wait", c)
	}
}

// TestDeleteWritebackSendsTheDeletesOfOneNameInOrder: a second delete of a
// name whose first is still pending goes out after it, never beside it.
func TestDeleteWritebackSendsTheDeletesOfOneNameInOrder(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var order []string
	w := newDeleteWriteback(4, func(key string, base fencing.Version, _ fencing.Binding) error {
		if base.ETag == "first" {
			<-release
		}
		mu.Lock()
		order = append(order, base.ETag)
		mu.Unlock()
		return nil
	}, func(string, error) {})
	ctx := context.Background()
	d := &recordingDir{}
	for _, etag := range []string{"first", "second"} {
		if err := w.add(ctx, d, "k", fencing.Version{ETag: etag}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond) // the second would overtake now if it could
	close(release)
	if err := w.wait(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := w.waitAll(ctx); err != nil {
		t.Fatal(err)
	}
	if len(order) != 2 || order[0] != "first" {
		t.Errorf("sent %v, want first then second", order)
	}
}

// TestDeleteWritebackSendsEachDeleteUnderTheBindingUnlinkAcknowledgedItIn:
// a delete is sent under the binding its unlink was made under (held.go),
// not the one current when it goes out.
func TestDeleteWritebackSendsEachDeleteUnderTheBindingUnlinkAcknowledgedItIn(t *testing.T) {
	ctx := context.Background()
	g, err := fencing.New(memstore.New(), fencing.Config{Holder: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Bind(ctx, 1); err != nil {
		t.Fatal(err)
	}
	unlinked := g.Binding()
	got := make(chan fencing.Binding, 1)
	w := newDeleteWriteback(1, func(_ string, _ fencing.Version, b fencing.Binding) error {
		got <- b
		return nil
	}, func(string, error) {})
	if err := w.add(fencing.Under(ctx, unlinked), &recordingDir{}, "k", fencing.Version{ETag: "e"}); err != nil {
		t.Fatal(err)
	}
	if b := <-got; b != unlinked {
		t.Fatalf("sent under %+v, want the unlink's %+v", b, unlinked)
	}
}
