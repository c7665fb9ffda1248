package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
)

// listedObject is one object the listing tests write with a plain S3 client.
type listedObject struct {
	key  string
	body []byte
	meta map[string]string // s3fs keys, and the tombstone key
}

// listingFixture is a directory of every kind of object a listing must
// tell apart: files with and without s3fs metadata, one of exactly
// tombstone size that is not a tombstone, a tombstone (invisible), a
// symlink and a FIFO (small and empty objects that only their metadata
// tells from files).
func listingFixture() []listedObject {
	return []listedObject{
		{"d/big", bytes.Repeat([]byte("b"), 5000), map[string]string{"mode": "33184", "uid": "1234", "gid": "5678", "mtime": "1700000000.25"}},
		{"d/small", []byte("hello"), map[string]string{"mode": "33152", "uid": "42", "gid": "43", "mtime": "1600000000"}},
		{"d/plain", []byte("no metadata at all"), nil},
		{"d/size128", bytes.Repeat([]byte("x"), 128), map[string]string{"mode": "33188"}},
		{"d/gone", bytes.Repeat([]byte(" "), 128), map[string]string{"fencefs-tombstone": "1", "fencefs-epoch": "3"}},
		{"d/link", []byte("big"), map[string]string{"mode": strconv.Itoa(syscall.S_IFLNK | 0o777), "uid": "7", "gid": "8"}},
		{"d/fifo", nil, map[string]string{"mode": strconv.Itoa(syscall.S_IFIFO | 0o640), "uid": "9", "gid": "10", "mtime": "1500000000"}},
	}
}

func putFixture(ctx context.Context, t *testing.T, gw *gateway.Gateway, bucket string, objs []listedObject) {
	t.Helper()
	for _, o := range objs {
		if _, err := gw.Client().PutObject(ctx, bucket, o.key, bytes.NewReader(o.body), int64(len(o.body)),
			minio.PutObjectOptions{UserMetadata: o.meta}); err != nil {
			t.Fatalf("put %s: %v", o.key, err)
		}
	}
}

// headRequests reads fencefs_s3_requests_total{op="head"} summed over
// outcomes from the mount's metrics at addr.
func headRequests(t *testing.T, addr string) int {
	t.Helper()
	_, body := harness.Scrape(t, "http://"+addr+"/metrics")
	n := 0
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(l, `fencefs_s3_requests_total{op="head",`) {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", l, err)
		}
		n += int(v)
	}
	return n
}

// statLine is what ls -l and stat show of one entry.
func statLine(t *testing.T, path string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatalf("lstat %s: %v", path, err)
	}
	return fmt.Sprintf("mode=%o uid=%d gid=%d size=%d mtime=%d.%09d nlink=%d", st.Mode, st.Uid, st.Gid, st.Size,
		st.Mtim.Sec, st.Mtim.Nsec, st.Nlink)
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// TestAListingThatCarriesMetadataAnswersEveryStat writes a directory of
// files, a symlink, a FIFO, a 128-byte file and a tombstone with a plain S3
// client, and runs ls -l, find -type f, du and stat on a fresh mount. Where
// the server's listings carry each object's metadata (MinIO) they answer
// every stat: no HEAD request after the directory itself was looked up;
// elsewhere (the Versity gateway) the HEADs are sent. On every server what
// the mount shows after a listing equals what a second fresh mount shows
// from a HEAD of each name, and find -type f lists only the regular files.
// Once the mount's cache expired, a second listing refreshes what the first
// made, again without a HEAD where it carries metadata.
func TestAListingThatCarriesMetadataAnswersEveryStat(t *testing.T) {
	gateway.ForEachServer(t, gateway.SingleDriveServers, func(t *testing.T, gw *gateway.Gateway) {
		testListingAnswersStats(t, gw, gw.Kind != gateway.Versity)
	})
}

