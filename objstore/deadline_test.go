package objstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

func TestAnOperationSharesWhatItsRequestsFound(t *testing.T) {
	soon := time.Now().Add(time.Minute)
	for _, tc := range []struct {
		name         string
		make         func() (op, inner context.Context)
		wantDeadline bool
	}{
		{"operation", func() (context.Context, context.Context) {
			op := objstore.WithOperation(context.Background())
			return op, op
		}, false},
		{"retry deadline inside an operation", func() (context.Context, context.Context) {
			op := objstore.WithOperation(context.Background())
			return op, objstore.WithRetryDeadline(op, soon)
		}, true},
		{"operation inside a retry deadline", func() (context.Context, context.Context) {
			op := objstore.WithRetryDeadline(context.Background(), soon)
			return op, objstore.WithOperation(op)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op, inner := tc.make()
			if _, ok := objstore.RetryDeadline(inner); ok != tc.wantDeadline {
				t.Errorf("retry deadline set = %v, want %v", ok, tc.wantDeadline)
			}
			if objstore.FoundUnreachable(op) {
				t.Fatal("a new operation found the storage unreachable")
			}
			objstore.MarkUnreachable(inner)
			if !objstore.FoundUnreachable(op) {
				t.Error("what a request found is not shared with its operation")
			}
		})
	}
	if objstore.FoundUnreachable(objstore.WithOperation(context.Background())) {
		t.Error("a new operation starts knowing what another found")
	}
}

func TestUnwaitedMarksOnlyItsContext(t *testing.T) {
	ctx := context.Background()
	if objstore.IsUnwaited(ctx) || objstore.IsUnwaited(objstore.WithOperation(ctx)) {
		t.Error("a plain context is unwaited")
	}
	if !objstore.IsUnwaited(objstore.WithOperation(objstore.Unwaited(ctx))) {
		t.Error("Unwaited is lost by a derived context")
	}
}

func TestEachRetryBudgetInsideAnOperationHasItsOwnOutcome(t *testing.T) {
	op := objstore.WithOperation(context.Background())
	first := objstore.WithRetryDeadline(op, time.Now().Add(time.Minute))
	objstore.MarkUncertainAttempt(first)
	second := objstore.WithRetryDeadline(op, time.Now().Add(time.Minute))
	if objstore.HadUncertainAttempt(second) {
		t.Error("a mutation inherits the uncertain attempt of an earlier one of the same FUSE call")
	}
	nested := objstore.WithRetryDeadline(first, time.Now().Add(time.Second))
	if !objstore.HadUncertainAttempt(nested) {
		t.Error("a nested retry budget lost its operation's uncertain attempt")
	}
}

func TestACleanupIsAnOperationOfItsOwn(t *testing.T) {
	type key struct{}
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), key{}, "kept"))
	failed := objstore.Unwaited(objstore.WithRetryDeadline(parent, time.Now().Add(-time.Second)))
	objstore.MarkUnreachable(failed)
	objstore.MarkUncertainAttempt(failed)
	cancelParent()

	c, cancel := objstore.Cleanup(failed, time.Minute)
	defer cancel()
	if c.Err() != nil {
		t.Fatalf("the cleanup is cancelled with the failed operation: %v", c.Err())
	}
	if d, ok := objstore.RetryDeadline(c); !ok || time.Until(d) < 50*time.Second {
		t.Errorf("cleanup retry deadline %v (set %v), want about a minute from now", d, ok)
	}
	if dl, ok := c.Deadline(); !ok || time.Until(dl) > time.Minute {
		t.Errorf("cleanup deadline %v (set %v), want at most a minute", dl, ok)
	}
	if objstore.FoundUnreachable(c) || objstore.HadUncertainAttempt(c) || objstore.IsUnwaited(c) {
		t.Errorf("the cleanup inherits the failed operation's findings: unreachable %v, uncertain %v, unwaited %v",
			objstore.FoundUnreachable(c), objstore.HadUncertainAttempt(c), objstore.IsUnwaited(c))
	}
	if c.Value(key{}) != "kept" {
		t.Error("the cleanup lost the caller's values")
	}
	objstore.MarkUnreachable(c)
	if !objstore.FoundUnreachable(c) {
		t.Error("the cleanup is no operation: MarkUnreachable is lost")
	}
}
