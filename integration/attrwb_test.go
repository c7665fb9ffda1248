package integration

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
)

// Attribute write-back (mount.attr_writeback, docs/DESIGN.md "Attribute
// changes"): a chmod/chown/utimens of a file nobody writes, or of a
// directory, is acknowledged at once and stored a moment later, the calls
// of one program sharing one commit; fsync, close, rename and unmount
// store it at once; a fenced leader's is dropped and counted; a crash loses
// only the attribute change.

// putRequests sums the mount's PUT requests (every outcome) from its
// metrics at addr.
func putRequests(t *testing.T, addr string) int {
	t.Helper()
	_, body := harness.Scrape(t, "http://"+addr+"/metrics")
	n := 0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, `fencefs_s3_requests_total{op="put",`) {
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", l, err)
			}
			n += int(v)
		}
	}
	return n
}

// settledPuts returns putRequests once it has stayed the same for 300 ms:
// the journal trims of the commits before it have been sent.
func settledPuts(t *testing.T, addr string) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	n, since := putRequests(t, addr), time.Now()
	for time.Since(since) < 300*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("PUT requests still counting up after 15 s (%d)", n)
		}
		time.Sleep(50 * time.Millisecond)
		if m := putRequests(t, addr); m != n {
			n, since = m, time.Now()
		}
	}
	return n
}

// tarLikeAttrs changes the attributes of the closed file p/f and of the
// directory p/sub the way tar and cp -a do after writing them: five calls.
func tarLikeAttrs(t *testing.T, p string) {
	t.Helper()
	f, sub := p+"/f", p+"/sub"
	steps := []error{
		os.Chtimes(f, time.Unix(1500000000, 0), time.Unix(1600000000, 0)),
		os.Chown(f, 1234, 5678),
		os.Chmod(f, 0o600),
		os.Chtimes(sub, time.Unix(1500000000, 0), time.Unix(1600000000, 0)),
		os.Chmod(sub, 0o700),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("attribute call %d: %v", i, err)
		}
	}
}

