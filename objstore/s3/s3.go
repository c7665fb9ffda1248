// Package s3 is the objstore.Store of a real S3-compatible bucket, on
// minio-go (the only package of fencefs that imports it).
//
// # Requests
//
//   - Stat is a HEAD; Get a GET with Range, If-Match and If-None-Match. A
//     body that breaks mid-read is resumed with a ranged GET pinned to the
//     first response's ETag, so a read never mixes two versions: if the
//     object changed, the read fails with ErrPrecondition.
//   - Put is one PutObject (ShapePlain, or ShapeAuto up to
//     MultipartThreshold, and up to 56 KiB after LimitPlainToOneWrite) or a
//     parallel multipart upload; the condition goes
//     on the PutObject or on CompleteMultipartUpload. A failed Complete's
//     upload is aborted.
//   - Every PutObject and UploadPart is sent with its SHA-256 in the signed
//     x-amz-content-sha256 header (no Content-MD5): never UNSIGNED-PAYLOAD
//     and never a streaming (aws-chunked) body, so a client dying mid-body
//     can never publish a truncated object (the pinned Versity gateway
//     publishes truncated UNSIGNED-PAYLOAD bodies, even on conditional
//     PUTs). The body is therefore read twice: once to hash, once to send.
//   - Copy never uses CopyObject, whose destination conditions MinIO and the
//     Versity gateway ignore. A multipart-shaped copy is CreateMultipartUpload
//   - UploadPartCopy (x-amz-copy-source-if-match: srcETag on every part) +
//     CompleteMultipartUpload carrying the destination condition. A
//     plain-shaped copy (ShapePlain, or ShapeAuto up to the threshold) is a
//     GET pinned to srcETag (spooled in memory up to 32 MiB, else in a
//     temporary file) + a conditional PutObject. So Copy's ETag is exactly
//     the one Put of the same bytes with the same shape gives; see
//     objstore.Sizing.Layout.
//   - Delete is a signed DELETE sent by this package (minio-go cannot put
//     If-Match on RemoveObject). List is ListObjectsV2, page by page, with
//     common prefixes merged into lexical order.
//
// # Errors and retries
//
// Every S3 error is classified once into an objstore sentinel (see the
// objstore package doc). If-Match answered by NoSuchKey on a write becomes
// ErrPrecondition. Transient answers — 5xx (503 SlowDown, 500
// InternalError), 499 (MinIO's ClientDisconnected, while another client is
// stopped mid-request), 408, 429, RequestTimeout — and network failures
// (timeouts, resets) are ErrUnavailable; a status this package does not
// know is ErrUnavailable too (EIO, never EINVAL), not retried; only
// malformed-request statuses (400, 405, 411, 413, 414, 416 …) are
// ErrInvalid. minio-go's own retries are disabled: this package is the one
// place of fencefs that retries, ErrUnavailable and ErrConflict (409), with
// jittered exponential backoff until the retry deadline (Config.RetryDeadline
// after the call started, or the caller's objstore.WithRetryDeadline when
// earlier: the fencing layer gives each mutation one), so it knows when an
// attempt's outcome was unknown. A write that was retried
// after such an attempt and still failed returns an *objstore.UncertainError
// (objstore.MaybeApplied reports true): typically ErrPrecondition, because
// the retry met the write's own result. That ambiguity is left to the caller
// (the fencing layer resolves it by write id); it is never turned into a
// silent success or failure here. A Complete retried after such an attempt
// is confirmed with a HEAD (the key must hold the upload's ETag), because
// the gateway acknowledges a repeated Complete whenever the upload is gone
// and the key exists, or while another Complete of it is still running;
// unconfirmed, or finding the upload gone, it is ErrUnavailable, uncertain.
//
// # Timeouts and the breaker
//
// A request has no total time limit, so a slow upload that keeps moving
// bytes never times out. Connecting is bounded by Config.ConnectTimeout;
// while a request uses a connection, it fails once no byte has moved in
// either direction for Config.IdleTimeout (bytes still leaving the send
// buffer count as moving: a slow link's tail). A connection waiting in the
// pool has no deadline. So a black hole (a partition that keeps
// connections open, a SIGSTOPped server) fails a request after about
// IdleTimeout (default 10 s).
//
// A request that got no answer (a timeout, a refused connection, or three
// broken connections in a row) makes the store count the storage as down.
// While it is down, a request is not sent: the call waits for a probe (a
// HEAD of the bucket, at most Config.ProbeTimeout, 750 ms) started for it,
// and fails at once with ErrUnavailable unless the probe got an answer. So
// further calls fail within a second, and the first call after the
// storage answers again goes through. Within one operation
// (objstore.WithRetryDeadline, objstore.WithOperation), once a request
// found the storage down, the operation's later requests fail without a
// probe; background work (objstore.Unwaited) fails without one, so that it
// never holds up a caller queued behind it. A background loop probes every
// second meanwhile (with a longer timeout, for slow links). Any HTTP answer
// counts as up. Metrics: fencefs_s3_unreachable (1 while down) and
// fencefs_s3_fast_failures_total{op}.
//
// # Concurrency
//
// A Store is safe for concurrent use. Its mutable state is the HTTP
// connection pool, the breaker and metrics.
package s3

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Store. Endpoint and Bucket are required.
type Config struct {
	// Endpoint is the server's URL, "http://host:port" or "https://host";
	// a bare "host[:port]" means https.
	Endpoint string
	Bucket   string
	// CheckPrefix, when set, is the key prefix (ending in '/') the caller
	// works under: New's check of the bucket lists it rather than the
	// bucket's top level, so that credentials whose policy allows listing
	// only that prefix (a workload's own, docs/CSI.md) pass it.
	CheckPrefix string
	// Region to sign requests for; empty means "us-east-1".
	Region string
	// AccessKey, SecretKey and SessionToken are static credentials. With an
	// empty AccessKey, New looks for credentials in the order of the AWS
	// SDKs' default chain (see credentials.go): the environment, web
	// identity, the shared credentials file, container credentials or the
	// instance metadata service; none found is anonymous access.
	// Store.CredentialsSource says which one was used.
	AccessKey, SecretKey, SessionToken string
	// CredentialsFile is the shared credentials file ("" means
	// ~/.aws/credentials, with the home directory from the user database
	// when HOME is unset) and Profile its section ("" means "default").
	// Setting either names them: then the file must be readable and hold
	// the profile, else New fails with a *CredentialsError. Unnamed, a
	// missing ~/.aws/credentials or [default] section is not an error. The
	// file is read again whenever it changes on disk. This package does
	// not read AWS_PROFILE or AWS_SHARED_CREDENTIALS_FILE itself: the
	// caller's configuration passes them here.
	CredentialsFile, Profile string
	// WebIdentityTokenFile holds an OIDC token (a Kubernetes service
	// account token, say) that is exchanged for temporary credentials by
	// AssumeRoleWithWebIdentity at STSEndpoint, with RoleARN when set; the
	// file is read again at each renewal. (fencefs passes
	// AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN here.)
	WebIdentityTokenFile string
	// RoleARN is the role to assume: with WebIdentityTokenFile, by web
	// identity; without it, by AssumeRole with the keys found otherwise.
	RoleARN string
	// AssumeRole exchanges the keys found (static, environment or the
	// shared credentials file) for temporary ones by AssumeRole at
	// STSEndpoint (MinIO needs no RoleARN). Implied by RoleARN without a
	// WebIdentityTokenFile.
	AssumeRole bool
	// STSEndpoint is the URL of the STS service; "" means the S3 endpoint
	// itself (MinIO serves STS there), or https://sts.REGION.amazonaws.com
	// for an AWS endpoint.
	STSEndpoint string
	// CAFile is a PEM bundle of CAs trusted in addition to the system's
	// (a private CA). Empty means $AWS_CA_BUNDLE when set.
	CAFile string
	// InsecureSkipVerify disables TLS certificate verification (testing
	// only).
	InsecureSkipVerify bool
	// PathStyle forces path-style addressing (http://host/bucket/key), which
	// MinIO, the Versity gateway and most non-AWS servers need. When false,
	// virtual-host style is used for AWS endpoints and path style elsewhere.
	PathStyle bool
	// MultipartThreshold: ShapeAuto objects up to this size are one
	// PutObject; 0 means objstore.DefaultMultipartThreshold (16 MiB).
	MultipartThreshold int64
	// PartSize of multipart uploads; 0 means objstore.DefaultPartSize
	// (8 MiB); raised to objstore.MinPartSize (5 MiB).
	PartSize int64
	// Concurrency is the number of parts in flight per upload or copy; 0
	// means 4.
	Concurrency int
	// MaxRetries caps the retries after a first failed attempt of a
	// request (for ErrUnavailable and ErrConflict); 0 means no cap (the
	// retry deadline decides), negative means none.
	MaxRetries int
	// RetryDeadline is how long after a request's first attempt a retry
	// may still start (objstore.WithRetryDeadline can shorten it for a
	// caller's whole operation); 0 means DefaultRetryDeadline.
	RetryDeadline time.Duration
	// ConnectTimeout bounds connecting to the server (TCP and TLS); 0
	// means DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// IdleTimeout: a request fails (ErrUnavailable, its outcome unknown)
	// once no byte has moved to or from the server for this long — a
	// black hole, a stopped server. There is no limit on a request's
	// total time: a slow upload that keeps moving never times out. 0 means
	// DefaultIdleTimeout. A CompleteMultipartUpload, which a server may
	// answer only after assembling the parts, gets this plus a second per
	// 20 MiB of the object (completeIdle). A server that works longer than
	// that before it answers needs a larger value.
	IdleTimeout time.Duration
	// ProbeTimeout bounds the probe a call waits for while the storage is
	// known down (see the package documentation); 0 means 750 ms, so
	// that a call while the storage is known down fails within a second.
	ProbeTimeout time.Duration
	// ServerWait is how long a request may stay silent while the server
	// answers other requests (it waits on the server: a lock on the key
	// held by another client's stalled request; see serverwait.go) before
	// it fails like a black hole; 0 means DefaultServerWait, negative
	// means the idle timeout decides alone.
	ServerWait time.Duration
	// ListPageSize is the max-keys of each List request; 0 means 1000.
	ListPageSize int
	// SpoolDir is where a plain-shaped Copy keeps a source too large for
	// memory while it uploads it again (fencefs: mount.cache_dir; created
	// if missing); "" means os.TempDir().
	SpoolDir string
	// Logger receives retries, cleanup failures and the storage going
	// down and coming back; nil means none.
	Logger *slog.Logger
	// Registerer receives the metrics; nil means none. Several stores may
	// share one Registerer (the collectors are shared).
	Registerer prometheus.Registerer
}

