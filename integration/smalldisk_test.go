package integration

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
)

// TestStreamingNeedsACacheDiskOfThreeMinimumParts checks the cache disk a
// file written front to back needs: three parts of S3's minimum 5 MiB.
// Through a mount whose cache directory is a 16 MiB filesystem (too small
// for three parts of the default 8 MiB), 200 MiB written with dd, through a
// pipe and with cp succeed: the bucket holds the very bytes written and no
// other object, and no upload is left behind. Through one of 12 MiB, a
// write of 64 MiB over an older version fails with ENOSPC (from write(2) or
// close(2)) and the bucket keeps the previous version whole and gains no
// object. On the gateway and on MinIO.
func TestStreamingNeedsACacheDiskOfThreeMinimumParts(t *testing.T) {
	const size = 200 << 20
	src := filepath.Join(t.TempDir(), "src")
	want := writeSourceFile(t, src, 11, size)
	gateway.ForEachServer(t, gateway.SingleDriveServers, func(t *testing.T, gw *gateway.Gateway) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		t.Run("a 16 MiB disk streams 200 MiB", func(t *testing.T) {
			bucket := gateway.NewBucket(t, gw)
			fs := harness.Mount(t, gw, bucket, "--token", "1", "--cache-dir", smallDisk(t, "16m"))
			for _, tc := range []struct {
				name, key string
				old       bool // written over an older version
				cmd       func(dst string) *exec.Cmd
			}{
				{"dd", "dd.bin", true, func(dst string) *exec.Cmd {
					return exec.Command("dd", "if="+src, "of="+dst, "bs=1M")
				}},
				{"a pipe", "pipe.bin", false, func(dst string) *exec.Cmd {
					c := exec.Command("sh", "-c", `head -c 200M > "$1"`, "sh", dst)
					f, err := os.Open(src)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { f.Close() })
					c.Stdin = struct{ io.Reader }{f} // not an *os.File: the shell reads a pipe
					return c
				}},
				{"cp", "cp.bin", true, func(dst string) *exec.Cmd { return exec.Command("cp", src, dst) }},
			} {
				t.Run(tc.name, func(t *testing.T) {
					if tc.old {
						if err := os.WriteFile(fs.Path(tc.key), []byte("the previous version\n"), 0o644); err != nil {
							t.Fatal(err)
						}
					}
					if out, err := tc.cmd(fs.Path(tc.key)).CombinedOutput(); err != nil {
						t.Fatalf("%s of 200 MiB with a 16 MiB cache disk: %v\n%s", tc.name, err, out)
					}
					if got, n := objectSum(ctx, t, gw, bucket, tc.key); n != size || !bytes.Equal(got, want) {
						t.Fatalf("the bucket holds %d bytes with another checksum; want the %d written", n, int64(size))
					}
					// 40 parts: the cache disk's room chose 5 MiB parts.
					if info, err := gw.Client().StatObject(ctx, bucket, tc.key, minio.StatObjectOptions{}); err != nil || !strings.HasSuffix(info.ETag, "-40") {
						t.Fatalf("the object's ETag is %q (%v); want one of a 40-part upload", info.ETag, err)
					}
					if left := uploadIDs(ctx, t, gw, bucket, tc.key); len(left) != 0 {
						t.Fatalf("uploads left behind: %v", left)
					}
				})
			}
			if keys := userKeys(t, gw, bucket); !slices.Equal(keys, []string{"cp.bin", "dd.bin", "pipe.bin"}) {
				t.Errorf("objects in the bucket: %v; want only the three written", keys)
			}
		})
		t.Run("a 12 MiB disk fails with ENOSPC", func(t *testing.T) {
			bucket := gateway.NewBucket(t, gw)
			fs := harness.Mount(t, gw, bucket, "--token", "1", "--cache-dir", smallDisk(t, "12m"))
			old := []byte("the previous version\n")
			if err := os.WriteFile(fs.Path("big"), old, 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(fs.Path("big"), os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = writeStream(f, 12, 64<<20, nil)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("writing 64 MiB with a 12 MiB cache disk: %v; want ENOSPC", err)
			}
			if got := objectBody(ctx, t, gw, bucket, "big"); !bytes.Equal(got, old) {
				t.Fatalf("the bucket holds %d bytes; want the previous version (%d bytes)", len(got), len(old))
			}
			if keys := userKeys(t, gw, bucket); !slices.Equal(keys, []string{"big"}) {
				t.Fatalf("objects in the bucket: %v; want only big", keys)
			}
			if left := uploadIDs(ctx, t, gw, bucket, "big"); len(left) != 0 {
				t.Fatalf("uploads left behind: %v", left)
			}
		})
	})
}

// writeSourceFile writes n bytes of streamSource(seed) to path and returns
// their SHA-256.
func writeSourceFile(t *testing.T, path string, seed uint64, n int64) []byte {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := writeStream(f, seed, n, nil)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("writing the source file: %v", err)
	}
	return sum
}
