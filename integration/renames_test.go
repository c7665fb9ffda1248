package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/textproto"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"
)

// TestRenameKeepsWhatAnotherClientStored checks that mv of a file and of a
// directory, on objects another S3 client wrote, keeps each object's
// content, content type and metadata: the mount copies what it knows of
// the source (from a listing where it carries metadata, else from a HEAD)
// without reading it again, and must know all of it. After ls -l (whose
// listing or whose HEADs told the mount everything), the file's mv sends
// no HEAD at all; the directory's mv no HEAD per object where the listing
// carries the objects' metadata, and one elsewhere.
func TestRenameKeepsWhatAnotherClientStored(t *testing.T) {
	gateway.ForEachServer(t, gateway.SingleDriveServers, func(t *testing.T, gw *gateway.Gateway) {
		bucket := gateway.NewBucket(t, gw)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		objs := []struct {
			key, ctype string
			meta       map[string]string
		}{
			{"d/page.html", "text/html; charset=utf-8", map[string]string{"mode": "33184", "uid": "1234", "gid": "5678", "mtime": "1700000000", "owner": "web"}},
			{"t/sub/data.json", "application/json", map[string]string{"mode": "33188", "project": "x"}},
		}
		for _, o := range objs {
			body := []byte("body of " + o.key)
			if _, err := gw.Client().PutObject(ctx, bucket, o.key, bytes.NewReader(body), int64(len(body)),
				minio.PutObjectOptions{ContentType: o.ctype, UserMetadata: o.meta}); err != nil {
				t.Fatalf("put %s: %v", o.key, err)
			}
		}
		const more = 12 // files beside data.json in the renamed directory
		for i := range more {
			body := []byte(fmt.Sprintf("file %d", i))
			if _, err := gw.Client().PutObject(ctx, bucket, fmt.Sprintf("t/f%d", i), bytes.NewReader(body), int64(len(body)),
				minio.PutObjectOptions{UserMetadata: map[string]string{"mode": "33188"}}); err != nil {
				t.Fatal(err)
			}
		}
		addr := metricsAddr(t)
		m := harness.Mount(t, gw, bucket, "--token", "5", "--metrics-addr", addr)
		run(t, "ls", "-lR", m.Path("d"), m.Path("t"))
		before := headRequests(t, addr)
		run(t, "mv", m.Path("d", "page.html"), m.Path("d", "moved.html"))
		heads := headRequests(t, addr) - before
		t.Logf("mv of a listed file: %d HEAD requests", heads)
		if heads != 0 {
			t.Errorf("mv of a file ls -l had shown sent %d HEAD requests; want 0", heads)
		}
		before = headRequests(t, addr)
		run(t, "mv", m.Path("t"), m.Path("u"))
		heads = headRequests(t, addr) - before
		t.Logf("mv of a directory: %d HEAD requests", heads)
		// The lookups of the two names cost a few. Where the listing
		// carries metadata no object needs a HEAD; elsewhere one each,
		// shared by its copy and its delete (two each would be 2 × 13).
		switch {
		case gw.Kind == gateway.MinIO && heads >= more:
			t.Errorf("mv of a directory of %d objects whose listing carries their metadata sent %d HEAD requests; want a few for the names, none per object", more+1, heads)
		case heads >= 2*(more+1):
			t.Errorf("mv of a directory of %d objects sent %d HEAD requests; want at most one per object and a few for the names", more+1, heads)
		}
		syncDir(t, m.Path("d"))
		syncDir(t, m.Path("."))

		for _, c := range []struct{ from, to string }{{"d/page.html", "d/moved.html"}, {"t/sub/data.json", "u/sub/data.json"}} {
			var want struct {
				ctype string
				meta  map[string]string
			}
			for _, o := range objs {
				if o.key == c.from {
					want.ctype, want.meta = o.ctype, o.meta
				}
			}
			obj, err := gw.Client().GetObject(ctx, bucket, c.to, minio.GetObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(obj)
			if err != nil {
				t.Fatalf("get %s: %v", c.to, err)
			}
			st, err := obj.Stat()
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != "body of "+c.from {
				t.Errorf("%s = %q, want the content of %s", c.to, got, c.from)
			}
			if st.ContentType != want.ctype {
				t.Errorf("%s has content type %q, want %q as %s had", c.to, st.ContentType, want.ctype, c.from)
			}
			for k, v := range want.meta {
				if k == "mtime" { // mv keeps mtime, but fencefs may store it with a fraction
					continue
				}
				if g := st.UserMetadata[textproto.CanonicalMIMEHeaderKey(k)]; g != v {
					t.Errorf("%s: metadata %s = %q, want %q (all: %v)", c.to, k, g, v, st.UserMetadata)
				}
			}
			if src, err := gw.Client().StatObject(ctx, bucket, c.from, minio.StatObjectOptions{}); err == nil && src.UserMetadata["Fencefs-Tombstone"] != "1" {
				t.Errorf("%s is still in the bucket after the mv and the directory's fsync", c.from)
			}
			if _, err := os.Stat(m.Path(c.from)); !os.IsNotExist(err) {
				t.Errorf("stat %s after the mv: %v, want ENOENT", c.from, err)
			}
		}
	})
}

// TestTakeoverInTheMiddleOfAnMvLoopLandsNoStaleRename runs a bash loop of
// mv d/f$i e/f$i on leader A (each rename a copy whose journal write
// overlaps the read of its source, then the source's delete) and, once A
// has moved the first 20, binds a newer token on B; B then writes every
// name of both directories. No copy or delete of A's may land after B's
// writes: every name ends with B's content, and A's loop is refused.
func TestTakeoverInTheMiddleOfAnMvLoopLandsNoStaleRename(t *testing.T) {
	gateway.ForEachServer(t, gateway.ErasureCodedServers, func(t *testing.T, gw *gateway.Gateway) {
		const n = 400
		bucket := gateway.NewBucket(t, gw)
		a := harness.Mount(t, gw, bucket, "--token", "1", "--holder", "A")
		b := harness.Mount(t, gw, bucket, "--holder", "B") // read-only until bound
		bash(t, a.Dir, fmt.Sprintf(`mkdir d e; for i in $(seq 1 %d); do echo "A $i" > d/f$i; done`, n))

		mv := exec.Command("bash", "-c", fmt.Sprintf(`for i in $(seq 1 %d); do mv d/f$i e/f$i || exit 1; done`, n))
		mv.Dir = a.Dir
		mvDone, mvOut := startUntil(t, mv, "A's mv loop", func() bool {
			ents, _ := os.ReadDir(a.Path("e"))
			return len(ents) >= 20
		})
		if err := unix.Setxattr(b.Dir, "user.fencefs.token", []byte("2"), 0); err != nil {
			t.Fatalf("B binds 2: %v", err)
		}
		for _, dir := range []string{"d", "e"} {
			if err := os.MkdirAll(b.Path(dir), 0o755); err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= n; i++ {
				if err := os.WriteFile(b.Path(dir, fmt.Sprintf("f%d", i)), []byte(fmt.Sprintf("B %s %d", dir, i)), 0o644); err != nil {
					t.Fatalf("B writes %s/f%d: %v", dir, i, err)
				}
			}
		}

		mvErr := waitDone(t, mvDone, "A's mv loop")
		t.Logf("A's mv loop: %v\n%s", mvErr, lastLines(mvOut.String(), 3))
		if mvErr == nil {
			t.Errorf("A's mv loop finished every rename although B bound a newer token while it ran")
		}

		// Whatever A renamed, nothing of A's landed after B wrote.
		lost := 0
		for _, dir := range []string{"d", "e"} {
			for i := 1; i <= n; i++ {
				key := fmt.Sprintf("%s/f%d", dir, i)
				got := readObject(t, gw, bucket, key)
				if want := fmt.Sprintf("B %s %d", dir, i); !got.exists || string(got.body) != want {
					lost++
					if lost <= 5 {
						t.Errorf("%s = exists %v, tombstone %v, %q stamped %s; want B's %q: a stale rename landed after the takeover",
							key, got.exists, got.tombstone, got.body, got.epoch, want)
					}
				}
			}
		}
		if lost > 0 {
			t.Errorf("%d of %d names lost B's write; A's log:\n%s", lost, 2*n, lastLines(a.Log(), 40))
		}
	})
}
