package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/s3"
	"github.com/fencefs/fencefs/objstore/storetest"
	"github.com/prometheus/client_golang/prometheus"
)

// config returns a Config for a fresh bucket on gw, with a small multipart
// threshold so that the conformance suite's multipart cases stay small.
func config(t *testing.T, gw *gateway.Gateway) s3.Config {
	return s3.Config{
		Endpoint:           gw.Endpoint,
		Bucket:             gateway.NewBucket(t, gw),
		Region:             gw.Region,
		AccessKey:          gw.AccessKey,
		SecretKey:          gw.SecretKey,
		PathStyle:          true,
		MultipartThreshold: 1 << 20,
		PartSize:           objstore.MinPartSize,
	}
}

func newStore(t *testing.T, cfg s3.Config) *s3.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := s3.New(ctx, cfg)
	if err != nil {
		t.Fatalf("s3.New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestConformanceOnEveryServer(t *testing.T) {
	gateway.ForEachServer(t, gateway.AllServers, func(t *testing.T, gw *gateway.Gateway) {
		q := storetest.Quirks{DeleteIgnoresIfMatch: gw.DeleteIgnoresIfMatch()}
		storetest.RunWithQuirks(t, q, func(t *testing.T) objstore.Store { return newStore(t, config(t, gw)) })
	})
}

func TestProbeAgainstGateway(t *testing.T) {
	gw := gateway.ForTest(t)
	s := newStore(t, config(t, gw))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	caps := objstore.Probe(ctx, s, "")
	for _, c := range caps.Checks() {
		t.Logf("%-28s ok=%v %s", c.Name, c.OK, c.Reason)
		switch {
		case c.Name == objstore.CheckListMetadata && c.OK:
			t.Errorf("the pinned gateway's listings carry no metadata, but the probe says %s", c.Name)
		case !c.OK && !c.Optional:
			t.Errorf("the pinned gateway must pass %s: %s", c.Name, c.Reason)
		}
	}
}

func TestNewReportsConfigurationErrors(t *testing.T) {
	gw := gateway.ForTest(t)
	good := config(t, gw)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	for _, tc := range []struct {
		name    string
		mutate  func(c *s3.Config)
		want    error
		mention string
	}{
		{"missing bucket", func(c *s3.Config) { c.Bucket = "no-such-bucket" }, objstore.ErrNoBucket, "no-such-bucket"},
		{"wrong secret", func(c *s3.Config) { c.SecretKey = "wrong" }, objstore.ErrAuth, good.Bucket},
		{"unknown access key", func(c *s3.Config) { c.AccessKey = "NOSUCHKEY" }, objstore.ErrAuth, gw.Endpoint},
		{"nothing listening", func(c *s3.Config) { c.Endpoint = "http://" + deadAddr; c.MaxRetries = -1 }, objstore.ErrUnavailable, deadAddr},
		{"no bucket configured", func(c *s3.Config) { c.Bucket = "" }, objstore.ErrInvalid, "bucket"},
		{"bad endpoint", func(c *s3.Config) { c.Endpoint = "ftp://x" }, objstore.ErrInvalid, "ftp://x"},
		{"missing CA file", func(c *s3.Config) { c.Endpoint = "https://127.0.0.1:1"; c.CAFile = "/nonexistent/ca.pem" }, objstore.ErrInvalid, "/nonexistent/ca.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.mutate(&cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := s3.New(ctx, cfg)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("error %q does not mention %q", err, tc.mention)
			}
		})
	}
}

