package s3

// Credentials: where a Store's keys come from, and how they stay valid for
// a mount that lives for months while keys rotate underneath it.
//
// # Sources
//
// resolveCredentials looks once, at New, in the order of the AWS SDKs'
// default chain; the first source that has keys is the store's for its
// life (it never falls through to another source later):
//
//  1. static keys (Config.AccessKey: fencefs's configuration took them
//     from FENCEFS_S3_* or AWS_* variables or from its config file);
//  2. the environment: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
//     AWS_SESSION_TOKEN, then, unless a file or profile is named,
//     MINIO_ROOT_USER / MINIO_ROOT_PASSWORD and MINIO_ACCESS_KEY /
//     MINIO_SECRET_KEY;
//  3. web identity: the token in Config.WebIdentityTokenFile exchanged by
//     AssumeRoleWithWebIdentity (with Config.RoleARN) at the STS endpoint;
//  4. the shared credentials file (Config.CredentialsFile, default
//     ~/.aws/credentials, the home directory taken from the user database
//     when HOME is unset, as the AWS CLI does), section Config.Profile;
//  5. container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or
//     _FULL_URI: ECS, EKS Pod Identity), else the EC2 instance metadata
//     service (IMDSv2, asked with a short timeout; skipped when
//     AWS_EC2_METADATA_DISABLED=true).
//
// With Config.AssumeRole (or a RoleARN without a token file), the keys of
// 1, 2 or 4 are not used for requests: they are exchanged for temporary
// ones by AssumeRole at the STS endpoint. No source with keys is anonymous
// access, and Store.CredentialsTried names every place that was tried,
// with why each had nothing, for the one-line refusal a user sees.
//
// # Rotation
//
// Temporary credentials (STS, container, instance metadata) are renewed
// when 80% of their lifetime has passed (minio-go's expiry window), on
// the next request; the web identity token file is read again at each
// renewal, and AssumeRole takes its keys from their source again (a
// changed credentials file included). A renewal that fails while the
// current credentials are still valid keeps them and is tried again after
// renewRetry: an STS outage is not an outage of the mount until the keys
// really expire. The shared credentials file is read again when its size,
// modification time or identity (a Kubernetes Secret's symlink swap)
// changed since it was read — one stat per request; a file that cannot be
// used (being rewritten, removed) keeps the keys read before, and the
// problem is logged once.
//
// A request refused for its credentials (ErrAuth: InvalidAccessKeyId,
// SignatureDoesNotMatch, ExpiredToken, AccessDenied …) when they come from
// a source that can be read again is retried once at once, with
// credentials read again (see Store.call): a request signed just before a
// rotation lands instead of failing, and a refusal is certain (nothing was
// applied), so a write retried this way lands exactly once. Static keys
// and the environment cannot change: their refusals are not retried.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// renewRetry is how long after a failed renewal the next is tried, while
// the current credentials stay valid.
const renewRetry = 10 * time.Second

// imdsTimeout bounds each request to the instance metadata service or the
// container credentials endpoint (they are local; the AWS SDKs use 1 s).
const imdsTimeout = time.Second

// imdsEndpoint overrides the instance metadata service's URL (tests).
var imdsEndpoint = ""

// CredentialsError is a credentials setting that was named but cannot be
// used. Key is fencefs's name of the setting: "s3.credentials_file"
// (Config.CredentialsFile: missing or unreadable), "s3.profile"
// (Config.Profile: not in the file, or unusable),
// "s3.web_identity_token_file" (unreadable) or "s3.assume_role" (no keys
// to exchange). It is objstore.ErrInvalid.
type CredentialsError struct {
	Key, Msg string
}

func (e *CredentialsError) Error() string { return e.Key + ": " + e.Msg }

// Is makes a CredentialsError objstore.ErrInvalid.
func (e *CredentialsError) Is(target error) bool { return target == objstore.ErrInvalid }

// foundCredentials is what resolveCredentials found.
type foundCredentials struct {
	creds *credentials.Credentials
	from  string // Store.CredentialsSource
	tried string // Store.CredentialsTried, for anonymous access
	// renewable: creds can be read again and may then differ.
	renewable bool
	// webIdentity: creds are web identity's (never exchanged again).
	webIdentity bool
}