// Defaults of Config's timeouts: a black hole fails a request after
// DefaultIdleTimeout, and the next ones at once (the breaker).
const (
	DefaultConnectTimeout = 5 * time.Second
	DefaultIdleTimeout    = 10 * time.Second
	DefaultRetryDeadline  = 15 * time.Second
	// DefaultServerWait outlasts MinIO's read timeout (30 s), after which
	// it drops a stalled request and the lock it held.
	DefaultServerWait = 60 * time.Second
)

// Store is the S3 implementation of objstore.Store. Create it with New.
type Store struct {
	// Constant after New.
	cfg        Config
	endpoint   *url.URL
	secure     bool
	core       *minio.Core
	creds      *credentials.Credentials
	credsFrom  string // see CredentialsSource
	credsTried string // see CredentialsTried
	// credsRenew: the credentials can be read again (a file, STS,
	// instance metadata), so a request they are refused for is retried
	// once with fresh ones (see call).
	credsRenew bool
	http       *http.Client
	sizing     objstore.Sizing
	maxRetries int // negative: no cap
	log        *slog.Logger
	m          *metrics
	brk        *breaker
}

var _ objstore.Store = (*Store)(nil)
var _ objstore.Sizer = (*Store)(nil)

// New connects to cfg.Endpoint and checks that cfg.Bucket exists and is
// accessible. Errors wrap objstore.ErrNoBucket (the bucket does not exist),
// objstore.ErrAuth (credentials refused), objstore.ErrUnavailable (the
// server cannot be reached) or objstore.ErrInvalid (a bad configuration;
// a *CredentialsError for an unusable credentials file or profile, found
// before any request), with a message naming the endpoint and bucket.
// CredentialsSourceOf tells where the credentials of a refused request
// came from.
func New(ctx context.Context, cfg Config) (*Store, error) {
	s, err := newStore(cfg)
	if err != nil {
		return nil, err
	}
	// A one-key listing rather than HEAD bucket: a HEAD's error has no
	// body, and the gateway answers an unknown access key with a bare 404
	// that would read as a missing bucket.
	err = s.call(ctx, "check_bucket", false, func(ctx context.Context) error {
		q := url.Values{"list-type": {"2"}, "max-keys": {"1"}}
		if cfg.CheckPrefix != "" {
			q.Set("prefix", cfg.CheckPrefix)
		}
		resp, err := s.raw(ctx, http.MethodGet, "", q, nil)
		if err != nil {
			var oe *opError
			if errors.As(err, &oe) && oe.sentinel == objstore.ErrNotFound {
				return s.bucketMissing()
			}
			return err
		}
		resp.Body.Close()
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, &newError{err: fmt.Errorf("s3 store %s, bucket %q: %w", s.endpoint.Redacted(), cfg.Bucket, err), credsFrom: s.credsFrom, credsTried: s.credsTried}
	}
	return s, nil
}

// newError is an error of New after the credentials were looked up.
type newError struct {
	err                   error
	credsFrom, credsTried string
}

func (e *newError) Error() string { return e.err.Error() }
func (e *newError) Unwrap() error { return e.err }

// CredentialsSourceOf returns the CredentialsSource of the store that New
// was building when it failed with err, and whether err says.
func CredentialsSourceOf(err error) (string, bool) {
	var ne *newError
	if errors.As(err, &ne) {
		return ne.credsFrom, true
	}
	return "", false
}

// CredentialsTriedOf returns the CredentialsTried of the store that New
// was building when it failed with err ("" when err does not say).
func CredentialsTriedOf(err error) string {
	var ne *newError
	if errors.As(err, &ne) {
		return ne.credsTried
	}
	return ""
}

// CredentialsSource says where the store's credentials came from, for
// messages and the mount's log (never a secret): "static keys"
// (Config.AccessKey), "$AWS_ACCESS_KEY_ID", "$MINIO_ROOT_USER",
// "$MINIO_ACCESS_KEY", "FILE [PROFILE]" (the shared credentials file), "web
// identity …", "AssumeRole … with keys from …", "container credentials …",
// "instance metadata …", or "" (anonymous access: CredentialsTried says
// where they were looked for).
func (s *Store) CredentialsSource() string { return s.credsFrom }

// CredentialsTried lists, for a store with anonymous access, every place
// where credentials were looked for and why each had none, as one line.
func (s *Store) CredentialsTried() string { return s.credsTried }

// MakeBucket creates cfg.Bucket (in cfg.Region). A bucket that already
// exists and is owned by the caller is not an error; one of another owner
// is objstore.ErrConflict. Used by demos, tests and the CSI controller.
func MakeBucket(ctx context.Context, cfg Config) error {
	s, err := newStore(cfg)
	if err != nil {
		return err
	}
	return s.call(ctx, "make_bucket", false, func(ctx context.Context) error {
		err := s.core.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: s.cfg.Region})
		if err == nil {
			return nil
		}
		switch minio.ToErrorResponse(err).Code {
		case "BucketAlreadyOwnedByYou":
			return nil
		case "BucketAlreadyExists":
			return fmt.Errorf("%w: bucket %q exists and is another owner's", objstore.ErrConflict, cfg.Bucket)
		}
		return s.classify(err, "make bucket", "")
	})
}