func TestEnvironmentCredentials(t *testing.T) {
	gw := gateway.ForTest(t)
	cfg := config(t, gw)
	t.Setenv("AWS_ACCESS_KEY_ID", cfg.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", cfg.SecretKey)
	cfg.AccessKey, cfg.SecretKey = "", ""
	s := newStore(t, cfg)
	ctx := context.Background()
	storetest.MustPut(t, ctx, s, "k", []byte("x"), objstore.PutOptions{})
	if err := s.Delete(ctx, "k", objstore.Condition{}); err != nil {
		t.Fatal(err)
	}
}

// TestSharedCredentialsFileAgainstGateway: with no keys in the Config, the
// store signs with the named file's profile, and says so, also when the
// server refuses them.
func TestSharedCredentialsFileAgainstGateway(t *testing.T) {
	gw := gateway.ForTest(t)
	for _, tc := range []struct {
		name   string
		secret string
		want   error
	}{
		{"accepted keys from the file", gw.SecretKey, nil},
		{"refused keys from the file", "not-the-secret", objstore.ErrAuth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, e := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
				t.Setenv(e, "")
			}
			file := filepath.Join(t.TempDir(), "credentials")
			body := "[other]\naws_access_key_id = X\naws_secret_access_key = Y\n[ci]\naws_access_key_id = " + gw.AccessKey + "\naws_secret_access_key = " + tc.secret + "\n"
			if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := config(t, gw)
			cfg.AccessKey, cfg.SecretKey = "", ""
			cfg.CredentialsFile, cfg.Profile = file, "ci"
			wantFrom := file + " [ci]"
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s, err := s3.New(ctx, cfg)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("got %v, want %v", err, tc.want)
				}
				if from, ok := s3.CredentialsSourceOf(err); !ok || from != wantFrom {
					t.Fatalf("CredentialsSourceOf = %q, %v; want %q", from, ok, wantFrom)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.CredentialsSource(); got != wantFrom {
				t.Errorf("CredentialsSource = %q, want %q", got, wantFrom)
			}
			storetest.MustPut(t, ctx, s, "k", []byte("x"), objstore.PutOptions{})
		})
	}
}

