package integration

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"golang.org/x/sys/unix"
)

// TestTakeoverInTheMiddleOfRmRfLandsNoStaleDelete runs rm -rf of a
// directory of 600 files on leader A (deletes acknowledged at unlink and
// sent in the background) and, once A has removed the first 60
// names, binds a newer token on B; B then writes every one of the names.
// Whatever A's rm had done by then, no delete of A's may land after B's
// write: every name ends with B's content. A's rm -rf does not report
// success unless every delete of its landed (its rmdir waits for the
// deletes of the directory's entries and fails as they did), and A's fsync
// of the directory reports a refusal.
func TestTakeoverInTheMiddleOfRmRfLandsNoStaleDelete(t *testing.T) {
	gateway.ForEachServer(t, gateway.ErasureCodedServers, func(t *testing.T, gw *gateway.Gateway) {
		const n = 600
		bucket := gateway.NewBucket(t, gw)
		a := harness.Mount(t, gw, bucket, "--token", "1", "--holder", "A")
		b := harness.Mount(t, gw, bucket, "--holder", "B") // read-only until bound
		bash(t, a.Dir, fmt.Sprintf(`mkdir d; for i in $(seq 1 %d); do echo "A $i" > d/f$i; done`, n))

		rm := exec.Command("rm", "-rf", "d")
		rm.Dir = a.Dir
		rmDone, rmOut := startUntil(t, rm, "A's rm -rf", func() bool {
			ents, _ := os.ReadDir(a.Path("d"))
			return len(ents) <= n-60
		})
		if err := unix.Setxattr(b.Dir, "user.fencefs.token", []byte("2"), 0); err != nil {
			t.Fatalf("B binds 2: %v", err)
		}
		if err := os.MkdirAll(b.Path("d"), 0o755); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= n; i++ {
			if err := os.WriteFile(b.Path("d", fmt.Sprintf("f%d", i)), []byte(fmt.Sprintf("B %d", i)), 0o644); err != nil {
				t.Fatalf("B writes f%d: %v", i, err)
			}
		}

		rmErr := waitDone(t, rmDone, "A's rm -rf")
		syncErr := fsyncDir(a.Dir)
		t.Logf("A's rm -rf: %v; A's fsync of its root: %v\n%s", rmErr, syncErr, lastLines(rmOut.String(), 5))
		if syncErr != nil && !errors.Is(syncErr, syscall.EROFS) {
			t.Errorf("A's fsync of the mount root after the takeover: %v; want success or EROFS", syncErr)
		}

		// Whatever A acknowledged, no delete of A's landed after B wrote.
		missing := 0
		for i := 1; i <= n; i++ {
			key := fmt.Sprintf("d/f%d", i)
			got := readObject(t, gw, bucket, key)
			if want := fmt.Sprintf("B %d", i); !got.exists || string(got.body) != want {
				missing++
				if missing <= 5 {
					t.Errorf("%s = exists %v, tombstone %v, %q stamped %s; want B's %q: a stale delete landed after the takeover",
						key, got.exists, got.tombstone, got.body, got.epoch, want)
				}
			}
		}
		if missing > 0 {
			t.Errorf("%d of %d names lost B's write; A's log:\n%s", missing, n, lastLines(a.Log(), 40))
		}
	})
}

// startUntil starts cmd, its output kept in out, and waits until ready
// holds; the test fails when cmd ends first (what names it), as it would
// then test nothing. done receives cmd's exit.
func startUntil(t *testing.T, cmd *exec.Cmd, what string, ready func() bool) (done <-chan error, out *bytes.Buffer) {
	t.Helper()
	out = &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	go func() { ch <- cmd.Wait() }()
	for !ready() {
		select {
		case err := <-ch:
			t.Fatalf("%s (%v) ended before the takeover: the test would test nothing\n%s", what, err, out.String())
		case <-time.After(2 * time.Millisecond):
		}
	}
	return ch, out
}

// waitDone returns what cmd's done channel (startUntil) receives, failing
// the test after 2 minutes.
func waitDone(t *testing.T, done <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s never returned", what)
		return nil
	}
}

// TestUnlinkAcknowledgedThenRecreatedKeepsTheNewFile runs the nightly
// cleanup shape in a bash loop (rm -f a name, write it again at once),
// which orders every create after the pending delete of its name: the
// bucket ends with every new file, none lost to a delete sent late.
func TestUnlinkAcknowledgedThenRecreatedKeepsTheNewFile(t *testing.T) {
	gateway.ForEachServer(t, gateway.AllServers, func(t *testing.T, gw *gateway.Gateway) {
		bucket := gateway.NewBucket(t, gw)
		a := harness.Mount(t, gw, bucket, "--token", "1")
		bash(t, a.Dir, `for i in $(seq 1 40); do echo "old $i" > f$((i % 8)); done
for r in 1 2 3; do for i in $(seq 0 7); do rm -f f$i; echo "new $r $i" > f$i; done; done`)
		for i := 0; i < 8; i++ {
			key := fmt.Sprintf("f%d", i)
			if got := readObject(t, gw, bucket, key); string(got.body) != fmt.Sprintf("new 3 %d\n", i) {
				t.Errorf("%s = %+v; want the last write", key, got)
			}
		}
	})
}