// resolveCredentials finds the credentials of cfg in the order of the
// package documentation (see the head of this file). client carries STS
// requests; now is the clock of expiries (tests fake it).
func resolveCredentials(cfg Config, client *http.Client, log *slog.Logger, now func() time.Time) (foundCredentials, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := resolver{cfg: cfg, client: client, log: log, now: now}
	base, err := r.keys()
	if err != nil {
		return foundCredentials{}, err
	}
	if base.webIdentity {
		return base, nil
	}
	assume := cfg.AssumeRole || cfg.RoleARN != "" && cfg.WebIdentityTokenFile == ""
	switch {
	case base.creds != nil && assume:
		return r.assumeRole(base), nil
	case base.creds != nil:
		return base, nil
	case assume:
		return foundCredentials{}, &CredentialsError{Key: "s3.assume_role", Msg: "no keys to exchange for temporary ones (tried " + strings.Join(r.tried, ", ") + ")"}
	}
	if c, ok := r.instance(); ok {
		return c, nil
	}
	return foundCredentials{creds: credentials.NewStaticV4("", "", ""), tried: strings.Join(r.tried, ", ")}, nil
}

// resolver keeps the state of one resolveCredentials.
type resolver struct {
	cfg    Config
	client *http.Client
	log    *slog.Logger
	now    func() time.Time
	tried  []string
}

// keys looks in the sources 1 to 4 of the package documentation; a zero
// foundCredentials (with r.tried filled) when none has keys.
func (r *resolver) keys() (foundCredentials, error) {
	cfg := r.cfg
	if cfg.AccessKey != "" {
		return foundCredentials{creds: credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken), from: "static keys"}, nil
	}
	named := cfg.CredentialsFile != "" || cfg.Profile != ""
	if v, _ := (&credentials.EnvAWS{}).Retrieve(); v.AccessKeyID != "" && v.SecretAccessKey != "" {
		return foundCredentials{creds: credentials.NewStaticV4(v.AccessKeyID, v.SecretAccessKey, v.SessionToken), from: "$AWS_ACCESS_KEY_ID"}, nil
	}
	r.tried = append(r.tried, "$AWS_ACCESS_KEY_ID (unset)")
	if !named {
		if v, _ := (&credentials.EnvMinio{}).Retrieve(); v.AccessKeyID != "" {
			from := "$MINIO_ROOT_USER"
			if os.Getenv("MINIO_ROOT_USER") == "" {
				from = "$MINIO_ACCESS_KEY"
			}
			return foundCredentials{creds: credentials.NewStaticV4(v.AccessKeyID, v.SecretAccessKey, v.SessionToken), from: from}, nil
		}
		r.tried = append(r.tried, "$MINIO_ROOT_USER and $MINIO_ACCESS_KEY (unset)")
	}
	if cfg.WebIdentityTokenFile != "" {
		return r.webIdentity()
	}
	r.tried = append(r.tried, "web identity (no token file set)")
	return r.sharedFile()
}

// stsEndpoint is Config.STSEndpoint, else the S3 endpoint (MinIO), else
// AWS's regional STS for an AWS endpoint.
func (r *resolver) stsEndpoint() string {
	if r.cfg.STSEndpoint != "" {
		return r.cfg.STSEndpoint
	}
	u, err := parseEndpoint(r.cfg.Endpoint)
	if err != nil {
		return r.cfg.Endpoint
	}
	if s3utils.IsAmazonEndpoint(*u) {
		region := r.cfg.Region
		if region == "" {
			region = "us-east-1"
		}
		host := "sts." + region + ".amazonaws.com"
		if strings.HasPrefix(region, "cn-") {
			host += ".cn"
		}
		return "https://" + host
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
}

// webIdentity is source 3: the token file must be readable now; it is
// read again at each renewal.
func (r *resolver) webIdentity() (foundCredentials, error) {
	file := r.cfg.WebIdentityTokenFile
	readToken := func() (*credentials.WebIdentityToken, error) {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return nil, fmt.Errorf("%s is empty", file)
		}
		return &credentials.WebIdentityToken{Token: tok}, nil
	}
	if _, err := readToken(); err != nil {
		return foundCredentials{}, &CredentialsError{Key: "s3.web_identity_token_file", Msg: "cannot read the token: " + oneLine(err)}
	}
	endpoint := r.stsEndpoint()
	p := &credentials.STSWebIdentity{
		Client:              r.client,
		STSEndpoint:         endpoint,
		GetWebIDTokenExpiry: readToken,
		RoleARN:             r.cfg.RoleARN,
	}
	p.CurrentTime = r.now
	from := "web identity (token " + file
	if r.cfg.RoleARN != "" {
		from += ", role " + r.cfg.RoleARN
	}
	from += ", STS at " + redactURL(endpoint) + ")"
	return foundCredentials{creds: credentials.New(r.renewing(p, from)), from: from, renewable: true, webIdentity: true}, nil
}

