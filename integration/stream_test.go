package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
)

// streamSource is a reproducible stream of pseudo-random bytes (1 GiB of
// it is generated in about a second, never held in memory).
func streamSource(seed uint64, n int64) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}), n)
}

// writeStream writes n bytes of streamSource(seed) to w in 1 MiB writes and
// returns their SHA-256; stop (if not nil) is called after each write with
// the bytes written so far and stops the writing when it returns true.
func writeStream(w io.Writer, seed uint64, n int64, stop func(int64) bool) ([]byte, error) {
	h := sha256.New()
	buf := make([]byte, 1<<20)
	src := streamSource(seed, n)
	var done int64
	for {
		k, err := io.ReadFull(src, buf)
		if k > 0 {
			h.Write(buf[:k])
			if _, werr := w.Write(buf[:k]); werr != nil {
				return nil, werr
			}
			done += int64(k)
			if stop != nil && stop(done) {
				return nil, nil
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return h.Sum(nil), nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// sumOf is the SHA-256 of what r yields.
func sumOf(t *testing.T, r io.Reader) ([]byte, int64) {
	t.Helper()
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		t.Fatalf("reading back: %v", err)
	}
	return h.Sum(nil), n
}

// objectSum is the SHA-256 and size of key's body in the bucket.
func objectSum(ctx context.Context, t *testing.T, gw *gateway.Gateway, bucket, key string) ([]byte, int64) {
	t.Helper()
	o, err := gw.Client().GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	return sumOf(t, o)
}

// TestSequentialWriteLargerThanTheCacheDiskStreams writes 1 GiB front to
// back over an older version, with the default settings, through a mount
// whose cache directory is a 64 MiB filesystem: the write succeeds (parts
// already uploaded leave the staging file), close returns once the whole
// object is stored, and the bucket and the mount read back the very bytes
// written. On the gateway and on MinIO.
func TestSequentialWriteLargerThanTheCacheDiskStreams(t *testing.T) {
	gateway.ForEachServer(t, gateway.SingleDriveServers, func(t *testing.T, gw *gateway.Gateway) {
		bucket := gateway.NewBucket(t, gw)
		cache := smallDisk(t, "64m")
		fs := harness.Mount(t, gw, bucket, "--token", "1", "--cache-dir", cache)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := os.WriteFile(fs.Path("dump"), []byte("the previous dump\n"), 0o644); err != nil {
			t.Fatal(err)
		}

		const size = 1 << 30
		f, err := os.OpenFile(fs.Path("dump"), os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		want, err := writeStream(f, 7, size, nil)
		if err != nil {
			f.Close()
			t.Fatalf("writing 1 GiB with a 64 MiB cache disk: %v", err)
		}
		if err := f.Close(); err != nil {
			t.Fatalf("close of 1 GiB written with a 64 MiB cache disk: %v", err)
		}
		if got, n := objectSum(ctx, t, gw, bucket, "dump"); n != size || !bytes.Equal(got, want) {
			t.Fatalf("the bucket holds %d bytes with another checksum; want the %d written", n, int64(size))
		}
		r, err := os.Open(fs.Path("dump"))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if got, n := sumOf(t, r); n != size || !bytes.Equal(got, want) {
			t.Fatalf("the mount reads back %d bytes with another checksum; want the %d written", n, int64(size))
		}
		if left := uploadIDs(ctx, t, gw, bucket, "dump"); len(left) != 0 {
			t.Fatalf("uploads left behind: %v", left)
		}
	})
}

// TestStreamedWriteFailuresKeepTheOldContentWhole checks a file streamed
// with a 32 MiB staging bound, after parts have left the local disk: a
// kill -9 of the mount leaves the old content whole and no other object
// (`fencefs gc` then aborts the upload left behind), and a write back into
// a released part is ESPIPE, as is the close, with the old content kept
// and a log line saying why. On the gateway and on MinIO.
func TestStreamedWriteFailuresKeepTheOldContentWhole(t *testing.T) {
	gateway.ForEachServer(t, gateway.SingleDriveServers, func(t *testing.T, gw *gateway.Gateway) {
		bucket := gateway.NewBucket(t, gw)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		old := []byte("the old version\n")
		const bound = "32"

		t.Run("kill -9 mid-stream", func(t *testing.T) {
			fs := harness.Mount(t, gw, bucket, "--token", "1", "--holder", "A", "--stream-staging-mib", bound)
			if err := os.WriteFile(fs.Path("big"), old, 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(fs.Path("big"), os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			// 160 MiB written of 512: five times the bound, parts released.
			if _, err := writeStream(f, 3, 512<<20, func(n int64) bool { return n >= 160<<20 }); err != nil {
				t.Fatal(err)
			}
			if len(uploadIDs(ctx, t, gw, bucket, "big")) != 1 {
				t.Fatal("no upload of the file in progress while it is written")
			}
			fs.Kill()
			if got := readObject(t, gw, bucket, "big"); !bytes.Equal(got.body, old) {
				t.Fatalf("after kill -9 mid-stream the object holds %d bytes, want the old version", len(got.body))
			}
			if keys := userKeys(t, gw, bucket); len(keys) != 1 {
				t.Fatalf("objects after kill -9 mid-stream: %v, want only big", keys)
			}
			gcLeavesNoUploads(ctx, t, gw, bucket, "big")
		})

		t.Run("a write back into a released part", func(t *testing.T) {
			fs := harness.Mount(t, gw, bucket, "--token", "2", "--holder", "B", "--stream-staging-mib", bound)
			f, err := os.OpenFile(fs.Path("big"), os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := writeStream(f, 4, 128<<20, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("patch"), 50<<20); !errors.Is(err, syscall.ESPIPE) {
				t.Fatalf("a write back into a released part: %v; want ESPIPE", err)
			}
			if err := f.Close(); !errors.Is(err, syscall.ESPIPE) {
				t.Fatalf("close after the refused write: %v; want ESPIPE", err)
			}
			if got := readObject(t, gw, bucket, "big"); !bytes.Equal(got.body, old) {
				t.Fatalf("after the refused write the object holds %d bytes, want the old version", len(got.body))
			}
			if !strings.Contains(fs.Log(), "refused a change of a file being streamed") {
				t.Fatalf("no log line says why the write was refused:\n%s", fs.Log())
			}
			deadline := time.Now().Add(30 * time.Second)
			for len(uploadIDs(ctx, t, gw, bucket, "big")) != 0 {
				if time.Now().After(deadline) {
					t.Fatal("the refused stream's upload is still there 30 s after close")
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	})
}
