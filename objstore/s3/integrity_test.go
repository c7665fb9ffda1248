package s3_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/s3"
	"github.com/fencefs/fencefs/objstore/storetest"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Environment of the writer subprocess of TestWriterKilledMidBody.
const (
	childEnv    = "FENCEFS_OBJSTORE_KILL_CHILD" // the mode; set only in the child
	childBlock  = "BLOCKED"                     // printed when the body stalls
	childPrefix = "FENCEFS_OBJSTORE_KILL_"
)

// TestWriterKilledMidBody kills (SIGKILL) a process in the middle of sending
// an object body and checks that the gateway did not publish a truncated
// object: the old object, or its absence, remains. The "unsigned" case is
// the control: the same kill on an UNSIGNED-PAYLOAD PUT (what minio-go
// sends over HTTPS by default) does publish a truncated object on the
// pinned gateway, which shows the kill really lands mid-body.
func TestWriterKilledMidBody(t *testing.T) {
	gw := gateway.ForTest(t)
	cfg := config(t, gw)
	s := newStore(t, cfg)
	ctx := ctxT(t)
	const size = 4 << 20
	for _, tc := range []struct {
		name     string
		mode     string // child mode
		existing bool   // an old object is in place
		cond     string // "if-match", "if-none-match", ""
		control  bool   // expect the truncated object to be published
	}{
		{"plain put with If-Match over an old object", "plain", true, "if-match", false},
		{"plain put with If-None-Match on a missing key", "plain", false, "if-none-match", false},
		{"unconditional plain put over an old object", "plain", true, "", false},
		{"multipart put with If-Match over an old object", "multipart", true, "if-match", false},
		{"control: UNSIGNED-PAYLOAD put with If-Match is published truncated", "unsigned", true, "if-match", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := strings.ReplaceAll(tc.name, " ", "-")
			key = key[:min(len(key), 60)]
			var old objstore.ObjectInfo
			var oldData []byte
			if tc.existing {
				oldData = storetest.Random(1000)
				old = storetest.MustPut(t, ctx, s, key, oldData, objstore.PutOptions{})
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestWriterChildProcess$", "-test.v")
			cmd.Env = append(os.Environ(),
				childEnv+"="+tc.mode,
				childPrefix+"ENDPOINT="+cfg.Endpoint,
				childPrefix+"BUCKET="+cfg.Bucket,
				childPrefix+"ACCESS="+cfg.AccessKey,
				childPrefix+"SECRET="+cfg.SecretKey,
				childPrefix+"KEY="+key,
				childPrefix+"COND="+tc.cond,
				childPrefix+"ETAG="+old.ETag,
				childPrefix+"SIZE="+strconv.Itoa(size),
			)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			blocked := make(chan bool, 1)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					if strings.TrimSpace(sc.Text()) == childBlock {
						blocked <- true
						io.Copy(io.Discard, stdout)
						return
					}
				}
				blocked <- false
			}()
			select {
			case ok := <-blocked:
				if !ok {
					cmd.Wait()
					t.Fatal("the writer exited without stalling mid-body")
				}
			case <-time.After(20 * time.Second):
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatal("the writer did not reach the middle of the body")
			}
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()

			// The gateway handles the broken request asynchronously: watch
			// the key for a while (bounded), and require it never to hold
			// anything but the old state. The control waits for the
			// truncated object instead.
			deadline := time.Now().Add(1 * time.Second)
			if tc.control {
				deadline = time.Now().Add(15 * time.Second)
			}
			for {
				info, err := s.Stat(ctx, key)
				switch {
				case tc.control && err == nil && info.ETag != old.ETag:
					if info.Size >= size {
						t.Fatalf("control: a whole object (%d bytes) was published", info.Size)
					}
					t.Logf("control: the gateway published %d of %d bytes from the killed UNSIGNED-PAYLOAD writer (the hazard)", info.Size, size)
					return
				case tc.control:
				case !tc.existing && !errors.Is(err, objstore.ErrNotFound):
					t.Fatalf("a killed writer published %+v (err %v)", info, err)
				case tc.existing && (err != nil || info.ETag != old.ETag):
					t.Fatalf("a killed writer replaced the object: %+v (err %v)", info, err)
				}
				if time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if tc.control {
				t.Fatal("control: the truncated object never appeared; the kill may not land mid-body, so the other cases prove nothing")
			}
			if tc.existing {
				got, _ := storetest.ReadAll(t, ctx, s, key, objstore.GetOptions{})
				if !bytes.Equal(got, oldData) {
					t.Fatal("the old object's content changed")
				}
			}
			if tc.mode == "multipart" {
				// The dead writer's upload is left behind: garbage
				// collection finds it and aborts it.
				var ups []objstore.Upload
				if err := s.ListUploads(ctx, key, func(u objstore.Upload) error { ups = append(ups, u); return nil }); err != nil {
					t.Fatal(err)
				}
				if len(ups) != 1 || ups[0].Key != key || ups[0].UploadID == "" || ups[0].Initiated.IsZero() {
					t.Fatalf("uploads %+v", ups)
				}
				if err := s.AbortUpload(ctx, key, ups[0].UploadID); err != nil {
					t.Fatal(err)
				}
				if err := s.AbortUpload(ctx, key, ups[0].UploadID); !errors.Is(err, objstore.ErrNotFound) {
					t.Fatalf("second abort: %v", err)
				}
				ups = nil
				if err := s.ListUploads(ctx, "", func(u objstore.Upload) error { ups = append(ups, u); return nil }); err != nil || len(ups) != 0 {
					t.Fatalf("after abort: %+v %v", ups, err)
				}
			}
		})
	}
}