// assumeRole wraps base (source 1, 2 or 4) in AssumeRole.
func (r *resolver) assumeRole(base foundCredentials) foundCredentials {
	endpoint := r.stsEndpoint()
	sts := &credentials.STSAssumeRole{
		Client:      r.client,
		STSEndpoint: endpoint,
		Options:     credentials.STSAssumeRoleOptions{RoleARN: r.cfg.RoleARN, Location: r.cfg.Region},
	}
	sts.CurrentTime = r.now
	from := "AssumeRole (STS at " + redactURL(endpoint)
	if r.cfg.RoleARN != "" {
		from += ", role " + r.cfg.RoleARN
	}
	from += ") with keys from " + base.from
	p := &assumeRoleKeys{base: base.creds, sts: sts}
	return foundCredentials{creds: credentials.New(r.renewing(p, from)), from: from, renewable: true}
}

// sharedFile is source 4.
func (r *resolver) sharedFile() (foundCredentials, error) {
	cfg := r.cfg
	named := cfg.CredentialsFile != "" || cfg.Profile != ""
	file, profile := cfg.CredentialsFile, cfg.Profile
	if profile == "" {
		profile = "default"
	}
	if file == "" {
		h, err := homeDir()
		if err != nil {
			if cfg.Profile != "" {
				return foundCredentials{}, &CredentialsError{Key: "s3.profile", Msg: fmt.Sprintf("profile %q: no credentials file (%v)", profile, err)}
			}
			r.tried = append(r.tried, "~/.aws/credentials ("+oneLine(err)+")")
			return foundCredentials{}, nil
		}
		file = filepath.Join(h, ".aws", "credentials")
	}
	where := fmt.Sprintf("%s [%s]", file, profile)
	c := credentials.New(&fileKeys{file: file, profile: profile, log: r.log})
	v, err := c.GetWithContext(&credentials.CredContext{Client: r.client})
	var pe *fs.PathError
	switch {
	case err == nil && v.AccessKeyID == "":
		r.tried = append(r.tried, where+" (no keys in the profile)")
		return foundCredentials{}, nil
	case err == nil:
		return foundCredentials{creds: c, from: where, renewable: true}, nil
	case errors.Is(err, fs.ErrNotExist) && !named:
		r.tried = append(r.tried, where+" (no such file)")
		return foundCredentials{}, nil
	case errors.Is(err, fs.ErrNotExist) && cfg.CredentialsFile == "":
		return foundCredentials{}, &CredentialsError{Key: "s3.profile", Msg: fmt.Sprintf("profile %q not found: %s does not exist", profile, file)}
	case errors.As(err, &pe):
		return foundCredentials{}, &CredentialsError{Key: "s3.credentials_file", Msg: fmt.Sprintf("cannot read %s: %v", file, pe.Err)}
	case strings.Contains(err.Error(), "does not exist"): // ini: section "x" does not exist
		if !named {
			r.tried = append(r.tried, where+" (no such profile)")
			return foundCredentials{}, nil
		}
		return foundCredentials{}, &CredentialsError{Key: "s3.profile", Msg: fmt.Sprintf("profile %q not found in %s", profile, file)}
	case strings.HasPrefix(err.Error(), "profile "): // partial keys, SSO settings
		return foundCredentials{}, &CredentialsError{Key: "s3.profile", Msg: fmt.Sprintf("profile %q in %s: %v", profile, file, strings.TrimPrefix(err.Error(), "profile "))}
	}
	return foundCredentials{}, &CredentialsError{Key: "s3.credentials_file", Msg: fmt.Sprintf("cannot read %s: %v", file, oneLine(err))}
}

