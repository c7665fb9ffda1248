package integration

// Leadership that moves back and forth: a failback while an application
// keeps its log open, a status file rewritten with the same bytes, an old
// leader frozen in the middle of a commit, and a hundred takeovers of one
// small key whose content cycles through two byte strings while an old
// writer's commit is held back from the first epoch — on the gateway and
// on MinIO (whose deletes are tombstones). Every bind must return at once (the ETag-ABA record must never make a takeover wait), and no
// stale write may land.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"golang.org/x/sys/unix"
)

// bindWithin binds token on fs and fails the test if the bind takes longer
// than limit (a functional bound, far above a bind's normal cost and far
// below the validity window a stalled bind would wait out).
func bindWithin(t *testing.T, fs *harness.FS, token uint64, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		done <- unix.Setxattr(fs.Dir, "user.fencefs.token", []byte(strconv.FormatUint(token, 10)), 0)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("bind token %d on %s: %v; its log:\n%s", token, fs.Dir, err, fs.Log())
		}
	case <-time.After(limit):
		t.Fatalf("binding token %d on %s did not return within %v; its log:\n%s", token, fs.Dir, limit, fs.Log())
	}
	return time.Since(start)
}

// noStall fails the test if a mount's log shows a takeover or commit that
// waited for the ETag-ABA record, or a record that overflowed.
func noStall(t *testing.T, mounts ...*harness.FS) {
	t.Helper()
	for _, fs := range mounts {
		log := fs.Log()
		for _, bad := range []string{"waiting for an ETag-ABA record", "record full"} {
			if strings.Contains(log, bad) {
				t.Errorf("%s logged %q:\n%s", fs.Dir, bad, log)
			}
		}
	}
}

// appendOpen opens path for appending and writes line, keeping the file
// open (and dirty) as an application holding its log does.
func appendOpen(t *testing.T, path, line string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("open %s for appending: %v", path, err)
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		t.Fatalf("append to %s: %v", path, err)
	}
	return f
}

const bindLimit = 20 * time.Second

