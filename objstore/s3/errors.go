package s3

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"

	"github.com/fencefs/fencefs/objstore"
	"github.com/minio/minio-go/v7"
)

// opError is a classified failure of one S3 request. It wraps exactly one
// objstore sentinel.
type opError struct {
	sentinel error
	msg      string
	// certain: the request was certainly not applied (a refusal, a
	// connection that was never made, 503). Only uncertain failures of
	// writes make the outcome ambiguous.
	certain bool
	// noRetry forbids retrying an otherwise retryable error.
	noRetry bool
	code    string // S3 error code, when there was one
	status  int
	// answered: the server sent an HTTP answer (the storage is up).
	answered bool
	// down: no answer because of a timeout or a failed connect (the
	// storage counts as down at once); a failure that is neither answered
	// nor down is a broken connection (a reset, an EOF).
	down bool
}

func (e *opError) Error() string { return e.msg + ": " + e.sentinel.Error() }
func (e *opError) Unwrap() error { return e.sentinel }

// NotApplied reports that the request was certainly not applied (see
// objstore.MaybeApplied).
func (e *opError) NotApplied() bool { return e.certain }

func (e *opError) retryable() bool {
	return !e.noRetry && (e.sentinel == objstore.ErrUnavailable || e.sentinel == objstore.ErrConflict)
}

// classify turns an error from minio-go or net/http into an *opError (or
// returns a context error as is). what names the request ("put", "head"),
// key the object ("" for the bucket).
func (s *Store) classify(err error, what, key string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var oe *opError
	if errors.As(err, &oe) {
		return oe
	}
	where := fmt.Sprintf("s3 %s %s/%s", what, s.cfg.Bucket, key)
	if key == "" {
		where = fmt.Sprintf("s3 %s %s", what, s.cfg.Bucket)
	}
	var re *retrievalError
	if errors.As(err, &re) {
		return s.classifyRetrieval(re, where)
	}
	var er minio.ErrorResponse
	if errors.As(err, &er) && (er.StatusCode != 0 || er.Code != "") {
		return s.classifyResponse(er, where)
	}
	if what == "hash" || errors.Is(err, errBodyShort) {
		// Reading the caller's body failed before anything was sent.
		return &opError{sentinel: objstore.ErrInvalid, msg: fmt.Sprintf("s3 put %s/%s: reading the body: %v", s.cfg.Bucket, key, err), certain: true}
	}
	var cve *tls.CertificateVerificationError
	var uae x509.UnknownAuthorityError
	var hne x509.HostnameError
	if errors.As(err, &cve) || errors.As(err, &uae) || errors.As(err, &hne) {
		return &opError{sentinel: objstore.ErrUnavailable, certain: true, noRetry: true,
			msg: fmt.Sprintf("%s: the TLS certificate of %s is not trusted (set the CA file, or AWS_CA_BUNDLE): %v", where, s.endpoint.Redacted(), err)}
	}
	// Network-level failures: the request may or may not have reached the
	// server, unless the connection was never made.
	certain := false
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" || errors.Is(err, syscall.ECONNREFUSED) {
		certain = true
	}
	var ne net.Error
	timeout := errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
	var ue *url.Error
	if errors.As(err, &ue) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, new(net.Error)) || certain {
		why := "cannot reach"
		if timeout && !certain {
			why = fmt.Sprintf("no byte moved for %v to or from", s.cfg.IdleTimeout)
		}
		return &opError{sentinel: objstore.ErrUnavailable, msg: fmt.Sprintf("%s: %s %s: %v", where, why, s.endpoint.Redacted(), err),
			certain: certain, down: certain || timeout}
	}
	// Anything else is unknown: treat it as an unknown outcome.
	return &opError{sentinel: objstore.ErrUnavailable, msg: fmt.Sprintf("%s: %v", where, err)}
}

