package lease_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/lease"
	"github.com/fencefs/fencefs/objstore/memstore"
)

// A leader elected through a lease writes through a fencing.Guard bound to
// the lease's token. Use objstore/s3 for a real bucket; memstore keeps the
// example self-contained.
func Example() {
	ctx := context.Background()
	store := memstore.New()
	guard, err := fencing.New(store, fencing.Config{Mode: fencing.ModeStrict})
	if err != nil {
		panic(err)
	}
	defer guard.Close(ctx)

	// Blocks until the lease is ours, then binds the register's next epoch.
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	l, err := lease.Acquire(waitCtx, store, "leader", lease.Options{TTL: 15 * time.Second, Guard: guard})
	if err != nil {
		panic(err)
	}
	defer l.Release(ctx)
	fmt.Println("leader with token", l.Token())

	// Work while the lease lasts. Even if this process stalls past the TTL
	// and a new leader takes over, the Guard's writes are then refused by
	// the storage (fencing.ErrFenced).
	select {
	case <-l.Lost():
		fmt.Println("lost:", l.Err())
		return
	default:
	}
	body := "state written by the leader"
	if _, err := guard.Put(ctx, "state", strings.NewReader(body), int64(len(body)), fencing.Version{}, nil); err != nil {
		fmt.Println("write refused:", err)
		return
	}
	fmt.Println("wrote state")
	// Output:
	// leader with token 1
	// wrote state
}
