package lease_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/lease"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"
)

// A program that elects itself in etcd and writes through a fencefs mount
// of the bucket: once elected, it binds its token (the leader key's create
// revision) on the mount, as `fencefs run --etcd` does. If it stalls past
// the TTL and another instance is elected, the newer token makes the
// storage refuse this one's writes (EROFS), whatever this process
// believes. (Not run: it needs an etcd and a mount; TestRunEtcd* in
// integration/ run the same steps through the real binary.)
func ExampleCampaign() {
	ctx := context.Background()
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	const mnt = "/mnt/data" // fencefs mount BUCKET /mnt/data (no --token)
	waitCtx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	e, err := lease.Campaign(waitCtx, client, "ingest", lease.ElectionOptions{
		TTL: 15 * time.Second,
		Bind: func(ctx context.Context, token uint64) error {
			// Blocks while the mount binds the epoch and sweeps older
			// ones. One token source per fence domain: a bucket that
			// was used with --token auto or the S3 lease may already be
			// at a higher epoch (lease.CheckTokenSource tells).
			return unix.Setxattr(mnt, "user.fencefs.token", []byte(strconv.FormatUint(token, 10)), 0)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Release(ctx) // resign: the next candidate wins at once

	for i := 0; ; i++ {
		select {
		case <-e.Lost(): // the session ended: stop working
			fmt.Println(e.Err())
			return
		case <-time.After(time.Second):
		}
		err := os.WriteFile(filepath.Join(mnt, "state"), []byte(strconv.Itoa(i)), 0o644)
		if errors.Is(err, syscall.EROFS) {
			fmt.Println("a newer leader took over; this one is fenced")
			return
		}
	}
}