// TestFailbackWhileAnApplicationKeepsItsLogOpenBindsAtOnce: mount B leads
// (token 2) with app.log open and an append not yet closed; C takes over
// (token 3) and its application appends to app.log, again without
// closing; leadership returns to B (token 4), then to C (token 5). Each
// bind returns at once; the appends of the fenced side fail at close with
// EROFS and never reach the bucket, also once B leads again (B's held
// append is refused at its next write, and the log goes on from the
// stored version); the leader's land.
func TestFailbackWhileAnApplicationKeepsItsLogOpenBindsAtOnce(t *testing.T) {
	gateway.ForEachServer(t, gateway.AllServers, func(t *testing.T, gw *gateway.Gateway) {
		bucket := gateway.NewBucket(t, gw)
		b := harness.Mount(t, gw, bucket, "--token", "2", "--holder", "B")
		c := harness.Mount(t, gw, bucket, "--holder", "C", "--meta-ttl", "0s", "--attr-ttl", "0s", "--entry-ttl", "0s")
		if err := os.WriteFile(b.Path("app.log"), []byte("started\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		bLog := appendOpen(t, b.Path("app.log"), "B epoch 2 pending\n")
		t.Logf("C takes over in %v", bindWithin(t, c, 3, bindLimit))
		cLog := appendOpen(t, c.Path("app.log"), "C epoch 3 pending\n")
		t.Logf("B fails back in %v", bindWithin(t, b, 4, bindLimit))
		if err := cLog.Close(); !errors.Is(err, syscall.EROFS) {
			t.Errorf("the fenced C's close of app.log = %v, want EROFS", err)
		}
		// B's append was made under epoch 2, and C's epoch 3 was active
		// since: it is refused at B's close although B leads again (issue
		// 39), and what the log writes next starts from the stored version.
		if _, err := bLog.WriteString("B epoch 4 refused with the held append\n"); !errors.Is(err, syscall.EROFS) {
			t.Errorf("B's first append after failing back = %v, want EROFS (it meets the refused append)", err)
		}
		if _, err := bLog.WriteString("B epoch 4\n"); err != nil {
			t.Fatalf("B keeps appending after failing back: %v; its log:\n%s", err, b.Log())
		}
		if err := bLog.Close(); err != nil {
			t.Fatalf("B's close of app.log after failing back: %v; its log:\n%s", err, b.Log())
		}
		bLog = appendOpen(t, b.Path("app.log"), "B epoch 4 pending\n")
		t.Logf("C takes over again in %v", bindWithin(t, c, 5, bindLimit))
		if err := bLog.Close(); !errors.Is(err, syscall.EROFS) {
			t.Errorf("the fenced B's close of app.log = %v, want EROFS", err)
		}
		if err := writeClose(c.Path("app.log"), os.O_WRONLY|os.O_APPEND, []byte("C epoch 5\n")); err != nil {
			t.Fatalf("C appends as leader: %v", err)
		}
		want := "started\nB epoch 4\nC epoch 5\n"
		if got := readObject(t, gw, bucket, "app.log"); string(got.body) != want || got.epoch != "5" {
			t.Fatalf("app.log in the bucket = %q (epoch %s), want %q (epoch 5)", got.body, got.epoch, want)
		}
		noStall(t, b, c)
	})
}

// TestFlappingOverAFileRewrittenWithTheSameBytesBindsAtOnce: two mounts
// take turns 30 times; each new leader rewrites status.txt with the same
// bytes while the other still has it open and dirty with the same bytes.
func TestFlappingOverAFileRewrittenWithTheSameBytesBindsAtOnce(t *testing.T) {
	gateway.ForEachServer(t, gateway.SingleDriveServers, func(t *testing.T, gw *gateway.Gateway) {
		bucket := gateway.NewBucket(t, gw)
		noCache := []string{"--meta-ttl", "0s", "--attr-ttl", "0s", "--entry-ttl", "0s"}
		m := [2]*harness.FS{
			harness.Mount(t, gw, bucket, append([]string{"--token", "1", "--holder", "A"}, noCache...)...),
			harness.Mount(t, gw, bucket, append([]string{"--holder", "B"}, noCache...)...),
		}
		const status = "state: ok\n"
		if err := os.WriteFile(m[0].Path("status.txt"), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
		var slowest time.Duration
		for round := 0; round < 30; round++ {
			old, next := m[round%2], m[(round+1)%2]
			f, err := os.OpenFile(old.Path("status.txt"), os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				t.Fatalf("round %d: the old leader opens status.txt: %v", round, err)
			}
			if _, err := f.WriteString(status); err != nil {
				t.Fatal(err)
			}
			if d := bindWithin(t, next, uint64(round+2), bindLimit); d > slowest {
				slowest = d
			}
			if err := f.Close(); err != nil && !errors.Is(err, syscall.EROFS) {
				t.Errorf("round %d: the fenced leader's close = %v, want EROFS or success", round, err)
			}
			if err := writeClose(next.Path("status.txt"), os.O_WRONLY|os.O_TRUNC, []byte(status)); err != nil {
				t.Fatalf("round %d: the new leader rewrites status.txt: %v; its log:\n%s", round, err, next.Log())
			}
		}
		t.Logf("slowest bind %v", slowest)
		if got := readObject(t, gw, bucket, "status.txt"); string(got.body) != status || got.epoch != "31" {
			t.Fatalf("status.txt = %q (epoch %s), want %q (epoch 31)", got.body, got.epoch, status)
		}
		noStall(t, m[0], m[1])
	})
}

// TestHundredTakeoversOfOneSmallKeyWithAHeldCommitNeverStall: writer W
// (token 1, the failpoint binary) is held inside its commit of log.txt,
// after its validation; then two mounts take turns 100 times, each new
// leader writing log.txt with one of two byte strings in turn while the
// old leader still has it open and dirty. Every bind returns at once; when
// W is finally released its commit is refused (EROFS) and never lands.
func TestHundredTakeoversOfOneSmallKeyWithAHeldCommitNeverStall(t *testing.T) {
	gateway.ForEachServer(t, gateway.SingleDriveServers, func(t *testing.T, gw *gateway.Gateway) {
		bucket := gateway.NewBucket(t, gw)
		pause := filepath.Join(t.TempDir(), "pause")
		noCache := []string{"--meta-ttl", "0s", "--attr-ttl", "0s", "--entry-ttl", "0s"}
		w := harness.MountWith(t, gw, bucket, harness.Options{Failpoints: true,
			Env: []string{"FENCEFS_FAILPOINTS=after-validate=pause-file:" + pause}},
			append([]string{"--token", "1", "--holder", "W"}, noCache...)...)
		contents := []string{"X: the first of two byte strings\n", "Y: the second one\n"}
		if err := os.WriteFile(w.Path("log.txt"), []byte(contents[0]), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pause, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		held := make(chan error, 1)
		go func() {
			held <- writeClose(w.Path("log.txt"), os.O_WRONLY|os.O_TRUNC, []byte("W: stale, held since epoch 1\n"))
		}()
		waitPaused(t, pause, held)

		m := [2]*harness.FS{
			harness.Mount(t, gw, bucket, append([]string{"--holder", "A"}, noCache...)...),
			harness.Mount(t, gw, bucket, append([]string{"--holder", "B"}, noCache...)...),
		}
		const rounds = 100
		start := time.Now()
		var slowest time.Duration
		var open *os.File // the outgoing leader's dirty handle
		for r := 0; r < rounds; r++ {
			next := m[r%2]
			if d := bindWithin(t, next, uint64(r+2), bindLimit); d > slowest {
				slowest = d
			}
			if open != nil {
				if err := open.Close(); !errors.Is(err, syscall.EROFS) {
					// What the bucket holds now tells a stale write (the
					// old leader's bytes at its epoch r+1) from a flush
					// that stored nothing (the bytes of round r-1).
					got := readObject(t, gw, bucket, "log.txt")
					t.Errorf("round %d: the fenced leader's close = %v, want EROFS; log.txt holds %q (epoch %s, holder %s); the end of its log:\n%s\nthe end of the new leader's log:\n%s",
						r, err, got.body, got.epoch, got.holder, lastLines(m[(r+1)%2].Log(), 200), lastLines(next.Log(), 60))
				}
			}
			body := contents[r%2]
			if err := writeClose(next.Path("log.txt"), os.O_WRONLY|os.O_TRUNC, []byte(body)); err != nil {
				t.Fatalf("round %d: the new leader writes log.txt: %v; its log:\n%s", r, err, next.Log())
			}
			f, err := os.OpenFile(next.Path("log.txt"), os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				t.Fatalf("round %d: reopen log.txt: %v", r, err)
			}
			if _, err := f.WriteString(contents[(r+1)%2]); err != nil {
				t.Fatal(err)
			}
			open = f
		}
		if err := open.Close(); err != nil {
			t.Errorf("the last leader's close: %v", err)
		}
		t.Logf("%d takeovers in %v, slowest bind %v", rounds, time.Since(start), slowest)
		if err := os.Remove(pause); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-held:
			if !errors.Is(err, syscall.EROFS) {
				t.Errorf("the held commit of epoch 1 returned %v, want EROFS", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("the held commit never returned")
		}
		want := contents[rounds%2]
		if got := readObject(t, gw, bucket, "log.txt"); string(got.body) != want || got.epoch != fmt.Sprint(rounds+1) {
			t.Fatalf("log.txt = %q (epoch %s), want %q (epoch %d)", got.body, got.epoch, want, rounds+1)
		}
		noStall(t, w, m[0], m[1])
	})
}
