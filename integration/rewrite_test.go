package integration

// Rewrites as applications do them: a kill -9 in
// the middle of a rewrite never leaves an emptied or truncated object, and
// readers on another mount see whole versions without ESTALE storms.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
)

func randomBytes(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// userKeys lists the bucket's keys outside the protocol directory.
func userKeys(t *testing.T, gw *gateway.Gateway, bucket string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var keys []string
	for o := range gw.Client().ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if !strings.HasPrefix(o.Key, ".fencefs/") {
			keys = append(keys, o.Key)
		}
	}
	return keys
}

// TestKillMidRewriteLeavesTheOldOrTheNewContentWhole rewrites an existing
// object through the mount the way programs do — GNU dd (O_TRUNC, dup2,
// close, writes) for a 112 MiB file, a bash loop of `cat src > f` for a 4 KiB
// one — and kills the mount with SIGKILL at several moments. Afterwards the
// object is byte for byte the old content or the complete new content, and
// no other object appeared.
func TestKillMidRewriteLeavesTheOldOrTheNewContentWhole(t *testing.T) {
	gateway.ForEachServer(t, gateway.ErasureCodedServers, testKillMidRewriteLeavesTheOldOrTheNewContentWhole)
}

func testKillMidRewriteLeavesTheOldOrTheNewContentWhole(t *testing.T, gw *gateway.Gateway) {
	for _, c := range []struct {
		name   string
		size   int
		delays []time.Duration
		script string // %[1]s = source, %[2]s = target
	}{
		{"112 MiB rewritten by dd", 112 << 20, []time.Duration{50 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond, 900 * time.Millisecond},
			"exec dd if=%[1]s of=%[2]s bs=1M 2>/dev/null"},
		{"4 KiB rewritten by a bash redirect loop", 4 << 10, []time.Duration{0, 3 * time.Millisecond, 20 * time.Millisecond, 80 * time.Millisecond},
			"while :; do cat %[1]s > %[2]s || exit 1; done"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bucket := gateway.NewBucket(t, gw)
			key := fmt.Sprintf("file-%d", c.size)
			old, next := randomBytes(1, c.size), randomBytes(2, c.size)
			src := filepath.Join(t.TempDir(), "src")
			if err := os.WriteFile(src, next, 0o644); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := gw.Client().PutObject(ctx, bucket, key, bytes.NewReader(old), int64(len(old)), minio.PutObjectOptions{}); err != nil {
				t.Fatal(err)
			}
			whole := map[[32]byte]string{sha256.Sum256(old): "old", sha256.Sum256(next): "new"}
			interrupted := 0
			for _, d := range c.delays {
				fs := harness.Mount(t, gw, bucket, "--token", "1", "--holder", "A")
				cmd := exec.Command("bash", "-c", fmt.Sprintf(c.script, src, fs.Path(key)))
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(d)
				fs.Kill()
				werr := cmd.Wait()
				if werr != nil {
					interrupted++
				}
				if err := fs.Unmount(); err != nil {
					t.Logf("unmount of the killed mount: %v", err)
				}
				got := readObject(t, gw, bucket, key)
				which, ok := whole[sha256.Sum256(got.body)]
				if !got.exists || !ok {
					t.Fatalf("killed %v into the rewrite: the object is %d bytes (exists %v), neither the old nor the new content; mount log:\n%s", d, len(got.body), got.exists, fs.Log())
				}
				t.Logf("killed %v into the rewrite (writer %v): %s content", d, werr, which)
				if keys := userKeys(t, gw, bucket); len(keys) != 1 || keys[0] != key {
					t.Fatalf("after the kill the bucket holds %v, want only %s", keys, key)
				}
			}
			if interrupted < 2 {
				t.Fatalf("only %d of %d kills interrupted the writer: the test did not test", interrupted, len(c.delays))
			}
		})
	}
}