// instance is source 5: container credentials when their variables are
// set (errors then show at the first request), else the instance
// metadata service when it answers with credentials now.
func (r *resolver) instance() (foundCredentials, bool) {
	client := &http.Client{Timeout: imdsTimeout, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	iam := &credentials.IAM{Client: client, Endpoint: imdsEndpoint}
	iam.CurrentTime = r.now
	for _, env := range []string{"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"} {
		if os.Getenv(env) != "" {
			from := "container credentials ($" + env + ")"
			return foundCredentials{creds: credentials.New(r.renewing(iam, from)), from: from, renewable: true}, true
		}
	}
	r.tried = append(r.tried, "container credentials ($AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI unset)")
	if strings.EqualFold(os.Getenv("AWS_EC2_METADATA_DISABLED"), "true") {
		r.tried = append(r.tried, "EC2 instance metadata (disabled by $AWS_EC2_METADATA_DISABLED)")
		return foundCredentials{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*imdsTimeout)
	defer cancel()
	c := credentials.New(r.renewing(iam, "EC2 instance metadata"))
	v, err := c.GetWithContext(&credentials.CredContext{Client: client, Context: ctx})
	if err != nil || v.AccessKeyID == "" {
		why := "no credentials"
		if err != nil {
			why = oneLine(err)
		}
		r.tried = append(r.tried, "EC2 instance metadata ("+why+")")
		return foundCredentials{}, false
	}
	return foundCredentials{creds: c, from: "EC2 instance metadata", renewable: true}, true
}

func (r *resolver) renewing(p credentials.Provider, what string) *renewingKeys {
	return &renewingKeys{p: p, what: what, now: r.now, log: r.log}
}

// homeDir is $HOME, else the home directory of the user database's entry
// for the process's user (the mount helper runs without HOME).
func homeDir() (string, error) {
	if h := os.Getenv("HOME"); h != "" {
		return h, nil
	}
	u, err := user.Current()
	if err != nil {
		return "", fmt.Errorf("HOME is unset and uid %d has no entry in the user database: %v", os.Getuid(), err)
	}
	if u.HomeDir == "" {
		return "", fmt.Errorf("HOME is unset and user %s has no home directory", u.Username)
	}
	return u.HomeDir, nil
}

// oneLine shortens an error's text to one line of at most 200 bytes.
func oneLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// redactURL is u without user information, for messages.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	return p.Redacted()
}

// fileKeys is the shared credentials file's profile, read again when the
// file changed on disk. minio-go's credentials.Credentials calls IsExpired
// and RetrieveWithCredContext under its lock, which guards the fields.
type fileKeys struct {
	file, profile string
	log           *slog.Logger

	inner *credentials.FileAWSCredentials // the last successful read
	read  os.FileInfo                     // the file as read then
	cur   credentials.Value               // its keys
	bad   os.FileInfo                     // the file as last found unusable (logged once)
}

// sameFile reports whether a and b are the same unchanged file.
func sameFile(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// IsExpired implements credentials.Provider: the file changed since it
// was read (and was not found unusable as it is), or the profile's
// credential_process keys are due for renewal.
func (f *fileKeys) IsExpired() bool {
	fi, err := os.Stat(f.file)
	if err != nil {
		return false // gone: keep the keys read before
	}
	if !sameFile(fi, f.read) && !sameFile(fi, f.bad) {
		return true
	}
	return f.inner != nil && !f.cur.Expiration.IsZero() && f.inner.IsExpired()
}

// Retrieve implements credentials.Provider.
func (f *fileKeys) Retrieve() (credentials.Value, error) { return f.RetrieveWithCredContext(nil) }

// RetrieveWithCredContext implements credentials.Provider: it reads the
// file; when that fails after keys were read before, it keeps those.
func (f *fileKeys) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	fi, _ := os.Stat(f.file)
	inner := &credentials.FileAWSCredentials{Filename: f.file, Profile: f.profile}
	v, err := inner.RetrieveWithCredContext(cc)
	if err == nil && v.AccessKeyID == "" && f.cur.AccessKeyID != "" {
		err = errors.New("no keys in the profile")
	}
	if err != nil {
		if f.cur.AccessKeyID == "" {
			return v, err
		}
		if fi == nil || !sameFile(fi, f.bad) {
			f.bad = fi
			f.log.Warn("s3: the shared credentials file changed but cannot be used; the keys read before stay in use",
				"file", f.file, "profile", f.profile, "err", oneLine(err))
		}
		return f.cur, nil
	}
	if f.cur.AccessKeyID != "" && v != f.cur {
		f.log.Info("s3: the shared credentials file changed; its new keys are in use", "file", f.file, "profile", f.profile)
	}
	f.inner, f.read, f.cur, f.bad = inner, fi, v, nil
	return v, nil
}

// assumeRoleKeys is AssumeRole with the keys of base, taken from it again
// at each renewal (a rotated credentials file included).
type assumeRoleKeys struct {
	base *credentials.Credentials
	sts  *credentials.STSAssumeRole
}

func (a *assumeRoleKeys) IsExpired() bool { return a.sts.IsExpired() }

func (a *assumeRoleKeys) Retrieve() (credentials.Value, error) { return a.RetrieveWithCredContext(nil) }

func (a *assumeRoleKeys) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	b, err := a.base.GetWithContext(cc)
	if err != nil {
		return credentials.Value{}, err
	}
	a.sts.Options.AccessKey, a.sts.Options.SecretKey, a.sts.Options.SessionToken = b.AccessKeyID, b.SecretAccessKey, b.SessionToken
	return a.sts.RetrieveWithCredContext(cc)
}