// RemoveBucket deletes cfg.Bucket, which must be empty: a bucket that
// still holds objects (or object versions) is objstore.ErrConflict and is
// left as it is. A bucket that does not exist is not an error.
func RemoveBucket(ctx context.Context, cfg Config) error {
	s, err := newStore(cfg)
	if err != nil {
		return err
	}
	return s.call(ctx, "remove_bucket", false, func(ctx context.Context) error {
		err := s.core.RemoveBucket(ctx, cfg.Bucket)
		switch minio.ToErrorResponse(err).Code {
		case "":
			if err == nil {
				return nil
			}
		case "NoSuchBucket":
			return nil
		case "BucketNotEmpty":
			return fmt.Errorf("%w: bucket %q is not empty", objstore.ErrConflict, cfg.Bucket)
		}
		return s.classify(err, "remove bucket", "")
	})
}

// Sizing reports how the store splits uploads (see objstore.Sizing).
func (s *Store) Sizing() objstore.Sizing { return s.sizing }

// Bucket returns the bucket's name.
func (s *Store) Bucket() string { return s.cfg.Bucket }

// Endpoint returns the server's URL.
func (s *Store) Endpoint() string { return s.endpoint.Redacted() }

func newStore(cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, fmt.Errorf("%w: no bucket configured", objstore.ErrInvalid)
	}
	cfg = cfg.withDefaults()
	s := &Store{cfg: cfg, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.MaxRetries == 0:
		s.maxRetries = -1
	case cfg.MaxRetries < 0:
		s.maxRetries = 0
	default:
		s.maxRetries = cfg.MaxRetries
	}
	s.sizing = objstore.Sizing{MultipartThreshold: cfg.MultipartThreshold, PartSize: cfg.PartSize}.Normalize()

	u, err := parseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	s.endpoint = &url.URL{Scheme: u.Scheme, Host: u.Host}
	s.secure = u.Scheme == "https"

	var wait *serverWait
	if cfg.ServerWait > 0 {
		wait = &serverWait{max: cfg.ServerWait, quick: cfg.ProbeTimeout, log: s.log, probe: s.probe}
	}
	tr, err := transport(cfg, s.secure, wait)
	if err != nil {
		return nil, err
	}
	rt := tracking{base: tr}
	s.http = &http.Client{Transport: rt}
	if err := s.newCore(u.Host, rt); err != nil {
		return nil, err
	}
	s.m = newMetrics(cfg.Registerer)
	s.brk = newBreaker(s.probe, cfg.ProbeTimeout, cfg.ConnectTimeout+cfg.IdleTimeout, s.m, s.log)
	return s, nil
}