// stallingReader serves size bytes of a pattern through ReadAt and stalls
// forever once more than limit bytes in total were read, after announcing
// it on stdout.
type stallingReader struct {
	size, limit int64
	pattern     []byte // repeated; a random 64 KiB
	read        atomic.Int64
	once        sync.Once
}

func (r *stallingReader) ReadAt(p []byte, off int64) (int, error) {
	if r.read.Add(int64(len(p))) > r.limit {
		r.once.Do(func() { fmt.Println(childBlock) })
		select {}
	}
	if off >= r.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), r.size-off)
	for i := int64(0); i < n; {
		j := (off + i) % int64(len(r.pattern))
		i += int64(copy(p[i:n], r.pattern[j:]))
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// TestWriterChildProcess is the writer subprocess of TestWriterKilledMidBody;
// it does nothing unless started by it.
func TestWriterChildProcess(t *testing.T) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		return // only does something as the subprocess of TestWriterKilledMidBody
	}
	env := func(k string) string { return os.Getenv(childPrefix + k) }
	size, _ := strconv.Atoi(env("SIZE"))
	ctx := context.Background()
	cond := objstore.Condition{}
	switch env("COND") {
	case "if-match":
		cond.IfMatch = env("ETAG")
	case "if-none-match":
		cond.IfNoneMatch = true
	}
	pattern := make([]byte, 64<<10)
	_, _ = rand.Read(pattern)
	if mode == "unsigned" {
		// What minio-go sends over HTTPS by default, and this package never
		// does: no payload hash at all.
		c, err := minio.NewCore(strings.TrimPrefix(env("ENDPOINT"), "http://"), &minio.Options{
			Creds: credentials.NewStaticV4(env("ACCESS"), env("SECRET"), ""), Region: "us-east-1",
			BucketLookup: minio.BucketLookupPath, MaxRetries: 1,
		})
		if err != nil {
			t.Fatal(err)
		}
		opts := minio.PutObjectOptions{DisableContentSha256: true}
		if cond.IfMatch != "" {
			opts.SetMatchETag(cond.IfMatch)
		}
		r := &stallingReader{size: int64(size), pattern: pattern, limit: int64(size / 2)}
		_, err = c.PutObject(ctx, env("BUCKET"), env("KEY"), io.NewSectionReader(r, 0, int64(size)), int64(size), "", "", opts)
		t.Fatalf("the unsigned writer was not killed: %v", err)
	}
	// The store sends through a forwarder that stalls the request stream
	// half-way into the body being tested (the store reads a body once,
	// hashes it and sends it from memory, so the stall is on the wire).
	opts := objstore.PutOptions{Cond: cond, Shape: objstore.ShapePlain}
	total := int64(size)
	limit := int64(size / 2)
	if mode == "multipart" {
		opts.Shape, opts.Parts = objstore.ShapeMultipart, 2
		total = objstore.MinPartSize + int64(size)
		// Part 1 sent whole, then stall half-way into part 2.
		limit = objstore.MinPartSize + int64(size)/2
	}
	endpoint := stallingForwarder(t, strings.TrimPrefix(env("ENDPOINT"), "http://"), limit)
	s, err := s3.New(ctx, s3.Config{Endpoint: "http://" + endpoint, Bucket: env("BUCKET"), AccessKey: env("ACCESS"),
		SecretKey: env("SECRET"), PathStyle: true, Concurrency: 1, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	r := &stallingReader{size: total, pattern: pattern, limit: 1 << 62}
	_, err = s.Put(ctx, env("KEY"), r, total, opts)
	t.Fatalf("the writer was not killed: %v", err)
}

// stallingForwarder forwards TCP connections to target and, once more than
// limit bytes in total went from clients to target, stops forwarding
// (without closing anything) and announces it on stdout.
func stallingForwarder(t *testing.T, target string, limit int64) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	var once sync.Once
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go io.Copy(c, u)
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if sent.Add(int64(n)) > limit {
							over := int(sent.Load() - limit)
							if over < n {
								u.Write(buf[:n-over])
							}
							once.Do(func() { fmt.Println(childBlock) })
							select {}
						}
						if _, werr := u.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						u.Close()
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}
