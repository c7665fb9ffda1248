package main

// The end of the token space, end to end: no source of tokens makes the
// register go back or hands out a number that is not above every earlier
// one (fencing.MaxToken).

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
)

// TestTheLargestTokenIsTheLastAndNothingWrapsRound is the sequence that
// once let a stale write land: a leader bound to the largest token, then a
// second mount's auto, `epoch raise auto`, and the root attribute "auto",
// each of which must fail clearly while the leader keeps the bucket.
func TestTheLargestTokenIsTheLastAndNothingWrapsRound(t *testing.T) {
	gateway.ForEachServer(t, gateway.SingleDriveServers, testTheLargestTokenIsTheLast)
}

func testTheLargestTokenIsTheLast(t *testing.T, gw *gateway.Gateway) {
	bin := harness.Binary(t)
	bucket := gateway.NewBucket(t, gw)
	largest := strconv.FormatUint(fencing.MaxToken, 10)

	// One above the largest is refused before anything is mounted.
	tmp := t.TempDir()
	mnt := filepath.Join(tmp, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	cleanupBackground(t, bin, mnt)
	r := runBin(t, gw.Env(), bucket, mnt, "--cache-dir", filepath.Join(tmp, "cache"),
		"-o", "endpoint="+gw.Endpoint, "--token", "18446744073709551615")
	oneErrorLine(t, r, "fencefs: mount: ", "token 18446744073709551615 is above the largest token, "+largest)
	if r.code != exitUsage {
		t.Errorf("exit status %d, want %d", r.code, exitUsage)
	}
	if mounted(t, mnt) {
		t.Fatalf("%s is mounted after the refusal", mnt)
	}

	leader := harness.Mount(t, gw, bucket, "--token", largest, "--holder", "last-leader")
	if err := os.WriteFile(leader.Path("a.txt"), []byte("by the largest epoch"), 0o644); err != nil {
		t.Fatalf("write as the leader of the largest epoch: %v", err)
	}

	// A second mount's auto finds no token above the register: the mount
	// fails with one line and nothing is bound.
	mnt2 := filepath.Join(tmp, "mnt2")
	if err := os.Mkdir(mnt2, 0o755); err != nil {
		t.Fatal(err)
	}
	cleanupBackground(t, bin, mnt2)
	r = runBin(t, gw.Env(), bucket, mnt2, "--cache-dir", filepath.Join(tmp, "cache2"),
		"-o", "endpoint="+gw.Endpoint, "--token", "auto")
	oneErrorLine(t, r, "fencefs: mount: ", "cannot bind token auto", "token space is spent", "the largest token is "+largest)
	if mounted(t, mnt2) {
		t.Errorf("%s is mounted after a spent auto bind", mnt2)
	}

	r = runBin(t, gw.Env(), "epoch", "raise", bucket, "auto")
	oneErrorLine(t, r, "fencefs: epoch", "token space is spent", largest)

	// A mount without a token asked for auto through its root attribute.
	reader := harness.Mount(t, gw, bucket)
	if err := unixSetxattr(reader.Dir, "user.fencefs.token", "auto"); !errors.Is(err, syscall.EOVERFLOW) {
		t.Errorf("setfattr auto on a spent bucket: %v, want EOVERFLOW", err)
	}
	if err := unixSetxattr(reader.Dir, "user.fencefs.token", "9223372036854775808"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("setfattr of a token above the largest: %v, want EINVAL", err)
	}

	// Nothing took over: the leader's create after all that lands, and the
	// register still names it.
	if err := os.WriteFile(leader.Path("b.txt"), []byte("still the leader"), 0o644); err != nil {
		t.Fatalf("the leader's create after the refused takeovers: %v", err)
	}
	show := runBin(t, gw.Env(), "epoch", "show", bucket)
	if show.code != 0 || !regexpMatch(`(?m)^epoch\s+`+largest+`$`, show.stdout) || !regexpMatch(`(?m)^holder\s+last-leader$`, show.stdout) {
		t.Fatalf("epoch show after the refusals: %d\n%s%s", show.code, show.stdout, show.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o, err := gw.Client().GetObject(ctx, bucket, "b.txt", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	st, err := o.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(o); string(got) != "still the leader" {
		t.Errorf("b.txt = %q", got)
	}
	stamp := ""
	for k, v := range st.UserMetadata {
		if strings.EqualFold(k, fencing.MetaEpoch) {
			stamp = v
		}
	}
	if stamp != largest {
		t.Errorf("b.txt is stamped epoch %q (metadata %v), want %s", stamp, st.UserMetadata, largest)
	}
}
