package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/s3"
	"github.com/fencefs/fencefs/objstore/storetest"
	"github.com/minio/minio-go/v7/pkg/signer"
)

// faultProxy is a loopback HTTP proxy in front of the gateway that applies
// one-shot faults to the requests matching a rule, in order.
type faultProxy struct {
	srv    *httptest.Server
	target *url.URL
	tr     *http.Transport
	// Credentials to re-sign "strip"ped requests with.
	access, secret, region string

	mu    sync.Mutex
	rules []*fault        // GUARDED_BY(mu)
	seen  []*http.Request // requests received (bodies not kept); GUARDED_BY(mu)
}

func (p *faultProxy) requests() []*http.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*http.Request(nil), p.seen...)
}

// fault describes one injected failure.
type fault struct {
	method string // request method to match
	query  string // a query parameter the request must have ("" any)
	// action: "status" answers status with an S3 error code without
	// forwarding (code "" sends no body); "reset" closes the connection
	// without forwarding; "drop" forwards the request (it is applied) and then
	// closes the connection without an answer; "cut" forwards and cuts
	// the response body after n bytes; "strip" removes the header named
	// code and re-signs the request before forwarding it (a server that
	// ignores that header).
	action string
	status int
	code   string
	n      int64
	after  func() // run after forwarding a "drop", before the connection closes
	times  int    // how many requests it applies to
	hits   int    // GUARDED_BY(faultProxy.mu)
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{target: u, tr: &http.Transport{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(func() { p.srv.Close(); p.tr.CloseIdleConnections() })
	return p
}

func (p *faultProxy) add(f *fault) {
	if f.times == 0 {
		f.times = 1
	}
	p.mu.Lock()
	p.rules = append(p.rules, f)
	p.mu.Unlock()
}

func (p *faultProxy) hits(f *fault) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return f.hits
}

func (p *faultProxy) match(r *http.Request) *fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.rules {
		if f.hits < f.times && f.method == r.Method && (f.query == "" || r.URL.Query().Has(f.query)) {
			f.hits++
			return f
		}
	}
	return nil
}

