package s3

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/objstore"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// fakeClock is a settable clock for expiries.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeSTS answers AssumeRole and AssumeRoleWithWebIdentity with credentials
// TMP1, TMP2 … valid for lifetime on its clock, or refuses while failing
// is set.
type fakeSTS struct {
	srv      *httptest.Server
	clock    *fakeClock
	lifetime time.Duration

	mu      sync.Mutex
	issued  int
	failing string   // "" answers; else the error code (ServiceUnavailable, AccessDenied)
	forms   []string // "Action key-or-token" of each request
}

func newFakeSTS(t *testing.T, clock *fakeClock) *fakeSTS {
	f := &fakeSTS{clock: clock, lifetime: time.Hour}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeSTS) serve(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	action := r.PostForm.Get("Action")
	who := r.PostForm.Get("WebIdentityToken")
	if action == "AssumeRole" {
		// The access key of the signature: the keys that were exchanged.
		auth := r.Header.Get("Authorization")
		if i := strings.Index(auth, "Credential="); i >= 0 {
			who, _, _ = strings.Cut(auth[i+len("Credential="):], "/")
		}
	}
	f.mu.Lock()
	f.forms = append(f.forms, action+" "+who)
	failing := f.failing
	f.issued++
	n := f.issued
	f.mu.Unlock()
	if failing != "" {
		status := http.StatusForbidden
		if failing == "ServiceUnavailable" {
			status = http.StatusServiceUnavailable
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, `<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>%s</Code><Message>refused</Message></Error><RequestId>1</RequestId></ErrorResponse>`, failing)
		return
	}
	exp := f.clock.now().Add(f.lifetime).Format(time.RFC3339)
	fmt.Fprintf(w, `<%[1]sResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><%[1]sResult><Credentials>`+
		`<AccessKeyId>TMP%[2]d</AccessKeyId><SecretAccessKey>secret%[2]d</SecretAccessKey><SessionToken>token%[2]d</SessionToken>`+
		`<Expiration>%[3]s</Expiration></Credentials></%[1]sResult></%[1]sResponse>`, action, n, exp)
}

func (f *fakeSTS) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.forms...)
}

func (f *fakeSTS) fail(code string) {
	f.mu.Lock()
	f.failing = code
	f.mu.Unlock()
}

func getKey(t *testing.T, c *credentials.Credentials) string {
	t.Helper()
	v, err := c.GetWithContext(&credentials.CredContext{Client: http.DefaultClient, Context: context.Background()})
	if err != nil {
		t.Fatalf("credentials: %v", err)
	}
	return v.AccessKeyID
}