func TestMakeBucket(t *testing.T) {
	gw := gateway.ForTest(t)
	cfg := config(t, gw)
	cfg.Bucket = "made-by-objstore"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s3.New(ctx, cfg); !errors.Is(err, objstore.ErrNoBucket) {
		t.Fatalf("before MakeBucket: %v", err)
	}
	if err := s3.MakeBucket(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := s3.MakeBucket(ctx, cfg); err != nil {
		t.Fatalf("MakeBucket of an existing bucket: %v", err)
	}
	newStore(t, cfg)
}

// RemoveBucket removes an empty bucket, refuses one with an object
// (ErrConflict, nothing removed), and a missing one is no error.
func TestRemoveBucket(t *testing.T) {
	gateway.ForEachServer(t, gateway.SingleDriveServers, func(t *testing.T, gw *gateway.Gateway) {
		cfg := config(t, gw)
		cfg.Bucket = "removed-by-objstore"
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s3.MakeBucket(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		s := newStore(t, cfg)
		storetest.MustPut(t, ctx, s, "k", []byte("x"), objstore.PutOptions{})
		if err := s3.RemoveBucket(ctx, cfg); !errors.Is(err, objstore.ErrConflict) {
			t.Fatalf("RemoveBucket of a bucket with an object: %v; want ErrConflict", err)
		}
		if err := s.Delete(ctx, "k", objstore.Condition{}); err != nil {
			t.Fatal(err)
		}
		if err := s3.RemoveBucket(ctx, cfg); err != nil {
			t.Fatalf("RemoveBucket of an empty bucket: %v", err)
		}
		if _, err := s3.New(ctx, cfg); !errors.Is(err, objstore.ErrNoBucket) {
			t.Fatalf("after RemoveBucket: %v; want ErrNoBucket", err)
		}
		if err := s3.RemoveBucket(ctx, cfg); err != nil {
			t.Fatalf("RemoveBucket of a missing bucket: %v", err)
		}
	})
}

func TestListPagination(t *testing.T) {
	gw := gateway.ForTest(t)
	cfg := config(t, gw)
	cfg.ListPageSize = 3
	s := newStore(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var want []string
	for i := 0; i < 10; i++ {
		for _, k := range []string{fmt.Sprintf("d%02d/x", i), fmt.Sprintf("f%02d", i)} {
			storetest.MustPut(t, ctx, s, k, nil, objstore.PutOptions{})
		}
		want = append(want, fmt.Sprintf("d%02d/", i))
	}
	for i := 0; i < 10; i++ {
		want = append(want, fmt.Sprintf("f%02d", i))
	}
	var got []string
	if err := s.List(ctx, "", "/", func(e objstore.Entry) error { got = append(got, e.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("got %v\nwant %v", got, want)
	}
	got = nil
	if err := s.List(ctx, "", "", func(e objstore.Entry) error { got = append(got, e.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 20 {
		t.Fatalf("recursive listing: %d keys", len(got))
	}
}

func TestKeysThatNeedEscaping(t *testing.T) {
	gw := gateway.ForTest(t)
	s := newStore(t, config(t, gw))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys := []string{"dir with space/a+b=c&d", "ünïcödé/ファイル", "percent%20literal", "q?x#y", "tilde~star*"}
	for _, k := range keys {
		info := storetest.MustPut(t, ctx, s, k, []byte(k), objstore.PutOptions{})
		got, _ := storetest.ReadAll(t, ctx, s, k, objstore.GetOptions{})
		if string(got) != k {
			t.Fatalf("%q: read %q", k, got)
		}
		if _, err := s.Copy(ctx, k, info.ETag, k+".copy", objstore.PutOptions{Shape: objstore.ShapeMultipart, Cond: objstore.Condition{IfNoneMatch: true}}); err != nil {
			t.Fatalf("copy %q: %v", k, err)
		}
	}
	var listed []string
	if err := s.List(ctx, "", "", func(e objstore.Entry) error { listed = append(listed, e.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 2*len(keys) {
		t.Fatalf("listed %q", listed)
	}
	for _, k := range keys {
		if err := s.Delete(ctx, k, objstore.Condition{IfMatch: storetest.Predict(t, s, []byte(k), objstore.ShapePlain, 0)}); err != nil {
			t.Fatalf("conditional delete %q: %v", k, err)
		}
	}
}

// measuredStore is a store on a fresh bucket of the test gateway whose
// metrics go to the returned registry.
func measuredStore(t *testing.T) (*s3.Store, s3.Config, *prometheus.Registry) {
	t.Helper()
	cfg := config(t, gateway.ForTest(t))
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	return newStore(t, cfg), cfg, reg
}

func TestMetrics(t *testing.T) {
	s, cfg, reg := measuredStore(t)
	newStore(t, cfg) // a second store on the same registry shares the collectors
	ctx := context.Background()
	storetest.MustPut(t, ctx, s, "k", []byte("12345"), objstore.PutOptions{})
	_, err := s.Put(ctx, "k", bytes.NewReader([]byte("x")), 1, objstore.PutOptions{Cond: objstore.Condition{IfNoneMatch: true}})
	if !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatal(err)
	}
	storetest.ReadAll(t, ctx, s, "k", objstore.GetOptions{})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"fencefs_s3_requests_total", "fencefs_s3_request_duration_seconds", "fencefs_s3_bytes_total"} {
		if !names[n] {
			t.Errorf("metric %s missing", n)
		}
	}
	if got := value(t, reg, "fencefs_s3_bytes_total", map[string]string{"direction": "up"}); got != 5 {
		t.Errorf("bytes up = %v", got)
	}
	if got := value(t, reg, "fencefs_s3_bytes_total", map[string]string{"direction": "down"}); got != 5 {
		t.Errorf("bytes down = %v", got)
	}
	if got := value(t, reg, "fencefs_s3_requests_total", map[string]string{"op": "put", "outcome": "precondition"}); got != 1 {
		t.Errorf("put/precondition = %v", got)
	}
	if got := value(t, reg, "fencefs_s3_requests_total", map[string]string{"op": "put", "outcome": "ok"}); got != 1 {
		t.Errorf("put/ok = %v", got)
	}
}

// value returns the value of the counter series of name with labels.
func value(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := counter(t, reg, name, labels)
	if !ok {
		t.Fatalf("no series %s%v", name, labels)
	}
	return v
}

// valueOr0 is value, 0 when the series does not exist (yet).
func valueOr0(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	v, _ := counter(t, reg, name, labels)
	return v
}

// counter finds the counter series of name with labels.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// TestConcurrentConditionalOpsOnTheGateway records whether the gateway ever
// answers 409 to concurrent conditional operations on one key (it is
// retried, then reported as ErrConflict) and checks the outcome is exact.
func TestConcurrentConditionalDeletes(t *testing.T) {
	gw := gateway.ForTest(t)
	s := newStore(t, config(t, gw))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info := storetest.MustPut(t, ctx, s, "k", []byte("x"), objstore.PutOptions{})
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Delete(ctx, "k", objstore.Condition{IfMatch: info.ETag})
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, objstore.ErrPrecondition), errors.Is(err, objstore.ErrConflict):
		default:
			t.Fatalf("unexpected error %v", err)
		}
	}
	if ok < 1 {
		t.Fatalf("no delete succeeded: %v", errs)
	}
	if _, err := s.Stat(ctx, "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("after deletes: %v", err)
	}
}

func TestCAFileAndAWSCABundle(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Setenv("AWS_CA_BUNDLE", bad)
	_, err := s3.New(ctx, s3.Config{Endpoint: "https://127.0.0.1:1", Bucket: "b", AccessKey: "a", SecretKey: "s"})
	if !errors.Is(err, objstore.ErrInvalid) || !strings.Contains(err.Error(), "AWS_CA_BUNDLE") {
		t.Fatalf("a bad AWS_CA_BUNDLE: %v", err)
	}
	// The system bundle, as some environments set AWS_CA_BUNDLE, is
	// accepted (the endpoint then simply is unreachable).
	for _, sys := range []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"} {
		if _, err := os.Stat(sys); err != nil {
			continue
		}
		t.Setenv("AWS_CA_BUNDLE", sys)
		_, err := s3.New(ctx, s3.Config{Endpoint: "https://127.0.0.1:1", Bucket: "b", AccessKey: "a", SecretKey: "s", MaxRetries: -1})
		if !errors.Is(err, objstore.ErrUnavailable) {
			t.Fatalf("AWS_CA_BUNDLE=%s: %v", sys, err)
		}
	}
}

// TestCopyOfAnEmptySourceReadsNothing checks that a Copy of
// an empty object (a directory marker's or an empty file's metadata
// change) sends no GET, whether a pinned HEAD showed it empty or it is a
// self-copy conditioned on the source's ETag (an ETag names content, and
// every empty object has the same one: nothing is left to read).
func TestCopyOfAnEmptySourceReadsNothing(t *testing.T) {
	s, _, reg := measuredStore(t)
	ctx := context.Background()
	gets := func() float64 {
		return valueOr0(t, reg, "fencefs_s3_requests_total", map[string]string{"op": "get", "outcome": "ok"})
	}
	src := storetest.MustPut(t, ctx, s, "d/", nil, objstore.PutOptions{Meta: map[string]string{"mode": "1"}})
	g0 := gets()
	cases := []struct {
		name string
		dst  string
		opts objstore.PutOptions
	}{
		{"pinned HEAD", "copy/", objstore.PutOptions{Meta: map[string]string{"mode": "2"}}},
		{"self-copy with its ETag", "d/", objstore.PutOptions{Meta: map[string]string{"mode": "3"}, Source: &src, Cond: objstore.Condition{IfMatch: src.ETag}}},
	}
	for _, tc := range cases {
		out, err := s.Copy(ctx, "d/", src.ETag, tc.dst, tc.opts)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		info, err := s.Stat(ctx, tc.dst)
		if err != nil || info.Size != 0 || info.Meta["mode"] != tc.opts.Meta["mode"] {
			t.Errorf("%s: dst %+v, %v; want empty with mode %s", tc.name, info, err, tc.opts.Meta["mode"])
		}
		if tc.dst == "d/" {
			src = out
		}
	}
	if got := gets() - g0; got != 0 {
		t.Errorf("copies of an empty source sent %v GETs, want 0", got)
	}
}

// TestCopyWithAKnownSourceSkipsItsHeadButStaysPinned checks that a Copy
// given the source's info sends no HEAD, and that the content is still
// read pinned to the source ETag: a source replaced since fails the copy.
func TestCopyWithAKnownSourceSkipsItsHeadButStaysPinned(t *testing.T) {
	s, _, reg := measuredStore(t)
	ctx := context.Background()
	src := storetest.MustPut(t, ctx, s, "src", []byte("first"), objstore.PutOptions{Meta: map[string]string{"a": "1"}})
	heads := func() float64 {
		return valueOr0(t, reg, "fencefs_s3_requests_total", map[string]string{"op": "head", "outcome": "ok"})
	}
	h0 := heads()
	out, err := s.Copy(ctx, "src", src.ETag, "dst", objstore.PutOptions{Source: &src})
	if err != nil {
		t.Fatal(err)
	}
	if got := heads() - h0; got != 0 {
		t.Errorf("copy with a known source sent %v HEADs, want 0", got)
	}
	if got, _ := storetest.ReadAll(t, ctx, s, "dst", objstore.GetOptions{}); string(got) != "first" {
		t.Errorf("dst = %q", got)
	}
	if out.Meta["a"] != "1" {
		t.Errorf("dst meta = %v, want the source's", out.Meta)
	}
	storetest.MustPut(t, ctx, s, "src", []byte("other"), objstore.PutOptions{}) // same size, new ETag
	if _, err := s.Copy(ctx, "src", src.ETag, "dst2", objstore.PutOptions{Source: &src}); !errors.Is(err, objstore.ErrPrecondition) {
		t.Errorf("copy of a replaced source with its old info: %v, want ErrPrecondition", err)
	}
	if _, err := s.Stat(ctx, "dst2"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("dst2 after the refused copy: %v, want ErrNotFound", err)
	}
}
