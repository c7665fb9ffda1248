package integration

// Failover as the application sees it: the new
// leader's first writes succeed even when it cached versions as a follower
// that the old leader then replaced, and a write refused while fenced never
// turns into a silent loss after the mount leads again.

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"golang.org/x/sys/unix"
)

func bindToken(t *testing.T, fs *harness.FS, token uint64) {
	t.Helper()
	if err := unix.Setxattr(fs.Dir, "user.fencefs.token", []byte(strconv.FormatUint(token, 10)), 0); err != nil {
		t.Fatalf("bind token %d on %s: %v", token, fs.Dir, err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}

// TestNewLeaderOverwritesAtOnceAfterEveryTakeover alternates leadership
// between two mounts over the same three files, 20 rounds. In each round
// the incoming leader reads the files as a follower (caching their
// versions), the outgoing leader rewrites them (so those versions are gone)
// and then holds them dirty in a holder process and is frozen — before its
// close in even rounds, during it in odd rounds. The incoming leader binds
// the next token and overwrites every file at once: each overwrite must
// succeed, the thawed leader's closes must not land, and the bucket holds
// the newest leader's bytes.
func TestNewLeaderOverwritesAtOnceAfterEveryTakeover(t *testing.T) {
	gateway.ForEachServer(t, gateway.ErasureCodedServers, testNewLeaderOverwritesAtOnceAfterEveryTakeover)
}

func testNewLeaderOverwritesAtOnceAfterEveryTakeover(t *testing.T, gw *gateway.Gateway) {
	bucket := gateway.NewBucket(t, gw)
	// meta_ttl well above a round's length: the follower's cache is
	// still trusted when it becomes the leader.
	mounts := [2]*harness.FS{
		harness.Mount(t, gw, bucket, "--token", "1", "--holder", "A", "--meta-ttl", "1m"),
		harness.Mount(t, gw, bucket, "--holder", "B", "--meta-ttl", "1m"),
	}
	files := []string{"f0", "f1", "f2"}
	for _, f := range files {
		if err := writeClose(mounts[0].Path(f), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, []byte("initial "+f)); err != nil {
			t.Fatal(err)
		}
	}
	const rounds = 20
	for round := 0; round < rounds; round++ {
		old, next := mounts[round%2], mounts[(round+1)%2]
		token := uint64(round + 2)
		duringClose := round%2 == 1
		// The incoming leader caches the current versions as a follower.
		for _, f := range files {
			if _, err := os.ReadFile(next.Path(f)); err != nil {
				t.Fatalf("round %d: the follower's read of %s: %v; its log:\n%s", round, f, err, next.Log())
			}
		}
		// The outgoing leader replaces them, then holds them dirty.
		for _, f := range files {
			body := fmt.Sprintf("round %d by the old leader: %s", round, f)
			if err := writeClose(old.Path(f), os.O_WRONLY|os.O_TRUNC, []byte(body)); err != nil {
				t.Fatalf("round %d: old leader's rewrite of %s: %v", round, f, err)
			}
		}
		paths := make([]string, len(files))
		for i, f := range files {
			paths[i] = old.Path(f)
		}
		h := startHolder(t, paths)
		closed := make(chan []syscall.Errno, 1)
		if duringClose {
			go func() { closed <- h.closeAll(t, len(files)) }()
			time.Sleep(time.Millisecond)
		}
		if err := old.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		bindToken(t, next, token)
		for _, f := range files {
			body := fmt.Sprintf("round %d by the new leader (token %d): %s", round, token, f)
			if err := writeClose(next.Path(f), os.O_WRONLY|os.O_TRUNC, []byte(body)); err != nil {
				old.Signal(syscall.SIGCONT)
				t.Fatalf("round %d (%s close): the new leader's first overwrite of %s failed: %v",
					round, map[bool]string{true: "during", false: "before"}[duringClose], f, err)
			}
		}
		if err := old.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if !duringClose {
			go func() { closed <- h.closeAll(t, len(files)) }()
		}
		var errs []syscall.Errno
		select {
		case errs = <-closed:
		case <-time.After(60 * time.Second):
			t.Fatalf("round %d: the old leader's closes did not return", round)
		}
		for i, e := range errs {
			// Before the freeze a close may have finished (it landed
			// before the takeover); after it, only EROFS is right.
			if !duringClose && e != syscall.EROFS {
				t.Errorf("round %d: the fenced leader's close of %s = %v, want EROFS", round, files[i], e)
			}
			if duringClose && e != 0 && e != syscall.EROFS {
				t.Errorf("round %d: the fenced leader's close of %s = %v, want EROFS (or success before the freeze)", round, files[i], e)
			}
		}
		for _, f := range files {
			want := fmt.Sprintf("round %d by the new leader (token %d): %s", round, token, f)
			if got := readObject(t, gw, bucket, f); string(got.body) != want || got.epoch != strconv.FormatUint(token, 10) {
				t.Fatalf("round %d: bucket %s = %q (epoch %s), want %q (epoch %d)", round, f, got.body, got.epoch, want, token)
			}
		}
	}
}

// TestRefusedWriteNeverBecomesASilentLossAfterLeadingAgain: a mount that
// does not know yet that it is fenced has a mutation refused (EROFS); it
// then binds a newer token and does the same thing again — it must land in
// the bucket (and read back on the mount) or fail loudly, never succeed
// with nothing stored. Each case is one refused operation on one name.
func TestRefusedWriteNeverBecomesASilentLossAfterLeadingAgain(t *testing.T) {
	gateway.ForEachServer(t, gateway.ErasureCodedServers, testRefusedWriteNeverBecomesASilentLossAfterLeadingAgain)
}

func testRefusedWriteNeverBecomesASilentLossAfterLeadingAgain(t *testing.T, gw *gateway.Gateway) {
	bucket := gateway.NewBucket(t, gw)
	a := harness.Mount(t, gw, bucket, "--token", "1", "--holder", "A")
	b := harness.Mount(t, gw, bucket, "--holder", "B")
	if err := writeClose(a.Path("existing"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, []byte("old")); err != nil {
		t.Fatal(err)
	}
	if err := writeClose(a.Path("src"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, []byte("source")); err != nil {
		t.Fatal(err)
	}
	create := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	cases := []struct {
		name    string
		key     string // the name written again after leading again
		mkdir   string // a directory made first, after leading again
		refused func(path func(...string) string) error
	}{
		{"create of a new file", "g", "", func(p func(...string) string) error {
			return writeClose(p("g"), create, []byte("refused"))
		}},
		{"exclusive create", "x", "", func(p func(...string) string) error {
			return writeClose(p("x"), create|os.O_EXCL, []byte("refused"))
		}},
		{"overwrite of an existing file", "existing", "", func(p func(...string) string) error {
			return writeClose(p("existing"), os.O_WRONLY|os.O_TRUNC, []byte("refused"))
		}},
		{"rename onto a new name", "moved", "", func(p func(...string) string) error {
			return os.Rename(p("src"), p("moved"))
		}},
		{"mkdir", "dir/inside", "dir", func(p func(...string) string) error {
			return os.Mkdir(p("dir"), 0o755)
		}},
	}
	token := uint64(1)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			token++
			bindToken(t, b, token) // a does not know yet
			err := c.refused(a.Path)
			if fsErrno(err) != syscall.EROFS {
				t.Fatalf("refused %s on the fenced mount: %v, want EROFS", c.name, err)
			}
			token++
			bindToken(t, a, token)
			want := "landed after leading again: " + c.name
			if c.mkdir != "" {
				if err := os.Mkdir(a.Path(c.mkdir), 0o755); err != nil {
					t.Fatalf("mkdir %s after leading again: %v", c.mkdir, err)
				}
			}
			if err := writeClose(a.Path(c.key), create, []byte(want)); err != nil {
				t.Fatalf("write of %s after leading again: %v (failing loudly is allowed, but not here: the mount leads)", c.key, err)
			}
			if got := readObject(t, gw, bucket, c.key); string(got.body) != want {
				t.Fatalf("close(2) succeeded but the bucket has %s = %q (exists %v), want %q", c.key, got.body, got.exists, want)
			}
			if got := readFile(t, a.Path(c.key)); got != want {
				t.Fatalf("reading %s back on the mount: %q, want %q", c.key, got, want)
			}
		})
	}
}