// classifyResponse classifies an answer of the server (or one of minio-go's
// own argument checks, status 0): by its S3 error code when the code is
// known, else by its HTTP status.
func (s *Store) classifyResponse(er minio.ErrorResponse, where string) *opError {
	detail := er.Code
	if er.Message != "" {
		detail += ": " + er.Message
	}
	if er.StatusCode != 0 {
		detail += fmt.Sprintf(" (HTTP %d)", er.StatusCode)
	}
	e := &opError{msg: where + ": " + detail, certain: true, code: er.Code, status: er.StatusCode, answered: er.StatusCode != 0}
	if sentinel, ok := codeSentinels[er.Code]; ok {
		e.sentinel = sentinel
		e.certain = !uncertainCodes[er.Code]
		s.explainCode(e, where, detail)
		return e
	}
	s.classifyStatus(e, where, detail)
	return e
}

// codeSentinels maps the S3 error codes known here to their domain error.
var codeSentinels = map[string]error{
	"NoSuchBucket": objstore.ErrNoBucket,

	"NoSuchKey": objstore.ErrNotFound, "NoSuchUpload": objstore.ErrNotFound, "NoSuchVersion": objstore.ErrNotFound,

	"PreconditionFailed": objstore.ErrPrecondition,

	"AccessDenied": objstore.ErrAuth, "InvalidAccessKeyId": objstore.ErrAuth, "SignatureDoesNotMatch": objstore.ErrAuth,
	"ExpiredToken": objstore.ErrAuth, "InvalidToken": objstore.ErrAuth, "TokenRefreshRequired": objstore.ErrAuth,
	"AllAccessDisabled": objstore.ErrAuth, "AccountProblem": objstore.ErrAuth, "InvalidSecurity": objstore.ErrAuth,
	"MissingSecurityHeader": objstore.ErrAuth, "XAdminUserNotFound": objstore.ErrAuth,
	"RequestTimeTooSkewed": objstore.ErrAuth,

	"SlowDown": objstore.ErrUnavailable, "ServiceUnavailable": objstore.ErrUnavailable, "Busy": objstore.ErrUnavailable,
	"RequestTimeout": objstore.ErrUnavailable, "InternalError": objstore.ErrUnavailable,
	"ExpiredRequest": objstore.ErrUnavailable, "ClientDisconnected": objstore.ErrUnavailable,

	"ConditionalRequestConflict": objstore.ErrConflict, "OperationAborted": objstore.ErrConflict,

	"ExistingObjectIsDirectory": objstore.ErrInvalid, "ObjectParentIsFile": objstore.ErrInvalid,
	"DirectoryObjectContainsData": objstore.ErrInvalid, "ErrDirectoryNotEmpty": objstore.ErrInvalid,
	"InvalidRange": objstore.ErrInvalid,
	// A feature the store does not have (the Versity gateway's bucket
	// lifecycle): a refusal, not an outage to retry.
	"NotImplemented": objstore.ErrInvalid,
}

// uncertainCodes are the codes of failures after which the request may have
// been applied. ClientDisconnected is MinIO's HTTP 499, while another client
// is stopped mid-request.
var uncertainCodes = map[string]bool{
	"RequestTimeout": true, "InternalError": true, "ExpiredRequest": true, "ClientDisconnected": true,
}

// layoutCodes are the Versity gateway's posix backend's refusals: it cannot
// hold a file and a directory at one name, nor a body in a "dir/" object.
var layoutCodes = map[string]bool{
	"ExistingObjectIsDirectory": true, "ObjectParentIsFile": true, "DirectoryObjectContainsData": true, "ErrDirectoryNotEmpty": true,
}

// explainCode rewrites e.msg, for the codes whose plain detail would not
// tell the user what to fix.
func (s *Store) explainCode(e *opError, where, detail string) {
	switch {
	case e.code == "NoSuchBucket":
		e.msg = fmt.Sprintf("%s: bucket %q does not exist at %s", where, s.cfg.Bucket, s.endpoint.Redacted())
	case e.code == "RequestTimeTooSkewed":
		e.msg = fmt.Sprintf("%s: the local clock differs too much from %s's: %s", where, s.endpoint.Redacted(), detail)
	case e.sentinel == objstore.ErrAuth:
		e.msg = s.refusedCredentials(where, detail)
	case layoutCodes[e.code]:
		e.msg += " (the backend stores keys as files and directories)"
	}
}

