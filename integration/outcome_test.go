package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
)

// TestACommitThatLandedUnseenIsRecognisedByItsWriteID loses the responses
// of the gateway (the requests still reach it and are carried out) while
// a file is closed: that close fails with EIO, its outcome unknown,
// although the object landed. Once the link is whole again, the next
// commit of the file (the close of a second descriptor) recognises its own
// earlier attempt by the write id in the object's metadata: it succeeds,
// stores nothing more, and no log line calls the object someone else's or
// the changes lost. For a new file and for a rewrite of an existing one, on
// the gateway and on MinIO.
func TestACommitThatLandedUnseenIsRecognisedByItsWriteID(t *testing.T) {
	gateway.ForEachServer(t, gateway.SingleDriveServers, func(t *testing.T, gw *gateway.Gateway) {
		bucket := gateway.NewBucket(t, gw)
		proxy := harness.NewProxy(t, gw.Addr)
		// The commit's intent is written right before its PUT: the
		// after-validate failpoint holds the close between the two while
		// the proxy starts losing responses, so that only the PUT's is lost.
		pause := filepath.Join(t.TempDir(), "pause")
		fs := harness.MountWith(t, gw, bucket, harness.Options{Failpoints: true,
			Env: []string{"FENCEFS_FAILPOINTS=after-validate=pause-file:" + pause}},
			"--endpoint", proxy.Endpoint(), "--token", "1", "--s3-timeout", "1s", "--s3-retry-deadline", "3s")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := os.WriteFile(fs.Path("existing"), []byte("the old version"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name, file string
			flags      int
		}{
			{"a new file", "new", os.O_CREATE | os.O_EXCL | os.O_WRONLY},
			{"a rewrite", "existing", os.O_WRONLY | os.O_TRUNC},
		} {
			t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
				data := []byte("written while the responses were lost: " + tc.name)
				w, err := os.OpenFile(fs.Path(tc.file), tc.flags, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				if _, err := w.Write(data); err != nil {
					t.Fatal(err)
				}
				second, err := os.Open(fs.Path(tc.file)) // keeps the file open past the failed close
				if err != nil {
					t.Fatal(err)
				}
				defer second.Close()
				if err := os.WriteFile(pause, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				_ = os.Remove(pause + ".reached")
				closed := make(chan error, 1)
				go func() { closed <- w.Close() }()
				waitPaused(t, pause, closed) // the intent is written, the PUT is next
				proxy.LoseResponses(t)
				if err := os.Remove(pause); err != nil {
					t.Fatal(err)
				}
				err = <-closed
				proxy.KeepResponses(t)
				if !errors.Is(err, syscall.EIO) {
					t.Fatalf("close while the responses are lost: %v; want EIO", err)
				}
				got := readObject(t, gw, bucket, tc.file)
				if !bytes.Equal(got.body, data) {
					t.Fatalf("the bucket holds %q: the commit did not land, this test proves nothing", got.body)
				}
				info, err := gw.Client().StatObject(ctx, bucket, tc.file, minio.StatObjectOptions{})
				if err != nil {
					t.Fatal(err)
				}
				var closeErr error
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
					// The breaker may still report the storage down for a moment.
					if closeErr = second.Close(); !errors.Is(closeErr, syscall.EIO) || time.Now().After(deadline) {
						break
					}
					if second, err = os.Open(fs.Path(tc.file)); err != nil {
						t.Fatal(err)
					}
				}
				if closeErr != nil {
					t.Fatalf("the next close after the link healed: %v; want success (its earlier attempt landed)", closeErr)
				}
				after, err := gw.Client().StatObject(ctx, bucket, tc.file, minio.StatObjectOptions{})
				if err != nil || after.ETag != info.ETag || after.LastModified != info.LastModified {
					t.Fatalf("the object was written again (ETag %s → %s, %v); want the landed attempt kept", info.ETag, after.ETag, err)
				}
				log := fs.Log()
				for _, bad := range []string{"created concurrently", "they are lost", "changed since it was read"} {
					if strings.Contains(log, bad) {
						t.Fatalf("the mount's log says %q about its own landed commit:\n%s", bad, log)
					}
				}
				if !strings.Contains(log, "a commit whose outcome was unknown had landed") {
					t.Fatalf("no log line recognises the landed commit:\n%s", log)
				}
			})
		}
	})
}

// TestAStreamedCommitThatLandedUnseenIsRecognisedByItsWriteID is the same
// for a file streamed past its staging bound (its early parts are no longer
// on local disk, so it could not be uploaded again): the Complete's response
// is lost (a failpoint holds the commit until the responses are dropped),
// close fails with EIO, and the next commit recognises the landed Complete
// by its write id: success, the object whole, no upload left behind.
func TestAStreamedCommitThatLandedUnseenIsRecognisedByItsWriteID(t *testing.T) {
	gateway.ForEachServer(t, gateway.SingleDriveServers, func(t *testing.T, gw *gateway.Gateway) {
		bucket := gateway.NewBucket(t, gw)
		proxy := harness.NewProxy(t, gw.Addr)
		pause := filepath.Join(t.TempDir(), "pause")
		fs := harness.MountWith(t, gw, bucket, harness.Options{Failpoints: true,
			Env: []string{"FENCEFS_FAILPOINTS=after-validate@big=pause-file:" + pause}},
			"--endpoint", proxy.Endpoint(), "--token", "1", "--stream-staging-mib", "16",
			"--s3-timeout", "1s", "--s3-retry-deadline", "3s")
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		w, err := os.OpenFile(fs.Path("big"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		want, err := writeStream(w, 5, 48<<20+777, nil)
		if err != nil {
			t.Fatal(err)
		}
		second, err := os.Open(fs.Path("big"))
		if err != nil {
			t.Fatal(err)
		}
		defer second.Close()
		if err := os.WriteFile(pause, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		closed := make(chan error, 1)
		go func() { closed <- w.Close() }()
		waitPaused(t, pause, closed)
		proxy.LoseResponses(t)
		if err := os.Remove(pause); err != nil {
			t.Fatal(err)
		}
		err = <-closed
		proxy.KeepResponses(t)
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("close while the Complete's response is lost: %v; want EIO", err)
		}
		if got, n := objectSum(ctx, t, gw, bucket, "big"); n != 48<<20+777 || !bytes.Equal(got, want) {
			t.Fatalf("the bucket holds %d bytes: the Complete did not land, this test proves nothing", n)
		}
		var closeErr error
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if closeErr = second.Close(); !errors.Is(closeErr, syscall.EIO) || time.Now().After(deadline) {
				break
			}
			if second, err = os.Open(fs.Path("big")); err != nil {
				t.Fatal(err)
			}
		}
		if closeErr != nil {
			t.Fatalf("the next close after the link healed: %v; want success (the Complete landed)", closeErr)
		}
		if got, n := objectSum(ctx, t, gw, bucket, "big"); n != 48<<20+777 || !bytes.Equal(got, want) {
			t.Fatalf("the bucket holds %d bytes, not the file written", n)
		}
		log := fs.Log()
		for _, bad := range []string{"created concurrently", "they are lost"} {
			if strings.Contains(log, bad) {
				t.Fatalf("the mount's log says %q about its own landed commit", bad)
			}
		}
		if left := uploadIDs(ctx, t, gw, bucket, "big"); len(left) != 0 {
			t.Fatalf("uploads left behind: %v", left)
		}
	})
}
