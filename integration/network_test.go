package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
)

// timedOp runs op (failing the test if it blocks past limit) and returns
// its error and how long it took.
func timedOp(t *testing.T, limit time.Duration, op func() error) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	err := opResult(t, limit, op)
	return err, time.Since(start)
}

// TestCutNetworkFailsClosedFastAndRecoversAtOnce cuts the link between a
// mount with the default timeouts and the gateway (toxiproxy drops every
// byte, connections stay open: a black hole). A write+close and a cold
// read fail with EIO within the idle timeout plus the breaker's probe (well
// under 30 s); the next calls while the storage is known down fail within
// a few seconds; nothing lands; after healing, the very first call
// succeeds.
func TestCutNetworkFailsClosedFastAndRecoversAtOnce(t *testing.T) {
	harness.RequireFUSE(t)
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	proxy := harness.NewProxy(t, gw.Addr)
	a := harness.Mount(t, gw, bucket, "--endpoint", proxy.Endpoint(), "--token", "17", "--holder", "A",
		"--meta-ttl", "0s", "--attr-ttl", "0s", "--entry-ttl", "0s")
	if err := os.WriteFile(a.Path("f"), []byte("before the cut"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cold := []byte("never read through the mount before")
	if _, err := gw.Client().PutObject(ctx, bucket, "cold", bytes.NewReader(cold), int64(len(cold)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}

	write := func(data string) func() error {
		return func() error { return writeClose(a.Path("f"), os.O_WRONLY|os.O_TRUNC, []byte(data)) }
	}
	readCold := func() error {
		got, err := os.ReadFile(a.Path("cold"))
		if err == nil && !bytes.Equal(got, cold) {
			return fmt.Errorf("read %q", got)
		}
		return err
	}
	// Each round cuts the link, makes a first call (it meets the black
	// hole: EIO after the idle timeout) and a next one (the storage is
	// known down: EIO at once), heals, and makes the first call again.
	for _, round := range []struct {
		name      string
		first     func() error
		next      func() error
		healed    func() error
		unchanged string // f's content that must survive the cut
	}{
		{"write+close", write("during the cut"), write("during the cut, again"), write("after healing"), "before the cut"},
		{"cold read", readCold, readCold, readCold, "after healing"},
	} {
		proxy.Cut(t)
		for _, call := range []struct {
			which string
			op    func() error
			limit time.Duration // a functional bound, with margin
		}{
			{"first", round.first, 30 * time.Second},
			{"next", round.next, 5 * time.Second},
		} {
			err, took := timedOp(t, 90*time.Second, call.op)
			t.Logf("%s %s during the cut: %v after %v", call.which, round.name, err, took.Round(time.Millisecond))
			if !errors.Is(err, syscall.EIO) {
				t.Errorf("%s %s during the cut: err = %v, want EIO", call.which, round.name, err)
			}
			if took > call.limit {
				t.Errorf("%s %s during the cut failed after %v, want within %v", call.which, round.name, took, call.limit)
			}
		}
		if got := readObject(t, gw, bucket, "f"); string(got.body) != round.unchanged {
			t.Fatalf("f changed during the cut: %q, want %q", got.body, round.unchanged)
		}
		proxy.Heal(t)
		if err, took := timedOp(t, 30*time.Second, round.healed); err != nil {
			t.Fatalf("first %s after healing: %v (after %v)", round.name, err, took)
		}
	}
	if got := readObject(t, gw, bucket, "f"); string(got.body) != "after healing" || got.epoch != "17" {
		t.Fatalf("f = %q stamped %q after healing, want the write that close acknowledged, stamped 17", got.body, got.epoch)
	}
}

// TestSlowButMovingUploadThroughTheMountSucceeds limits the link to the
// gateway to 2 MiB/s per connection and writes a file whose upload takes
// several idle timeouts: the bytes keep moving, so close succeeds and the
// object holds every byte.
func TestSlowButMovingUploadThroughTheMountSucceeds(t *testing.T) {
	harness.RequireFUSE(t)
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	proxy := harness.NewProxy(t, gw.Addr)
	const idle = 2 * time.Second
	a := harness.Mount(t, gw, bucket, "--endpoint", proxy.Endpoint(), "--token", "17", "--holder", "A",
		"--s3-timeout", idle.String())
	data := bytes.Repeat([]byte("slow but moving "), (24<<20)/16) // 24 MiB: three 8 MiB parts
	proxy.Slow(t, 2048)
	err, took := timedOp(t, 3*time.Minute, func() error {
		return writeClose(a.Path("big"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, data)
	})
	proxy.Unslow(t)
	if err != nil {
		t.Fatalf("write+close through a slow link: %v (after %v)", err, took)
	}
	if took < 2*idle {
		t.Fatalf("the upload took %v: the link was not slow enough to outlast the idle timeout %v (test setup)", took, idle)
	}
	if got := readObject(t, gw, bucket, "big"); !bytes.Equal(got.body, data) {
		t.Fatalf("big holds %d bytes after close succeeded, want %d", len(got.body), len(data))
	}
}