// refusedCredentials is the message of an answer refusing the credentials.
func (s *Store) refusedCredentials(where, detail string) string {
	return fmt.Sprintf("%s: %s refused the credentials for bucket %q: %s", where, s.endpoint.Redacted(), s.cfg.Bucket, detail)
}

// classifyStatus sets e's sentinel (and certainty) from its HTTP status, for
// an answer whose code is not in codeSentinels.
func (s *Store) classifyStatus(e *opError, where, detail string) {
	switch st := e.status; {
	case st == http.StatusNotModified:
		e.sentinel = objstore.ErrNotModified
	case st == http.StatusPreconditionFailed:
		e.sentinel = objstore.ErrPrecondition
	case st == http.StatusNotFound:
		e.sentinel = objstore.ErrNotFound
	case st == http.StatusUnauthorized || st == http.StatusForbidden:
		e.sentinel = objstore.ErrAuth
		e.msg = s.refusedCredentials(where, detail)
	case st == http.StatusConflict:
		e.sentinel = objstore.ErrConflict
	case st == http.StatusServiceUnavailable || st == http.StatusTooManyRequests:
		e.sentinel = objstore.ErrUnavailable
	case st >= 500, st == 499, st == http.StatusRequestTimeout:
		// 499: nginx's and MinIO's "client closed request".
		e.sentinel = objstore.ErrUnavailable
		e.certain = false
	case st == 0:
		// minio-go's own argument checks (invalid names, sizes).
		e.sentinel = objstore.ErrInvalid
	case invalidStatus[st]:
		e.sentinel = objstore.ErrInvalid
	default:
		// A status whose meaning is unknown here: the storage is in
		// trouble, not the request (EIO, never EINVAL). Not retried, and
		// the outcome of a write is unknown.
		e.sentinel = objstore.ErrUnavailable
		e.certain, e.noRetry = false, true
		e.msg += " (an answer fencefs does not know)"
	}
}

// invalidStatus are the HTTP statuses that mean the request itself was
// refused as malformed (ErrInvalid); any other unknown status is
// ErrUnavailable.
var invalidStatus = map[int]bool{
	http.StatusBadRequest: true, http.StatusMethodNotAllowed: true, http.StatusNotAcceptable: true,
	http.StatusLengthRequired: true, http.StatusRequestEntityTooLarge: true, http.StatusRequestURITooLong: true,
	http.StatusUnsupportedMediaType: true, http.StatusRequestedRangeNotSatisfiable: true,
	http.StatusRequestHeaderFieldsTooLarge: true,
}

// outcome is the metrics label of a request's result.
func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.Is(err, objstore.ErrNotFound):
		return "not_found"
	case errors.Is(err, objstore.ErrPrecondition):
		return "precondition"
	case errors.Is(err, objstore.ErrNotModified):
		return "not_modified"
	case errors.Is(err, objstore.ErrConflict):
		return "conflict"
	case errors.Is(err, objstore.ErrAuth):
		return "auth"
	case errors.Is(err, objstore.ErrNoBucket):
		return "no_bucket"
	case errors.Is(err, objstore.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, objstore.ErrInvalid):
		return "invalid"
	}
	return "other"
}

// asPrecondition maps ErrNotFound (NoSuchKey) answering a write with
// If-Match to ErrPrecondition, as the gateway answers If-Match on a missing
// key with 404.
func asPrecondition(err error, cond objstore.Condition) error {
	var oe *opError
	if cond.IfMatch != "" && errors.As(err, &oe) && oe.sentinel == objstore.ErrNotFound && oe.code != "NoSuchUpload" {
		return &opError{sentinel: objstore.ErrPrecondition, msg: oe.msg + " (If-Match on a missing key)", certain: true, code: oe.code, status: oe.status}
	}
	return err
}