// withDefaults returns cfg with every unset (or out-of-range) tunable at
// its default.
func (cfg Config) withDefaults() Config {
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.RetryDeadline <= 0 {
		cfg.RetryDeadline = DefaultRetryDeadline
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = 750 * time.Millisecond
	}
	if cfg.ServerWait == 0 {
		cfg.ServerWait = DefaultServerWait
	}
	if cfg.ListPageSize <= 0 || cfg.ListPageSize > 1000 {
		cfg.ListPageSize = 1000
	}
	return cfg
}

// parseEndpoint parses a configured endpoint, http://host[:port] or
// https://host[:port] (https when the scheme is left out); any other form
// is ErrInvalid.
func parseEndpoint(endpoint string) (*url.URL, error) {
	raw := endpoint
	if raw == "" {
		return nil, fmt.Errorf("%w: no endpoint configured", objstore.ErrInvalid)
	}
	if !strings.Contains(raw, "://") {
		raw = "https://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("%w: endpoint %q: want http://host[:port] or https://host[:port]", objstore.ErrInvalid, endpoint)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("%w: endpoint %q must not have a path", objstore.ErrInvalid, endpoint)
	}
	return u, nil
}

// newCore sets s.creds (see resolveCredentials) and the minio-go client
// s.core for host over rt.
func (s *Store) newCore(host string, rt http.RoundTripper) error {
	cfg := s.cfg
	found, err := resolveCredentials(cfg, &http.Client{Transport: rt}, s.log, time.Now)
	if err != nil {
		return err
	}
	s.creds, s.credsFrom, s.credsTried, s.credsRenew = found.creds, found.from, found.tried, found.renewable
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	core, err := minio.NewCore(host, &minio.Options{
		Creds:        s.creds,
		Secure:       s.secure,
		Transport:    rt,
		Region:       cfg.Region,
		BucketLookup: lookup,
		// One attempt per call: this package retries, so that it knows
		// when a write's outcome became uncertain.
		MaxRetries: 1,
	})
	if err != nil {
		return fmt.Errorf("%w: endpoint %q: %v", objstore.ErrInvalid, cfg.Endpoint, err)
	}
	s.core = core
	return nil
}