// waitStoredMode polls the bucket until key's stored mode is want.
func waitStoredMode(t *testing.T, e *fsEnv, key string, want uint32, limit time.Duration) map[string]string {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		m := e.meta(t, key)
		if m["mode"] == strconv.Itoa(int(want)) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("S3 %s mode = %q after %v, want %d (metadata %v)", key, m["mode"], limit, want, m)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestAttributeChangesAfterCloseShareOneCommitAndAreStoredSoon(t *testing.T) {
	gw := gateway.ForTest(t)
	puts := map[string]int{}
	for _, wb := range []string{"0", "1s"} {
		bucket := gateway.NewBucket(t, gw)
		addr := metricsAddr(t)
		e := &fsEnv{gw: gw, bucket: bucket,
			fs: harness.Mount(t, gw, bucket, "--token", "5", "--attr-writeback", wb, "--metrics-addr", addr)}
		p := e.fs.Path("d")
		if err := os.MkdirAll(p+"/sub", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := writeClose(p+"/f", os.O_CREATE|os.O_WRONLY, []byte("content")); err != nil {
			t.Fatal(err)
		}
		before := settledPuts(t, addr) // after the journal trims of the writes above
		tarLikeAttrs(t, p)
		// The mount shows the changes at once.
		if st := lstat(t, p+"/f"); st.Mode&0o7777 != 0o600 || st.Uid != 1234 || st.Gid != 5678 || st.Mtim.Sec != 1600000000 {
			t.Errorf("attr-writeback %s: f after the calls: mode %#o uid %d gid %d mtime %d", wb, st.Mode&0o7777, st.Uid, st.Gid, st.Mtim.Sec)
		}
		if st := lstat(t, p+"/sub"); st.Mode&0o7777 != 0o700 || st.Mtim.Sec != 1600000000 {
			t.Errorf("attr-writeback %s: sub after the calls: mode %#o mtime %d", wb, st.Mode&0o7777, st.Mtim.Sec)
		}
		// The bucket has them within the write-back delay (generous margin).
		m := waitStoredMode(t, e, "d/f", syscall.S_IFREG|0o600, 15*time.Second)
		if m["uid"] != "1234" || m["gid"] != "5678" || m["mtime"] != "1600000000" || m["atime"] != "1500000000" {
			t.Errorf("attr-writeback %s: stored f metadata %v", wb, m)
		}
		m = waitStoredMode(t, e, "d/sub/", syscall.S_IFDIR|0o700, 15*time.Second)
		if m["mtime"] != "1600000000" {
			t.Errorf("attr-writeback %s: stored sub/ mtime %q, want 1600000000", wb, m["mtime"])
		}
		wantS3(t, e, "d/f", "content")
		puts[wb] = settledPuts(t, addr) - before // with the journal trims of the stores
	}
	// Five calls on two nodes: each stored at once costs its own commit;
	// deferred, the two nodes cost one commit each. A commit is an intent
	// (a journal write), the object's PUT, and at most one trim, which may
	// also be shared: so at least 2 PUTs per call at once, at most 3 per
	// node deferred (11 and 5 are usual).
	if puts["0"] < 2*5 || puts["1s"] > 3*2 {
		t.Errorf("PUT requests for 5 attribute calls on 2 nodes: %d deferred, %d each at once; want at most 6 (a commit per node) and at least 10 (one per call)", puts["1s"], puts["0"])
	}
	t.Logf("PUT requests for 5 attribute calls on 2 nodes: %d deferred, %d each at once", puts["1s"], puts["0"])
}

func TestPendingAttributeChangeIsStoredByFsyncWriterCloseRenameAndUnmount(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	// A delay far longer than the test: only fsync, rename and unmount
	// can have stored what the bucket shows.
	e := &fsEnv{gw: gw, bucket: bucket, fs: harness.Mount(t, gw, bucket, "--token", "5", "--attr-writeback", "10m")}
	for _, name := range []string{"f", "g"} {
		if err := writeClose(e.fs.Path(name), os.O_CREATE|os.O_WRONLY, []byte(name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(e.fs.Path("dir"), 0o755); err != nil {
		t.Fatal(err)
	}

	if err := os.Chmod(e.fs.Path("f"), 0o640); err != nil {
		t.Fatal(err)
	}
	// A reader's close does not store it (nor report its failure).
	if b, err := os.ReadFile(e.fs.Path("f")); err != nil || string(b) != "f" {
		t.Fatalf("read f = %q, %v", b, err)
	}
	wantMetaValue(t, e, "f", "mode", strconv.Itoa(syscall.S_IFREG|0o644))
	if err := fsyncPath(e.fs.Path("f")); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	wantMetaValue(t, e, "f", "mode", strconv.Itoa(syscall.S_IFREG|0o640))

	// A writer's close does: touch of an existing file (futimens on a
	// descriptor opened for writing, nothing written).
	if err := os.Chmod(e.fs.Path("f"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("touch", e.fs.Path("f")).CombinedOutput(); err != nil {
		t.Fatalf("touch: %v: %s", err, out)
	}
	wantMetaValue(t, e, "f", "mode", strconv.Itoa(syscall.S_IFREG|0o600))

	if err := os.Chmod(e.fs.Path("g"), 0o604); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(e.fs.Path("g"), e.fs.Path("h")); err != nil {
		t.Fatal(err)
	}
	wantMetaValue(t, e, "h", "mode", strconv.Itoa(syscall.S_IFREG|0o604))
	wantS3(t, e, "h", "g")

	if err := os.Chmod(e.fs.Path("dir"), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := e.fs.Unmount(); err != nil {
		t.Fatalf("unmount: %v", err)
	}
	wantMetaValue(t, e, "dir/", "mode", strconv.Itoa(syscall.S_IFDIR|0o711))
}

func TestFencedLeadersPendingAttributeChangeIsDroppedAndCounted(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	addrA := metricsAddr(t)
	a := harness.Mount(t, gw, bucket, "--token", "5", "--holder", "A", "--attr-writeback", "3s", "--metrics-addr", addrA)
	e := &fsEnv{gw: gw, bucket: bucket, fs: a}
	if err := writeClose(a.Path("f"), os.O_CREATE|os.O_WRONLY, []byte("A")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(a.Path("f"), 0o600); err != nil {
		t.Fatalf("chmod while leading: %v", err)
	}
	// B takes over and rewrites the file before A's change is due.
	b := harness.Mount(t, gw, bucket, "--token", "6", "--holder", "B")
	if err := writeClose(b.Path("f"), os.O_WRONLY|os.O_TRUNC, []byte("B")); err != nil {
		t.Fatalf("new leader's overwrite: %v", err)
	}
	pollMetric(t, addrA, "fencefs_fuse_attr_writeback_failures_total", "1", 20*time.Second)
	got := readObject(t, gw, bucket, "f")
	if string(got.body) != "B" || got.epoch != "6" {
		t.Errorf("f = %q stamped %q, want B's content stamped 6", got.body, got.epoch)
	}
	if m := e.meta(t, "f"); m["mode"] == strconv.Itoa(syscall.S_IFREG|0o600) {
		t.Errorf("the fenced leader's chmod landed: %v", m)
	}
	if st := lstat(t, a.Path("f")); st.Mode&0o7777 == 0o600 {
		t.Errorf("the fenced mount still shows its dropped chmod (mode %#o)", st.Mode&0o7777)
	}
}

func TestKillDuringAttributeWritebackLeavesTheObjectWhole(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	a := harness.Mount(t, gw, bucket, "--token", "5", "--attr-writeback", "10m")
	e := &fsEnv{gw: gw, bucket: bucket, fs: a}
	body := strings.Repeat("whole ", 1000)
	if err := writeClose(a.Path("f"), os.O_CREATE|os.O_WRONLY, []byte(body)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(a.Path("f"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.Kill()
	if err := a.Unmount(); err != nil {
		t.Logf("unmount after kill: %v", err)
	}
	wantS3(t, e, "f", body)
	wantMetaValue(t, e, "f", "mode", strconv.Itoa(syscall.S_IFREG|0o644))
	again := harness.Mount(t, gw, bucket, "--token", "6")
	if got, err := os.ReadFile(again.Path("f")); err != nil || string(got) != body {
		t.Errorf("after the kill a new mount reads %d bytes, %v; want the %d closed", len(got), err, len(body))
	}
}

func TestAttributeChangeOfANodeRemovedHereIsDroppedQuietly(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	addr := metricsAddr(t)
	a := harness.Mount(t, gw, bucket, "--token", "5", "--attr-writeback", "200ms", "--metrics-addr", addr)
	if err := writeClose(a.Path("f"), os.O_CREATE|os.O_WRONLY, []byte("f")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(a.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{a.Path("f"), a.Path("d")} {
		if err := os.Chmod(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(a.Path("f")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(a.Path("d")); err != nil {
		t.Fatal(err)
	}
	// Past the delay (generous margin): the writeback found nothing to
	// store and counted no failure.
	pollMetric(t, addr, "fencefs_fuse_attr_writeback_pending", "0", 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	_, body := harness.Scrape(t, "http://"+addr+"/metrics")
	if got := metricLine(body, "fencefs_fuse_attr_writeback_failures_total"); got != "0" {
		t.Errorf("attr_writeback_failures_total = %q after removing the nodes, want 0", got)
	}
	if strings.Contains(a.Log(), "chmod/chown/utimens") {
		t.Errorf("the mount warned of a dropped change of a node it removed:\n%s", a.Log())
	}
}

// TestPendingAttributeChangeSurvivesAnOutage cuts the network between the
// mount and the storage after a chmod: fsync reports EIO, the mount keeps
// showing the change, and once the network is back it is stored by itself
// and nothing is counted as lost.
func TestPendingAttributeChangeSurvivesAnOutage(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	proxy := harness.NewProxy(t, gw.Addr)
	addr := metricsAddr(t)
	a := harness.Mount(t, gw, bucket, "--endpoint", proxy.Endpoint(), "--token", "5",
		"--attr-writeback", "300ms", "--metrics-addr", addr)
	e := &fsEnv{gw: gw, bucket: bucket, fs: a}
	if err := writeClose(a.Path("f"), os.O_CREATE|os.O_WRONLY, []byte("f")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(a.Path("f"), 0o640); err != nil {
		t.Fatal(err)
	}
	proxy.Cut(t)
	if err := fsyncPath(a.Path("f")); !errors.Is(err, syscall.EIO) {
		t.Errorf("fsync with the network cut: %v, want EIO", err)
	}
	if st := lstat(t, a.Path("f")); st.Mode&0o7777 != 0o640 {
		t.Errorf("mode during the outage %#o, want the pending 0640", st.Mode&0o7777)
	}
	proxy.Heal(t)
	waitStoredMode(t, e, "f", syscall.S_IFREG|0o640, 30*time.Second)
	pollMetric(t, addr, "fencefs_fuse_attr_writeback_pending", "0", 10*time.Second)
	_, body := harness.Scrape(t, "http://"+addr+"/metrics")
	if got := metricLine(body, "fencefs_fuse_attr_writeback_failures_total"); got != "0" {
		t.Errorf("attr_writeback_failures_total = %q, want 0: the change was kept, not dropped", got)
	}
}