func testListingAnswersStats(t *testing.T, gw *gateway.Gateway, listsMetadata bool) {
	bucket := gateway.NewBucket(t, gw)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	objs := listingFixture()
	putFixture(ctx, t, gw, bucket, objs)

	addr := metricsAddr(t)
	a := harness.Mount(t, gw, bucket, "--metrics-addr", addr)
	if _, err := os.Stat(a.Path("d")); err != nil { // the directory's own lookup
		t.Fatal(err)
	}
	before := headRequests(t, addr)
	lsOut := run(t, "ls", "-l", "--time-style=+%s", a.Path("d"))
	findOut := run(t, "find", a.Path("d"), "-type", "f")
	duOut := run(t, "du", "-a", "--apparent-size", "-b", a.Path("d"))
	listed := map[string]string{}
	ents, err := os.ReadDir(a.Path("d"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
		listed[e.Name()] = statLine(t, a.Path("d", e.Name()))
	}
	heads := headRequests(t, addr) - before
	t.Logf("ls -l, find, du and stat of %d entries after the listing: %d HEAD requests\n%s", len(names), heads, lsOut)
	if listsMetadata && heads != 0 {
		t.Errorf("%d HEAD requests after a listing that carried every object's metadata; want 0", heads)
	}
	if !listsMetadata && heads == 0 {
		t.Errorf("no HEAD request on a server whose listings carry no metadata: the count measures nothing")
	}

	// Once the mount's cache has expired (meta_ttl, 5 s by default), a
	// listing again refreshes the nodes the first one made, without a HEAD.
	time.Sleep(6 * time.Second)
	if _, err := os.Stat(a.Path("d")); err != nil { // the directory's own lookup
		t.Fatal(err)
	}
	before = headRequests(t, addr)
	run(t, "ls", "-l", a.Path("d"))
	for _, n := range names {
		if got := statLine(t, a.Path("d", n)); got != listed[n] {
			t.Errorf("%s after a second listing: %s; after the first: %s", n, got, listed[n])
		}
	}
	again := headRequests(t, addr) - before
	t.Logf("ls -l and stat once the cache expired: %d HEAD requests", again)
	if listsMetadata && again != 0 {
		t.Errorf("%d HEAD requests after a listing that refreshed every node; want 0", again)
	}

	if want := "big fifo link plain size128 small"; strings.Join(names, " ") != want {
		t.Fatalf("readdir = %v; want %s (the tombstone hidden)", names, want)
	}
	var files []string
	for _, l := range strings.Fields(findOut) {
		files = append(files, filepath.Base(l))
	}
	sort.Strings(files)
	if want := "big plain size128 small"; strings.Join(files, " ") != want {
		t.Errorf("find -type f = %v; want %s", files, want)
	}
	if !strings.Contains(duOut, "5000\t"+a.Path("d", "big")) {
		t.Errorf("du -a does not show big's 5000 bytes:\n%s", duOut)
	}

	// A second fresh mount looks every name up without a listing: a HEAD
	// each. It must show exactly what the listing gave.
	b := harness.Mount(t, gw, bucket)
	for _, n := range names {
		if got := statLine(t, b.Path("d", n)); got != listed[n] {
			t.Errorf("%s after a listing: %s; from a HEAD: %s", n, listed[n], got)
		}
	}
	if l := listed["big"]; l != "mode=100640 uid=1234 gid=5678 size=5000 mtime=1700000000.250000000 nlink=1" {
		t.Errorf("big = %s; want its s3fs metadata", l)
	}
	if l := listed["fifo"]; !strings.HasPrefix(l, "mode=10640 uid=9 gid=10 size=0 mtime=1500000000.") {
		t.Errorf("fifo = %s; want a FIFO with its s3fs metadata", l)
	}
	if target, err := os.Readlink(a.Path("d", "link")); err != nil || target != "big" {
		t.Errorf("readlink d/link = %q, %v; want big", target, err)
	}
}