// probe asks the server for anything at all (a HEAD of the bucket): nil
// when it answered, whatever the answer.
func (s *Store) probe(ctx context.Context) error {
	resp, err := s.raw(ctx, http.MethodHead, "", nil, nil)
	var oe *opError
	switch {
	case err == nil:
		resp.Body.Close()
		return nil
	case errors.As(err, &oe) && oe.answered:
		return nil
	}
	return err
}

// Close stops the background probing of a store that counts the storage as
// down and closes idle connections. Optional: a Store holds no other
// resources. The Store must not be used after Close.
func (s *Store) Close() {
	s.brk.close()
	s.http.CloseIdleConnections()
}

// transport builds the HTTP transport: the CA bundle, TLS settings and
// timeouts (wait: see serverwait.go; nil for none).
func transport(cfg Config, secure bool, wait *serverWait) (*http.Transport, error) {
	tr := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		// No total or header timeout: see conn.go.
		DialContext:           dialer(cfg.ConnectTimeout, cfg.IdleTimeout, wait),
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   cfg.ConnectTimeout,
		ExpectContinueTimeout: 5 * time.Second,
		// A small request in one write (onewrite.go).
		WriteBufferSize: oneWriteBuffer,
		// S3 bodies are already compressed or opaque; asking for gzip
		// would make Content-Length unreliable.
		DisableCompression: true,
	}
	if !secure {
		return tr, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cfg.InsecureSkipVerify} //nolint:gosec // opt-in for tests
	caFile, from := cfg.CAFile, "CAFile"
	if caFile == "" {
		caFile, from = os.Getenv("AWS_CA_BUNDLE"), "AWS_CA_BUNDLE"
	}
	if caFile != "" {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", objstore.ErrInvalid, from, err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: %s=%s holds no PEM certificate", objstore.ErrInvalid, from, caFile)
		}
		tc.RootCAs = pool
	}
	tr.TLSClientConfig = tc
	return tr, nil
}

func (s *Store) bucketMissing() error {
	return &opError{sentinel: objstore.ErrNoBucket, msg: fmt.Sprintf("bucket %q does not exist at %s (create it first)", s.cfg.Bucket, s.endpoint.Redacted()), certain: true}
}

// errBodyShort reports a Put body shorter than its declared size.
var errBodyShort = errors.New("body shorter than the declared size")