// TestSharedCredentialsFileIsReadAgainWhenItChanges: a rewritten file's
// keys are used from the next request on; a file that cannot be used
// meanwhile (half written, removed) keeps the keys read before.
func TestSharedCredentialsFileIsReadAgainWhenItChanges(t *testing.T) {
	isolateCredentials(t)
	file := writeFile(t, filepath.Join(t.TempDir(), "creds"), "[ci]\naws_access_key_id = ONE\naws_secret_access_key = s1\n")
	creds, from, err := lookupCredentials(Config{CredentialsFile: file, Profile: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	if from != file+" [ci]" {
		t.Fatalf("source %q", from)
	}
	steps := []struct {
		name    string
		content string // "-" removes the file
		want    string
	}{
		{"unchanged", "", "ONE"},
		{"rewritten with new keys", "[ci]\naws_access_key_id = TWO\naws_secret_access_key = s2\n", "TWO"},
		{"half written", "[ci]\naws_access_key_id = THREE\n", "TWO"},
		{"emptied", "\n", "TWO"},
		{"removed", "-", "TWO"},
		{"written again", "[other]\nx=y\n[ci]\naws_access_key_id = FOUR\naws_secret_access_key = s4\n", "FOUR"},
	}
	for _, st := range steps {
		switch st.content {
		case "":
		case "-":
			if err := os.Remove(file); err != nil {
				t.Fatal(err)
			}
		default:
			// A new file renamed into place, as a Secret's update: its
			// identity changes even if size and time were the same.
			tmp := writeFile(t, file+".new", st.content)
			if err := os.Rename(tmp, file); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 2; i++ {
			if got := getKey(t, creds); got != st.want {
				t.Fatalf("%s: key %q, want %q", st.name, got, st.want)
			}
		}
	}
}

// TestSharedCredentialsFileRewrittenInPlaceIsReadAgain: a file truncated
// and written again (cat >, an editor) is read again too.
func TestSharedCredentialsFileRewrittenInPlaceIsReadAgain(t *testing.T) {
	isolateCredentials(t)
	file := writeFile(t, filepath.Join(t.TempDir(), "creds"), "[default]\naws_access_key_id = AAAA\naws_secret_access_key = s1\n")
	creds, _, err := lookupCredentials(Config{CredentialsFile: file})
	if err != nil {
		t.Fatal(err)
	}
	getKey(t, creds)
	// Same size, same second: only the nanoseconds of the time differ.
	if err := os.WriteFile(file, []byte("[default]\naws_access_key_id = BBBB\naws_secret_access_key = s2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := getKey(t, creds); got != "BBBB" {
		t.Fatalf("key %q after the file was rewritten, want BBBB", got)
	}
}

// TestHomeFromTheUserDatabaseWhenHOMEIsUnset: the mount helper runs
// without HOME; ~/.aws/credentials is then the user database's home.
func TestHomeFromTheUserDatabaseWhenHOMEIsUnset(t *testing.T) {
	isolateCredentials(t)
	t.Setenv("HOME", "")
	os.Unsetenv("HOME")
	u, err := user.Current()
	if err != nil {
		gateway.SkipOrFail(t, "no user database entry: %v", err) // fails when CI is set
		return
	}
	h, err := homeDir()
	if err != nil || h != u.HomeDir {
		t.Fatalf("homeDir() = %q, %v; want %q", h, err, u.HomeDir)
	}
	f, err := resolveCredentials(Config{}, http.DefaultClient, nil, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(u.HomeDir, ".aws", "credentials") + " [default]"
	if f.from != want && !strings.Contains(f.tried, want) {
		t.Fatalf("neither used nor tried %s: from %q, tried %q", want, f.from, f.tried)
	}
}

// TestNoCredentialsNamesEveryPlaceTried: anonymous access says where keys
// were looked for, in order, and why each place had none, on one line.
func TestNoCredentialsNamesEveryPlaceTried(t *testing.T) {
	home := isolateCredentials(t)
	f, err := resolveCredentials(Config{}, http.DefaultClient, nil, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if f.from != "" || f.renewable {
		t.Fatalf("from %q, renewable %v; want anonymous", f.from, f.renewable)
	}
	want := []string{
		"$AWS_ACCESS_KEY_ID (unset)",
		"$MINIO_ROOT_USER and $MINIO_ACCESS_KEY (unset)",
		"web identity (no token file set)",
		home + "/.aws/credentials [default] (no such file)",
		"container credentials ($AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI unset)",
		"EC2 instance metadata (disabled by $AWS_EC2_METADATA_DISABLED)",
	}
	if got := f.tried; got != strings.Join(want, ", ") {
		t.Fatalf("tried:\n %s\nwant:\n %s", got, strings.Join(want, ", "))
	}
}

// TestAssumeRoleRenewsAt80PercentOfTheLifetime: temporary credentials
// from AssumeRole are used until 80% of their lifetime has passed, then
// renewed with the base keys read again (a rotated file).
func TestAssumeRoleRenewsAt80PercentOfTheLifetime(t *testing.T) {
	isolateCredentials(t)
	clock := newFakeClock()
	sts := newFakeSTS(t, clock)
	file := writeFile(t, filepath.Join(t.TempDir(), "creds"), "[default]\naws_access_key_id = BASE1\naws_secret_access_key = s1\n")
	f, err := resolveCredentials(Config{Endpoint: sts.srv.URL, CredentialsFile: file, AssumeRole: true}, http.DefaultClient, nil, clock.now)
	if err != nil {
		t.Fatal(err)
	}
	if want := "AssumeRole (STS at " + sts.srv.URL + ") with keys from " + file + " [default]"; f.from != want || !f.renewable {
		t.Fatalf("from %q (renewable %v), want %q", f.from, f.renewable, want)
	}
	if got := getKey(t, f.creds); got != "TMP1" {
		t.Fatalf("key %q, want TMP1", got)
	}
	clock.advance(47 * time.Minute)
	if got := getKey(t, f.creds); got != "TMP1" {
		t.Fatalf("after 47 of 60 minutes: key %q, want TMP1 still", got)
	}
	writeFile(t, file, "[default]\naws_access_key_id = BASE2\naws_secret_access_key = s2\n")
	clock.advance(2 * time.Minute)
	if got := getKey(t, f.creds); got != "TMP2" {
		t.Fatalf("after 49 of 60 minutes: key %q, want TMP2 (renewed)", got)
	}
	if got, want := sts.requests(), []string{"AssumeRole BASE1", "AssumeRole BASE2"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("STS requests %q, want %q", got, want)
	}
}

// TestFailedRenewalKeepsValidCredentials: while STS fails, the current
// credentials stay in use until they expire, renewal is tried again every
// renewRetry (not on every request), and once they expired the failure
// is an error that is certain and classified.
func TestFailedRenewalKeepsValidCredentials(t *testing.T) {
	isolateCredentials(t)
	clock := newFakeClock()
	sts := newFakeSTS(t, clock)
	f, err := resolveCredentials(Config{Endpoint: sts.srv.URL, AccessKey: "BASE", SecretKey: "s", AssumeRole: true}, http.DefaultClient, nil, clock.now)
	if err != nil {
		t.Fatal(err)
	}
	getKey(t, f.creds)
	sts.fail("ServiceUnavailable")
	clock.advance(50 * time.Minute)
	for i := 0; i < 3; i++ {
		if got := getKey(t, f.creds); got != "TMP1" {
			t.Fatalf("STS down, credentials valid 10 more minutes: key %q, want TMP1", got)
		}
	}
	if n := len(sts.requests()); n != 2 {
		t.Fatalf("%d STS requests, want 2 (one renewal tried, then a pause)", n)
	}
	clock.advance(renewRetry)
	getKey(t, f.creds)
	if n := len(sts.requests()); n != 3 {
		t.Fatalf("%d STS requests, want 3 (tried again after renewRetry)", n)
	}
	clock.advance(10 * time.Minute) // expired
	_, err = f.creds.GetWithContext(&credentials.CredContext{Client: http.DefaultClient})
	var re *retrievalError
	if !errors.As(err, &re) {
		t.Fatalf("expired with STS down: %v, want a retrievalError", err)
	}
	s := &Store{cfg: Config{Bucket: "b"}}
	oe := s.classifyRetrieval(re, "s3 put b/k")
	if oe.sentinel != objstore.ErrUnavailable || !oe.certain {
		t.Fatalf("STS 503 classified as %v (certain %v), want ErrUnavailable, certain", oe.sentinel, oe.certain)
	}
	sts.fail("AccessDenied")
	clock.advance(renewRetry)
	_, err = f.creds.GetWithContext(&credentials.CredContext{Client: http.DefaultClient})
	if !errors.As(err, &re) || s.classifyRetrieval(re, "x").sentinel != objstore.ErrAuth {
		t.Fatalf("STS refusal: %v, want a retrievalError classified ErrAuth", err)
	}
	sts.fail("")
	clock.advance(renewRetry)
	if got := getKey(t, f.creds); !strings.HasPrefix(got, "TMP") || got == "TMP1" {
		t.Fatalf("STS back: key %q, want new credentials", got)
	}
}

// TestWebIdentityReadsTheTokenFileAtEachRenewal: the projected token
// rotates on disk; each renewal sends the current one.
func TestWebIdentityReadsTheTokenFileAtEachRenewal(t *testing.T) {
	isolateCredentials(t)
	clock := newFakeClock()
	sts := newFakeSTS(t, clock)
	token := writeFile(t, filepath.Join(t.TempDir(), "token"), "jwt-one\n")
	cfg := Config{Endpoint: "http://127.0.0.1:9", STSEndpoint: sts.srv.URL, WebIdentityTokenFile: token, RoleARN: "arn:minio:iam:::role/x",
		// Web identity comes before the shared credentials file.
		CredentialsFile: writeFile(t, filepath.Join(t.TempDir(), "creds"), testCredentials)}
	f, err := resolveCredentials(cfg, http.DefaultClient, nil, clock.now)
	if err != nil {
		t.Fatal(err)
	}
	want := "web identity (token " + token + ", role arn:minio:iam:::role/x, STS at " + sts.srv.URL + ")"
	if f.from != want {
		t.Fatalf("from %q, want %q", f.from, want)
	}
	if got := getKey(t, f.creds); got != "TMP1" {
		t.Fatalf("key %q", got)
	}
	writeFile(t, token, "jwt-two")
	clock.advance(49 * time.Minute)
	if got := getKey(t, f.creds); got != "TMP2" {
		t.Fatalf("key %q after renewal, want TMP2", got)
	}
	if got, want := strings.Join(sts.requests(), ","), "AssumeRoleWithWebIdentity jwt-one,AssumeRoleWithWebIdentity jwt-two"; got != want {
		t.Fatalf("STS requests %q, want %q", got, want)
	}

	if err := os.Remove(token); err != nil {
		t.Fatal(err)
	}
	_, err = resolveCredentials(cfg, http.DefaultClient, nil, clock.now)
	var ce *CredentialsError
	if !errors.As(err, &ce) || ce.Key != "s3.web_identity_token_file" {
		t.Fatalf("missing token file: %v, want the s3.web_identity_token_file CredentialsError", err)
	}
}

// TestSTSEndpointDefaults: the S3 endpoint itself (MinIO), or AWS's
// regional STS for an AWS endpoint.
func TestSTSEndpointDefaults(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Endpoint: "http://127.0.0.1:9000"}, "http://127.0.0.1:9000"},
		{Config{Endpoint: "minio.example:9000"}, "https://minio.example:9000"},
		{Config{Endpoint: "https://s3.eu-west-1.amazonaws.com", Region: "eu-west-1"}, "https://sts.eu-west-1.amazonaws.com"},
		{Config{Endpoint: "https://s3.amazonaws.com"}, "https://sts.us-east-1.amazonaws.com"},
		{Config{Endpoint: "http://127.0.0.1:9000", STSEndpoint: "https://sts.example"}, "https://sts.example"},
	} {
		if got := (&resolver{cfg: tc.cfg}).stsEndpoint(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.cfg, got, tc.want)
		}
	}
}

// TestAssumeRoleWithoutKeysIsAConfigurationError.
func TestAssumeRoleWithoutKeysIsAConfigurationError(t *testing.T) {
	isolateCredentials(t)
	_, err := resolveCredentials(Config{Endpoint: "http://127.0.0.1:9", RoleARN: "arn:aws:iam::1:role/r"}, http.DefaultClient, nil, time.Now)
	var ce *CredentialsError
	if !errors.As(err, &ce) || ce.Key != "s3.assume_role" || !strings.Contains(err.Error(), "$AWS_ACCESS_KEY_ID (unset)") {
		t.Fatalf("got %v, want the s3.assume_role CredentialsError naming what was tried", err)
	}
}

// TestInstanceMetadataCredentials: with nothing else, the instance
// metadata service's role credentials (IMDSv2), renewed like STS ones.
func TestInstanceMetadataCredentials(t *testing.T) {
	isolateCredentials(t)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "")
	clock := newFakeClock()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			fmt.Fprint(w, "imds-token")
		case r.Header.Get("X-aws-ec2-metadata-token") != "imds-token":
			w.WriteHeader(http.StatusUnauthorized)
		case r.URL.Path == "/latest/meta-data/iam/security-credentials/":
			fmt.Fprint(w, "the-role\n")
		case r.URL.Path == "/latest/meta-data/iam/security-credentials/the-role":
			mu.Lock()
			n++
			k := n
			mu.Unlock()
			fmt.Fprintf(w, `{"Code":"Success","Type":"AWS-HMAC","AccessKeyId":"IMDS%d","SecretAccessKey":"s","Token":"t","Expiration":%q}`,
				k, clock.now().Add(6*time.Hour).Format(time.RFC3339))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	old := imdsEndpoint
	imdsEndpoint = srv.URL
	defer func() { imdsEndpoint = old }()
	f, err := resolveCredentials(Config{}, http.DefaultClient, nil, clock.now)
	if err != nil {
		t.Fatal(err)
	}
	if f.from != "EC2 instance metadata" {
		t.Fatalf("from %q (tried %q)", f.from, f.tried)
	}
	if got := getKey(t, f.creds); got != "IMDS1" {
		t.Fatalf("key %q, want IMDS1", got)
	}
	clock.advance(5 * time.Hour)
	if got := getKey(t, f.creds); got != "IMDS2" {
		t.Fatalf("key %q after 5 of 6 hours, want IMDS2", got)
	}
}

// TestRefusedCredentialsAreRetriedOnceWithFreshOnes: a request refused
// for its credentials is retried once, at once, with the credentials read
// again — only when their source can change.
func TestRefusedCredentialsAreRetriedOnceWithFreshOnes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fromFile  bool
		refusals  int
		wantCalls int
		wantErr   error
	}{
		{"file keys: one refusal, then success", true, 1, 2, nil},
		{"file keys: refused twice", true, 2, 2, objstore.ErrAuth},
		{"static keys are not retried", false, 1, 1, objstore.ErrAuth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			isolateCredentials(t)
			cfg := Config{Endpoint: "http://127.0.0.1:9", Bucket: "b", AccessKey: "STATIC", SecretKey: "s", MaxRetries: -1}
			file := filepath.Join(t.TempDir(), "creds")
			if tc.fromFile {
				writeFile(t, file, "[default]\naws_access_key_id = OLD\naws_secret_access_key = s\n")
				cfg.AccessKey, cfg.SecretKey, cfg.CredentialsFile = "", "", file
			}
			s, err := newStore(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var used []string
			err = s.call(context.Background(), "put", true, func(ctx context.Context) error {
				v, err := s.creds.GetWithContext(nil)
				if err != nil {
					return err
				}
				used = append(used, v.AccessKeyID)
				if len(used) == 1 && tc.fromFile {
					// Rotated between signing and the server's check.
					writeFile(t, file+".new", "[default]\naws_access_key_id = NEW\naws_secret_access_key = s\n")
					if err := os.Rename(file+".new", file); err != nil {
						t.Fatal(err)
					}
				}
				if len(used) <= tc.refusals {
					return s.classifyResponse(minioErr("InvalidAccessKeyId", 403), "s3 put b/k")
				}
				return nil
			})
			if !errors.Is(err, tc.wantErr) && !(tc.wantErr == nil && err == nil) {
				t.Fatalf("got %v, want %v", err, tc.wantErr)
			}
			if len(used) != tc.wantCalls {
				t.Fatalf("%d attempts (%v), want %d", len(used), used, tc.wantCalls)
			}
			if tc.fromFile && used[1] != "NEW" {
				t.Fatalf("the retry used %q, want the new keys", used[1])
			}
			var ue *objstore.UncertainError
			if errors.As(err, &ue) {
				t.Fatalf("a refusal is certain, got %v", err)
			}
		})
	}
}

func minioErr(code string, status int) minio.ErrorResponse {
	return minio.ErrorResponse{Code: code, StatusCode: status, Message: "refused"}
}