func (p *faultProxy) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.seen = append(p.seen, &http.Request{Method: r.Method, URL: r.URL, Header: r.Header.Clone(), ContentLength: r.ContentLength})
	p.mu.Unlock()
	f := p.match(r)
	if f != nil && f.action == "reset" {
		panic(http.ErrAbortHandler) // not forwarded: the connection just breaks
	}
	if f != nil && f.action == "status" {
		if f.code == "" {
			w.WriteHeader(f.status)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(f.status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected</Message></Error>`, f.code)
		return
	}
	out := r.Clone(r.Context())
	out.URL.Scheme, out.URL.Host = p.target.Scheme, p.target.Host
	out.RequestURI = ""
	out.Host = r.Host // signed
	if f != nil && f.action == "strip" {
		out.Header.Del(f.code)
		out.Header.Del("Authorization")
		out.Header.Del("X-Amz-Date")
		out = signer.SignV4(*out, p.access, p.secret, "", p.region)
	}
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	defer resp.Body.Close()
	if f != nil && f.action == "drop" {
		_, _ = io.Copy(io.Discard, resp.Body)
		if f.after != nil {
			f.after()
		}
		panic(http.ErrAbortHandler) // the write happened; its answer is lost
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	if f != nil && f.action == "cut" {
		_, _ = io.CopyN(w, resp.Body, f.n)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	_, _ = io.Copy(w, resp.Body)
}

// faultStores returns a store through a new fault proxy, and one talking to
// the gateway directly (to set up and check state).
func faultStores(t *testing.T, maxRetries int) (*faultProxy, *s3.Store, *s3.Store) {
	return faultStoresWith(t, func(c *s3.Config) { c.MaxRetries = maxRetries })
}

// faultStoresWith is faultStores with the proxied store's configuration
// changed by set.
func faultStoresWith(t *testing.T, set func(*s3.Config)) (*faultProxy, *s3.Store, *s3.Store) {
	gw := gateway.ForTest(t)
	cfg := config(t, gw)
	direct := newStore(t, cfg)
	p := newFaultProxy(t, gw.Endpoint)
	p.access, p.secret, p.region = gw.AccessKey, gw.SecretKey, gw.Region
	cfg.Endpoint = p.srv.URL
	set(&cfg)
	return p, newStore(t, cfg), direct
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func put(ctx context.Context, s objstore.Store, key, body string, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	return s.Put(ctx, key, strings.NewReader(body), int64(len(body)), opts)
}

func TestLostResponses(t *testing.T) {
	p, s, direct := faultStores(t, 0)
	ctx := ctxT(t)
	big := storetest.Random(int(objstore.MinPartSize) + 10)
	for _, tc := range []struct {
		name string
		// setup prepares the key; run is the write whose first answer is
		// lost; f is the fault.
		setup        func(t *testing.T) objstore.ObjectInfo
		f            *fault
		run          func(base objstore.ObjectInfo) error
		wantErr      error // nil: success
		wantUncertan bool
		check        func(t *testing.T)
	}{
		{
			name:  "unconditional put is retried to success",
			setup: func(t *testing.T) objstore.ObjectInfo { return objstore.ObjectInfo{} },
			f:     &fault{method: "PUT", action: "drop"},
			run: func(objstore.ObjectInfo) error {
				_, err := put(ctx, s, "k1", "data", objstore.PutOptions{})
				return err
			},
			check: func(t *testing.T) { wantBody(t, ctx, direct, "k1", "data") },
		},
		{
			name:  "create retried meets its own result: precondition, uncertain",
			setup: func(t *testing.T) objstore.ObjectInfo { return objstore.ObjectInfo{} },
			f:     &fault{method: "PUT", action: "drop"},
			run: func(objstore.ObjectInfo) error {
				_, err := put(ctx, s, "k2", "mine", objstore.PutOptions{Cond: objstore.Condition{IfNoneMatch: true}})
				return err
			},
			wantErr: objstore.ErrPrecondition, wantUncertan: true,
			check: func(t *testing.T) { wantBody(t, ctx, direct, "k2", "mine") },
		},
		{
			name: "CAS retried meets its own result: precondition, uncertain",
			setup: func(t *testing.T) objstore.ObjectInfo {
				return storetest.MustPut(t, ctx, direct, "k3", []byte("base"), objstore.PutOptions{})
			},
			f: &fault{method: "PUT", action: "drop"},
			run: func(base objstore.ObjectInfo) error {
				_, err := put(ctx, s, "k3", "next", objstore.PutOptions{Cond: objstore.Condition{IfMatch: base.ETag}})
				return err
			},
			wantErr: objstore.ErrPrecondition, wantUncertan: true,
			check: func(t *testing.T) { wantBody(t, ctx, direct, "k3", "next") },
		},
		{
			// The gateway answers a repeated Complete of an upload it
			// completed with success (as AWS does): the result is ours.
			name: "conditional complete retried is idempotent",
			setup: func(t *testing.T) objstore.ObjectInfo {
				return storetest.MustPut(t, ctx, direct, "k4", []byte("base"), objstore.PutOptions{})
			},
			f: &fault{method: "POST", query: "uploadId", action: "drop"},
			run: func(base objstore.ObjectInfo) error {
				_, err := s.Put(ctx, "k4", bytes.NewReader(big), int64(len(big)), objstore.PutOptions{Shape: objstore.ShapeMultipart, Parts: 2, Cond: objstore.Condition{IfMatch: base.ETag}})
				return err
			},
			check: func(t *testing.T) { wantBody(t, ctx, direct, "k4", string(big)) },
		},
		{
			// The gateway acknowledges a repeated Complete whenever the
			// key exists: here another writer replaced the object between
			// the attempts. The store must not report that as success.
			name: "repeated complete acknowledged over another object: unavailable, uncertain",
			setup: func(t *testing.T) objstore.ObjectInfo {
				return storetest.MustPut(t, ctx, direct, "k7", []byte("base"), objstore.PutOptions{})
			},
			f: &fault{method: "POST", query: "uploadId", action: "drop", after: func() {
				if _, err := put(ctx, direct, "k7", "other writer", objstore.PutOptions{}); err != nil {
					panic(err)
				}
			}},
			run: func(base objstore.ObjectInfo) error {
				_, err := s.Put(ctx, "k7", bytes.NewReader(big), int64(len(big)), objstore.PutOptions{Shape: objstore.ShapeMultipart, Parts: 2, Cond: objstore.Condition{IfMatch: base.ETag}})
				return err
			},
			wantErr: objstore.ErrUnavailable, wantUncertan: true,
			check: func(t *testing.T) { wantBody(t, ctx, direct, "k7", "other writer") },
		},
		{
			// The gateway answers If-Match on a missing key with success
			// on DELETE: the key is gone, as asked.
			name: "conditional delete retried succeeds",
			setup: func(t *testing.T) objstore.ObjectInfo {
				return storetest.MustPut(t, ctx, direct, "k5", []byte("base"), objstore.PutOptions{})
			},
			f: &fault{method: "DELETE", action: "drop"},
			run: func(base objstore.ObjectInfo) error {
				return s.Delete(ctx, "k5", objstore.Condition{IfMatch: base.ETag})
			},
			check: func(t *testing.T) {
				if _, err := direct.Stat(ctx, "k5"); !errors.Is(err, objstore.ErrNotFound) {
					t.Fatalf("the delete was applied: %v", err)
				}
			},
		},
		{
			name:  "lost part response is retried to success",
			setup: func(t *testing.T) objstore.ObjectInfo { return objstore.ObjectInfo{} },
			f:     &fault{method: "PUT", query: "partNumber", action: "drop"},
			run: func(objstore.ObjectInfo) error {
				_, err := s.Put(ctx, "k6", bytes.NewReader(big), int64(len(big)), objstore.PutOptions{Shape: objstore.ShapeMultipart, Parts: 2, Cond: objstore.Condition{IfNoneMatch: true}})
				return err
			},
			check: func(t *testing.T) { wantBody(t, ctx, direct, "k6", string(big)) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := tc.setup(t)
			p.add(tc.f)
			err := tc.run(base)
			if p.hits(tc.f) != 1 {
				t.Fatalf("the fault was not injected")
			}
			var ue *objstore.UncertainError
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("got %v, want success", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("got %v, want %v", err, tc.wantErr)
			case tc.wantErr != nil && errors.As(err, &ue) != tc.wantUncertan:
				t.Fatalf("uncertain=%v, want %v: %v", errors.As(err, &ue), tc.wantUncertan, err)
			case tc.wantErr != nil && objstore.MaybeApplied(err) != tc.wantUncertan:
				t.Fatalf("MaybeApplied wrong for %v", err)
			}
			tc.check(t)
			var ups []objstore.Upload
			_ = direct.ListUploads(ctx, "", func(u objstore.Upload) error { ups = append(ups, u); return nil })
			if len(ups) != 0 {
				t.Fatalf("uploads left behind: %+v", ups)
			}
		})
	}
}

// TestALostResponseMarksItsOperationEvenWhenTheRetrySucceeds: an attempt
// whose response was lost may still be applied later, whatever the final
// result of the write; the fencing layer keeps such a commit's intent for
// the next sweep, so the store must say so (HadUncertainAttempt).
func TestALostResponseMarksItsOperationEvenWhenTheRetrySucceeds(t *testing.T) {
	p, s, _ := faultStores(t, 0)
	ctx := ctxT(t)
	clean := objstore.WithRetryDeadline(ctx, time.Now().Add(time.Minute))
	if _, err := put(clean, s, "m1", "data", objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if objstore.HadUncertainAttempt(clean) {
		t.Fatal("a put answered at once is marked uncertain")
	}
	lost := objstore.WithRetryDeadline(ctx, time.Now().Add(time.Minute))
	f := &fault{method: "PUT", action: "drop"}
	p.add(f)
	if _, err := put(lost, s, "m2", "data", objstore.PutOptions{}); err != nil {
		t.Fatalf("the retried put: %v", err)
	}
	if p.hits(f) != 1 {
		t.Fatal("the fault was not injected")
	}
	if !objstore.HadUncertainAttempt(lost) {
		t.Fatal("a put retried to success after a lost response is not marked uncertain")
	}
}

func wantBody(t *testing.T, ctx context.Context, s objstore.Store, key, want string) {
	t.Helper()
	got, _ := storetest.ReadAll(t, ctx, s, key, objstore.GetOptions{})
	if string(got) != want {
		t.Fatalf("%s holds %d bytes, want %d", key, len(got), len(want))
	}
}

func TestRefusedAttemptsAreRetriedAndCertain(t *testing.T) {
	p, s, direct := faultStores(t, 2)
	ctx := ctxT(t)
	for _, tc := range []struct {
		name    string
		f       *fault
		wantErr error
	}{
		{"503 SlowDown then success", &fault{method: "PUT", action: "status", status: 503, code: "SlowDown", times: 2}, nil},
		{"409 ConditionalRequestConflict then success", &fault{method: "PUT", action: "status", status: 409, code: "ConditionalRequestConflict", times: 2}, nil},
		{"409 until retries run out", &fault{method: "PUT", action: "status", status: 409, code: "ConditionalRequestConflict", times: 3}, objstore.ErrConflict},
		{"503 until retries run out", &fault{method: "PUT", action: "status", status: 503, code: "SlowDown", times: 3}, objstore.ErrUnavailable},
		{"403 is not retried", &fault{method: "PUT", action: "status", status: 403, code: "AccessDenied"}, objstore.ErrAuth},
		{"412 is not retried", &fault{method: "PUT", action: "status", status: 412, code: "PreconditionFailed"}, objstore.ErrPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := strings.ReplaceAll(tc.name, " ", "-")
			p.add(tc.f)
			_, err := put(ctx, s, key, "x", objstore.PutOptions{Cond: objstore.Condition{IfNoneMatch: true}})
			if p.hits(tc.f) != tc.f.times {
				t.Fatalf("fault hit %d times, want %d", p.hits(tc.f), tc.f.times)
			}
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				wantBody(t, ctx, direct, key, "x")
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("got %v, want %v", err, tc.wantErr)
			}
			var ue *objstore.UncertainError
			if errors.As(err, &ue) {
				t.Fatalf("refusals are certain, got %v", err)
			}
			if _, err := direct.Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("a refused write was applied: %v", err)
			}
		})
	}
}

// TestGetResumesPinnedAfterABrokenBody cuts a GET response mid-body: the
// reader resumes with a GET pinned to the ETag and returns the whole
// object, or, if the object changed in between, fails with ErrPrecondition
// instead of mixing two versions.
func TestGetResumesPinnedAfterABrokenBody(t *testing.T) {
	p, s, direct := faultStores(t, 0)
	ctx := ctxT(t)
	data := storetest.Random(3 << 20)
	storetest.MustPut(t, ctx, direct, "k", data, objstore.PutOptions{})

	t.Run("unchanged object resumes", func(t *testing.T) {
		f := &fault{method: "GET", action: "cut", n: 1 << 20}
		p.add(f)
		got, _ := storetest.ReadAll(t, ctx, s, "k", objstore.GetOptions{})
		if p.hits(f) != 1 {
			t.Fatal("not cut")
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("resumed read differs (%d bytes)", len(got))
		}
	})
	t.Run("ranged read resumes within its range", func(t *testing.T) {
		f := &fault{method: "GET", action: "cut", n: 1000}
		p.add(f)
		got, _ := storetest.ReadAll(t, ctx, s, "k", objstore.GetOptions{Offset: 100, Length: 5000})
		if p.hits(f) != 1 || !bytes.Equal(got, data[100:5100]) {
			t.Fatalf("hits %d, %d bytes", p.hits(f), len(got))
		}
	})
	t.Run("changed object fails", func(t *testing.T) {
		f := &fault{method: "GET", action: "cut", n: 1 << 20}
		p.add(f)
		rc, _, err := s.Get(ctx, "k", objstore.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		head := make([]byte, 512<<10)
		if _, err := io.ReadFull(rc, head); err != nil {
			t.Fatal(err)
		}
		storetest.MustPut(t, ctx, direct, "k", storetest.Random(3<<20), objstore.PutOptions{})
		_, err = io.ReadAll(rc)
		if !errors.Is(err, objstore.ErrPrecondition) {
			t.Fatalf("read across a change: %v", err)
		}
	})
}

// TestProbeDetectsDeleteIgnoringIfMatch puts the real gateway behind a proxy
// that drops If-Match from every DELETE, like the last MinIO community
// release ignores it: the probe must report ConditionalDelete false with a
// reason, and nothing else.
func TestProbeDetectsDeleteIgnoringIfMatch(t *testing.T) {
	p, s, _ := faultStores(t, 0)
	ctx := ctxT(t)
	f := &fault{method: "DELETE", action: "strip", code: "If-Match", times: 1000}
	p.add(f)
	caps := objstore.Probe(ctx, s, "dom/")
	if p.hits(f) == 0 {
		t.Fatal("the proxy saw no DELETE")
	}
	for _, c := range caps.Checks() {
		// The gateway's listings carry no metadata (an optional feature).
		wantOK := c.Name != objstore.CheckConditionalDelete && c.Name != objstore.CheckListMetadata
		if c.OK != wantOK {
			t.Errorf("%s: ok=%v (%s), want %v", c.Name, c.OK, c.Reason, wantOK)
		}
	}
	if r := caps.Reasons[objstore.CheckConditionalDelete]; !strings.Contains(r, "ignores conditions on DELETE") {
		t.Errorf("reason %q", r)
	}
	var left []string
	if err := s.List(ctx, "", "", func(e objstore.Entry) error { left = append(left, e.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("probe left %v", left)
	}
}

// TestEveryBodyCarriesItsHashes checks on the wire that every PutObject and
// UploadPart is sent with its SHA-256 as the signed payload hash: never
// UNSIGNED-PAYLOAD, never a streaming (aws-chunked) body.
func TestEveryBodyCarriesItsHashes(t *testing.T) {
	p, s, _ := faultStores(t, 0)
	ctx := ctxT(t)
	big := storetest.Random(int(objstore.MinPartSize) + 1)
	storetest.MustPut(t, ctx, s, "plain", []byte("small body"), objstore.PutOptions{Cond: objstore.Condition{IfNoneMatch: true}})
	storetest.MustPut(t, ctx, s, "empty", nil, objstore.PutOptions{})
	storetest.MustPut(t, ctx, s, "multi", big, objstore.PutOptions{Shape: objstore.ShapeMultipart, Parts: 2})
	info := storetest.MustPut(t, ctx, s, "src", []byte("copy me"), objstore.PutOptions{})
	if _, err := s.Copy(ctx, "src", info.ETag, "dst", objstore.PutOptions{Shape: objstore.ShapePlain}); err != nil {
		t.Fatal(err)
	}
	bodies := 0
	for _, r := range p.requests() {
		if r.Method != http.MethodPut || r.Header.Get("X-Amz-Copy-Source") != "" {
			continue
		}
		bodies++
		sha := r.Header.Get("X-Amz-Content-Sha256")
		if len(sha) != 64 || strings.Trim(sha, "0123456789abcdef") != "" {
			t.Errorf("%s %s: x-amz-content-sha256 %q is not a payload hash", r.Method, r.URL, sha)
		}
		if enc := r.Header.Get("Content-Encoding"); strings.Contains(enc, "aws-chunked") {
			t.Errorf("%s %s: streaming body (%s)", r.Method, r.URL, enc)
		}
		if !strings.Contains(r.Header.Get("Authorization"), "x-amz-content-sha256") {
			t.Errorf("%s %s: the payload hash is not signed", r.Method, r.URL)
		}
	}
	if bodies != 6 { // plain, empty, 2 parts, src, dst
		t.Fatalf("saw %d body uploads, want 6", bodies)
	}
}

// TestAFailedUploadIsAbortedEvenWhenItsBudgetIsSpent: a multipart upload
// whose Complete is refused is aborted, and the abort is retried on a
// budget of its own, even when the upload's own was spent (an old leader
// resumed after a freeze: its commit began long ago).
func TestAFailedUploadIsAbortedEvenWhenItsBudgetIsSpent(t *testing.T) {
	p, s, direct := faultStores(t, 2)
	ctx := ctxT(t)
	base := storetest.MustPut(t, ctx, direct, "spent", []byte("base"), objstore.PutOptions{})
	big := storetest.Random(int(objstore.MinPartSize) + 10)
	complete := &fault{method: "POST", query: "uploadId", action: "status", status: 412, code: "PreconditionFailed"}
	abort := &fault{method: "DELETE", query: "uploadId", action: "status", status: 503, code: "SlowDown"}
	p.add(complete)
	p.add(abort)
	spent := objstore.WithRetryDeadline(ctx, time.Now().Add(-time.Second))
	_, err := s.Put(spent, "spent", bytes.NewReader(big), int64(len(big)), objstore.PutOptions{
		Shape: objstore.ShapeMultipart, Parts: 2, Cond: objstore.Condition{IfMatch: base.ETag}})
	if !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("put: %v, want a precondition failure", err)
	}
	if p.hits(complete) != 1 || p.hits(abort) != 1 {
		t.Fatalf("faults hit: complete %d, abort %d, want 1 each", p.hits(complete), p.hits(abort))
	}
	var ups []objstore.Upload
	if err := direct.ListUploads(ctx, "", func(u objstore.Upload) error { ups = append(ups, u); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(ups) != 0 {
		t.Fatalf("the refused abort was not retried: uploads left behind: %+v", ups)
	}
	wantBody(t, ctx, direct, "spent", "base")
}