// renewingKeys wraps a provider of temporary credentials (STS, container,
// instance metadata), which says itself when they are due for renewal: a
// renewal that fails while the current credentials are valid keeps them
// and is tried again after renewRetry. The owning credentials.Credentials'
// lock guards the fields.
type renewingKeys struct {
	p    credentials.Provider
	what string // for the log
	now  func() time.Time
	log  *slog.Logger

	cur     credentials.Value
	retryAt time.Time // no renewal before, after a failed one
}

func (r *renewingKeys) IsExpired() bool {
	return r.p.IsExpired() && !r.now().Before(r.retryAt)
}

func (r *renewingKeys) Retrieve() (credentials.Value, error) { return r.RetrieveWithCredContext(nil) }

func (r *renewingKeys) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	v, err := r.p.RetrieveWithCredContext(cc)
	if err == nil && v.AccessKeyID == "" {
		err = errors.New("the answer holds no access key")
	}
	now := r.now()
	if err == nil {
		if r.cur.AccessKeyID != "" {
			r.log.Info("s3: temporary credentials renewed", "source", r.what, "expires", v.Expiration.Format(time.RFC3339))
		}
		r.cur, r.retryAt = v, time.Time{}
		return v, nil
	}
	if r.cur.AccessKeyID == "" || !r.cur.Expiration.IsZero() && !now.Before(r.cur.Expiration) {
		return credentials.Value{}, &retrievalError{source: r.what, err: err}
	}
	wait := renewRetry
	if !r.cur.Expiration.IsZero() {
		wait = min(wait, r.cur.Expiration.Sub(now)/4)
	}
	r.retryAt = now.Add(wait)
	r.log.Warn("s3: renewing the temporary credentials failed; the current ones stay in use until they expire",
		"source", r.what, "expires", r.cur.Expiration.Format(time.RFC3339), "retry_in", wait, "err", oneLine(err))
	return r.cur, nil
}

// retrievalError is a failure to get temporary credentials, before any
// request was sent with them (so the request is certainly not applied).
type retrievalError struct {
	source string
	err    error
}

func (e *retrievalError) Error() string {
	return "getting credentials from " + e.source + ": " + oneLine(e.err)
}

func (e *retrievalError) Unwrap() error { return e.err }

// classifyRetrieval classifies a retrievalError: an STS refusal is
// ErrAuth, an STS outage or a network failure ErrUnavailable (retried);
// anything else (an unreadable token file) ErrAuth. All are certain.
func (s *Store) classifyRetrieval(e *retrievalError, where string) *opError {
	oe := &opError{sentinel: objstore.ErrAuth, msg: where + ": " + e.Error(), certain: true}
	var sts credentials.ErrorResponse
	var ne net.Error
	var ue *url.Error
	switch {
	case errors.As(e.err, &sts):
		oe.code = sts.STSError.Code
		if codeSentinels[oe.code] == objstore.ErrUnavailable {
			oe.sentinel = objstore.ErrUnavailable
		}
	case errors.As(e.err, &ne), errors.As(e.err, &ue), errors.Is(e.err, io.EOF), errors.Is(e.err, io.ErrUnexpectedEOF):
		oe.sentinel = objstore.ErrUnavailable
	}
	return oe
}
