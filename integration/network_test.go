package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
)

// timedOp runs op (failing the test if it blocks past limit) and returns
// how long it took and its error.
func timedOp(t *testing.T, limit time.Duration, op func() error) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	err := opResult(t, limit, op)
	return time.Since(start), err
}

// TestCutNetworkFailsClosedFastAndRecoversAtOnce breaks the link between a
// mount with the default timeouts and the gateway in three ways: a black
// hole (toxiproxy drops every byte, connections stay open), a stopped
// server (SIGSTOP: the kernel still accepts and buffers) and resets. The
// first write+close or cold read fails with EIO within the idle timeout
// plus the breaker's probe (asserted < 30 s); the next call while the
// storage is known down fails within a second (one probe of 750 ms;
// asserted < 1.4 s, less than two probes) although the first call's
// handle, released meanwhile, retries its commit; nothing refused lands;
// after the repair, the very first call succeeds.
func TestCutNetworkFailsClosedFastAndRecoversAtOnce(t *testing.T) {
	harness.RequireFUSE(t)
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	proxy := harness.NewProxy(t, gw.Addr)
	a := harness.Mount(t, gw, bucket, "--endpoint", proxy.Endpoint(), "--token", "17", "--holder", "A",
		"--meta-ttl", "0s", "--attr-ttl", "0s", "--entry-ttl", "0s")
	if err := os.WriteFile(a.Path("f"), []byte("before the cut"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Cold files: each is read through the mount once at most, so that
	// no cache of the mount can answer.
	cold := []byte("never read through the mount before")
	for i := 1; i <= 5; i++ {
		if _, err := gw.Client().PutObject(ctx, bucket, fmt.Sprintf("cold%d", i), bytes.NewReader(cold), int64(len(cold)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	write := func(data string) func() error {
		return func() error { return writeClose(a.Path("f"), os.O_WRONLY|os.O_TRUNC, []byte(data)) }
	}
	readCold := func(name string) func() error {
		return func() error {
			got, err := os.ReadFile(a.Path(name))
			if err == nil && !bytes.Equal(got, cold) {
				return fmt.Errorf("read %q", got)
			}
			return err
		}
	}
	cut, heal := func() { proxy.Cut(t) }, func() { proxy.Heal(t) }
	stop := func() {
		if err := syscall.Kill(gw.Pid(), syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	cont := func() {
		if err := syscall.Kill(gw.Pid(), syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = syscall.Kill(gw.Pid(), syscall.SIGCONT) })
	// Each round breaks the link, makes a first call (it meets the fault:
	// EIO after the idle timeout for a black hole) and a next one (the
	// storage is known down: EIO at once), repairs the link, and makes the
	// first call again: it must succeed.
	want := "before the cut" // f's content, which a refused write must not change
	for _, round := range []struct {
		name          string
		fault, repair func()
		first, next   func() error
		healed        func() error
		after         string // f's content after healed
	}{
		{"write+close across a black hole", cut, heal, write("during the cut"), write("during the cut, again"), write("after healing"), "after healing"},
		{"cold read across a black hole", cut, heal, readCold("cold1"), readCold("cold2"), readCold("cold1"), "after healing"},
		{"write+close to a stopped server", stop, cont, write("while stopped"), readCold("cold3"), write("after SIGCONT"), "after SIGCONT"},
		{"write+close through resets", func() { proxy.Reset(t) }, func() { proxy.Unreset(t) }, write("while reset"), readCold("cold4"), write("after the resets"), "after the resets"},
	} {
		round.fault()
		for _, call := range []struct {
			which string
			op    func() error
			limit time.Duration // a functional bound, with margin
		}{
			{"first", round.first, 30 * time.Second},
			{"next", round.next, 1400 * time.Millisecond},
		} {
			took, err := timedOp(t, 90*time.Second, call.op)
			t.Logf("%s: %s call: %v after %v", round.name, call.which, err, took.Round(time.Millisecond))
			if !errors.Is(err, syscall.EIO) {
				t.Errorf("%s: %s call: err = %v, want EIO", round.name, call.which, err)
			}
			if took > call.limit {
				t.Errorf("%s: %s call failed after %v, want within %v", round.name, call.which, took, call.limit)
			}
		}
		round.repair()
		if took, err := timedOp(t, 30*time.Second, round.healed); err != nil {
			t.Fatalf("%s: first call after the repair: %v (after %v)", round.name, err, took)
		}
		got := readObject(t, gw, bucket, "f")
		if string(got.body) != round.after || got.epoch != "17" {
			t.Fatalf("%s: f = %q stamped %q, want %q (the refused write %q must not have landed), stamped 17", round.name, got.body, got.epoch, round.after, want)
		}
		want = round.after
	}
}

// TestSlowButMovingUploadThroughTheMountSucceeds limits the link to the
// gateway to 4 MiB/s and writes a file whose upload takes at least twice the
// idle timeout: the bytes keep moving, so close succeeds and the object
// holds every byte. (toxiproxy acknowledges what it has not passed on yet,
// up to a whole part: one part must pass the toxic within the idle timeout,
// 8 MiB in 2 s here; a real slow link keeps them in the sender's queue,
// which counts as moving.)
func TestSlowButMovingUploadThroughTheMountSucceeds(t *testing.T) {
	harness.RequireFUSE(t)
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	proxy := harness.NewProxy(t, gw.Addr)
	const idle = 4 * time.Second
	a := harness.Mount(t, gw, bucket, "--endpoint", proxy.Endpoint(), "--token", "17", "--holder", "A",
		"--s3-timeout", idle.String(), "--s3-concurrency", "1")
	data := bytes.Repeat([]byte("slow but moving "), (40<<20)/16) // 40 MiB: five 8 MiB parts, one at a time
	proxy.Slow(t, 4096)
	took, err := timedOp(t, 3*time.Minute, func() error {
		return writeClose(a.Path("big"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, data)
	})
	proxy.Unslow(t)
	if err != nil {
		t.Fatalf("write+close through a slow link: %v (after %v)\n%s", err, took, a.Log())
	}
	if took < 2*idle {
		t.Fatalf("the upload took %v: the link was not slow enough to outlast the idle timeout %v (test setup)", took, idle)
	}
	if strings.Contains(a.Log(), "no byte moved") {
		t.Errorf("a request of the slow but moving upload timed out (then was retried):\n%s", a.Log())
	}
	if got := readObject(t, gw, bucket, "big"); !bytes.Equal(got.body, data) {
		t.Fatalf("big holds %d bytes after close succeeded, want %d", len(got.body), len(data))
	}
}

// answering is a loopback reverse proxy in front of the gateway that, while
// armed, answers requests itself with an injected status (as servers
// answer transient trouble in their own ways) instead of forwarding them.
type answering struct {
	srv *httptest.Server

	mu     sync.Mutex
	status int    // GUARDED_BY(mu); 0: forward everything
	code   string // S3 error code ("" no body); GUARDED_BY(mu)
	left   int    // answers to inject before forwarding again (<0: all); GUARDED_BY(mu)
}

func newAnswering(t *testing.T, endpoint string) *answering {
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	a := &answering{}
	rp := httputil.NewSingleHostReverseProxy(u) // keeps the signed Host header
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status, code := a.take(); status != 0 {
			if code != "" {
				w.Header().Set("Content-Type", "application/xml")
			}
			w.WriteHeader(status)
			if code != "" && r.Method != http.MethodHead {
				fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected</Message></Error>`, code)
			}
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// arm makes the next n requests (n < 0: all, until arm(0, "", 0)) get
// status with S3 error code.
func (a *answering) arm(status int, code string, n int) {
	a.mu.Lock()
	a.status, a.code, a.left = status, code, n
	a.mu.Unlock()
}

func (a *answering) take() (int, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.status == 0 || a.left == 0 {
		return 0, ""
	}
	if a.left > 0 {
		a.left--
	}
	return a.status, a.code
}

// TestTransientAnswersReachTheApplicationAsEIO puts a proxy that answers
// for the server between a mount and the gateway: a few MinIO-style 499
// ClientDisconnected answers while the mount binds its token are retried
// (the mount comes up); answers that last — a bare 499 (as MinIO's HEADs
// get), 503 SlowDown, 500, an unknown 418 — make lookups, creates and
// writes fail with EIO within the retry deadline, never EINVAL; once the
// server answers normally again, every call works.
func TestTransientAnswersReachTheApplicationAsEIO(t *testing.T) {
	harness.RequireFUSE(t)
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	ans := newAnswering(t, gw.Endpoint)
	ans.arm(499, "ClientDisconnected", 3)
	a := harness.Mount(t, gw, bucket, "--endpoint", ans.srv.URL, "--token", "17", "--holder", "A",
		"--s3-retry-deadline", "2s", "--meta-ttl", "0s", "--attr-ttl", "0s", "--entry-ttl", "0s")
	if err := os.WriteFile(a.Path("f"), []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Lookups are of names the mount never saw (it may trust what it
	// cached of its own files), one per answer.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var seen int
	for i := 0; i < 5; i++ {
		if _, err := gw.Client().PutObject(ctx, bucket, fmt.Sprintf("other%d", i), bytes.NewReader([]byte("o")), 1, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ops := []struct {
		name string
		op   func() error
	}{
		{"lookup", func() error { _, err := os.Stat(a.Path(fmt.Sprintf("other%d", seen))); seen++; return err }},
		{"create", func() error { return writeClose(a.Path("g"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, []byte("g")) }},
		{"write+close", func() error { return writeClose(a.Path("f"), os.O_WRONLY|os.O_TRUNC, []byte("during")) }},
	}
	for _, answer := range []struct {
		status int
		code   string
	}{
		{499, ""},
		{499, "ClientDisconnected"},
		{503, "SlowDown"},
		{500, "InternalError"},
		{418, ""},
	} {
		ans.arm(answer.status, answer.code, -1)
		for _, o := range ops {
			took, err := timedOp(t, 60*time.Second, o.op)
			if !errors.Is(err, syscall.EIO) {
				t.Errorf("%s while the server answers %d %s: %v, want EIO", o.name, answer.status, answer.code, err)
			}
			if took > 30*time.Second {
				t.Errorf("%s while the server answers %d %s failed after %v, want within the retry deadline (2 s) and margin", o.name, answer.status, answer.code, took)
			}
		}
		ans.arm(0, "", 0)
		// (f may hold "during" now: the handle's RELEASE commits again,
		// possibly once the server answers — EIO is "not known to be
		// stored", not "not stored". g's create failed at its open.)
		if got := readObject(t, gw, bucket, "g"); got.exists {
			t.Fatalf("g exists after a refused create: %q", got.body)
		}
	}
	if err := writeClose(a.Path("f"), os.O_WRONLY|os.O_TRUNC, []byte("after")); err != nil {
		t.Fatalf("write+close once the server answers again: %v", err)
	}
	if got := readObject(t, gw, bucket, "f"); string(got.body) != "after" {
		t.Fatalf("f = %q, want the acknowledged write", got.body)
	}
}

// TestAReaderMountFailsFastWhileTheStorageIsDown: on a mount that does not
// lead, an open sends the GET that captures the version it reads
// (fusefs/file_capture.go). With the link to the storage cut, a read of a file
// the kernel still knows fails with EIO, the next one at once (the open's
// GET is part of the call and waits for no second check), and after healing
// the read returns the file.
func TestAReaderMountFailsFastWhileTheStorageIsDown(t *testing.T) {
	harness.RequireFUSE(t)
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	proxy := harness.NewProxy(t, gw.Addr)
	want := []byte("read by a mount that does not lead")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := gw.Client().PutObject(ctx, bucket, "f", bytes.NewReader(want), int64(len(want)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	// The kernel keeps the name and the attributes; the mount trusts no
	// version it fetched: every open asks the storage.
	r := harness.Mount(t, gw, bucket, "--endpoint", proxy.Endpoint(), "--holder", "R",
		"--meta-ttl", "0s", "--attr-ttl", "10m", "--entry-ttl", "10m")
	read := func() error {
		got, err := os.ReadFile(r.Path("f"))
		if err == nil && !bytes.Equal(got, want) {
			return fmt.Errorf("read %q", got)
		}
		return err
	}
	if err := read(); err != nil {
		t.Fatal(err)
	}
	proxy.Cut(t)
	for _, call := range []struct {
		which string
		limit time.Duration // a functional bound, with margin
	}{{"first", 30 * time.Second}, {"next", 1400 * time.Millisecond}} {
		took, err := timedOp(t, 90*time.Second, read)
		t.Logf("%s read while cut: %v after %v", call.which, err, took.Round(time.Millisecond))
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("%s read while cut: err = %v, want EIO", call.which, err)
		}
		if took > call.limit {
			t.Errorf("%s read while cut failed after %v, want within %v", call.which, took, call.limit)
		}
	}
	proxy.Heal(t)
	if took, err := timedOp(t, 30*time.Second, read); err != nil {
		t.Fatalf("read after healing: %v (after %v)\n%s", err, took, r.Log())
	}
}
