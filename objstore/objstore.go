// Package objstore is fencefs's storage seam: a narrow, context-first interface
// over an S3-compatible bucket with conditional writes, the sentinel errors
// every implementation classifies its failures into, and the capability probe.
//
// Implementations:
//   - objstore/s3: the real one, on minio-go (the only package importing it);
//   - objstore/memstore: in memory, enforcing the same preconditions, with
//     fault hooks for tests;
//   - objstore/storetest: the conformance suite every implementation runs.
//
// objstore knows nothing about epochs, inodes or files: it moves bytes and
// evaluates preconditions. Keys are full object keys inside one bucket.
//
// # Errors
//
// Every error returned by a Store is either nil, a context error, or wraps
// exactly one of the sentinels below (test with errors.Is), so that callers
// never need to look at HTTP status codes:
//
//	ErrNotFound      404 NoSuchKey on a read, stat or unconditional delete
//	ErrPrecondition  412, and NoSuchKey answering an If-Match write/copy/delete
//	ErrNotModified   304 answering Get with IfNoneMatch
//	ErrConflict      409 (concurrent conditional operation in progress), after retries
//	ErrAuth          403/401 and signature errors: wrong credentials
//	ErrNoBucket      NoSuchBucket
//	ErrUnavailable   connection refused/reset, timeouts, 5xx, 499 and any
//	                 status the store does not know, after retries; the
//	                 outcome of a write that fails this way is UNKNOWN
//	ErrInvalid       the request was refused as malformed (400 other than the
//	                 above, and the other malformed-request statuses)
//
// # Retries
//
// A Store retries transient failures (ErrUnavailable, ErrConflict) itself,
// until a retry deadline that a caller can set for a whole operation with
// WithRetryDeadline; what it returns is final, and callers do not retry it
// again (the fencing layer resolves unknown outcomes instead).
//
// # Concurrency
//
// Stores are safe for concurrent use by multiple goroutines.
package objstore

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"
)

// Sentinel errors. See the package documentation for their meaning.
var (
	ErrNotFound     = errors.New("object not found")
	ErrPrecondition = errors.New("precondition failed")
	ErrNotModified  = errors.New("not modified")
	ErrConflict     = errors.New("conflicting concurrent operation")
	ErrAuth         = errors.New("access denied (check the access key and secret)")
	ErrNoBucket     = errors.New("bucket does not exist")
	ErrUnavailable  = errors.New("storage unavailable")
	ErrInvalid      = errors.New("request refused as invalid")
)

// Condition is a precondition on the key being written or deleted.
// The zero value is unconditional. At most one field may be set.
type Condition struct {
	// IfMatch makes the operation succeed only if the key's current ETag
	// equals this value (unquoted). A missing key fails with ErrPrecondition.
	IfMatch string
	// IfNoneMatch (If-None-Match: *) makes the operation succeed only if the
	// key does not exist.
	IfNoneMatch bool
}

// IsZero reports whether c is unconditional.
func (c Condition) IsZero() bool { return c.IfMatch == "" && !c.IfNoneMatch }

// Shape selects how an object is uploaded, which decides the form of its
// ETag: a plain PUT gets the MD5 of the content; a multipart upload gets
// "md5-of-part-md5s-N". The fencing sweep relies on choosing a shape
// different from the current one to force an ETag change.
type Shape int

const (
	// ShapeAuto uploads plainly up to the store's multipart threshold and as
	// a parallel multipart upload above it.
	ShapeAuto Shape = iota
	// ShapePlain forces a single PUT (fails with ErrInvalid above 5 GiB).
	ShapePlain
	// ShapeMultipart forces a multipart upload with PutOptions.Parts parts
	// (0 means: as many as the part size gives, at least one).
	ShapeMultipart
)

// PutOptions configures Put and the destination side of Copy.
type PutOptions struct {
	// Cond is the precondition on the destination key, evaluated atomically
	// with the write (on PutObject or on CompleteMultipartUpload).
	Cond Condition
	// Meta is the user metadata to store (keys lower-case, without the
	// "x-amz-meta-" prefix). On Copy, nil means "keep the source's metadata".
	Meta map[string]string
	// Tags are object tags to store with the object (ValidateTags); a
	// lifecycle rule can select objects by them (TagExpiry). Never taken
	// from a source: a Copy without Tags stores none.
	Tags map[string]string
	// ContentType of the object; empty means application/octet-stream.
	ContentType string
	// Shape and Parts select the upload shape; see Shape.
	Shape Shape
	Parts int
	// Source, on Copy only, is what the caller already read of the source
	// version it names (Size, Meta, ContentType of the version with
	// srcETag): the store may use it instead of reading them again. The
	// content is still read pinned to srcETag, so a source that changed
	// still fails the copy with ErrPrecondition.
	Source *ObjectInfo
}

// GetOptions configures Get.
type GetOptions struct {
	// Offset and Length select a byte range; Length <= 0 means to the end
	// (so a zero GetOptions reads the whole object). An Offset at or past
	// the end gives an empty body.
	Offset, Length int64
	// IfMatch pins the read to one version: if the object's ETag differs the
	// read fails with ErrPrecondition (also if it changes mid-read).
	IfMatch string
	// IfNoneMatch makes the read fail with ErrNotModified when the object's
	// ETag equals this value.
	IfNoneMatch string
}

// ObjectInfo describes one version of an object.
type ObjectInfo struct {
	Key          string
	Size         int64
	ETag         string // unquoted
	LastModified time.Time
	// Meta is the user metadata: lower-case keys without "x-amz-meta-".
	// Set by Stat, Get, Put and Copy; nil in listings.
	Meta        map[string]string
	ContentType string
}

// Entry is one result of List: an object, or a common prefix when a
// delimiter was given.
type Entry struct {
	Key          string // full key; for a prefix it ends with the delimiter
	IsPrefix     bool
	Size         int64
	ETag         string
	LastModified time.Time
	// Meta is the object's user metadata as Stat returns it (lower-case
	// keys without "x-amz-meta-"; empty, not nil, for an object without
	// any) when the listing carried it: ListMeta on a store that can
	// (CheckListMetadata). nil when it did not, from List always.
	Meta map[string]string
	// ContentType is the object's content type when Meta is set.
	ContentType string
}

// Info returns the version the entry describes as Stat would return it
// (LastModified as the store lists it), and false when the listing did not
// carry the object's metadata (or the entry is a prefix): then only a Stat
// tells.
func (e Entry) Info() (ObjectInfo, bool) {
	if e.IsPrefix || e.Meta == nil {
		return ObjectInfo{}, false
	}
	return ObjectInfo{Key: e.Key, Size: e.Size, ETag: e.ETag, LastModified: e.LastModified,
		Meta: e.Meta, ContentType: e.ContentType}, true
}

// Part is one uploaded part of a multipart upload.
type Part struct {
	Number int    // 1-based part number
	Size   int64  // bytes
	ETag   string // unquoted, as the store returned it (the MD5 of the part on S3)
}

// Upload is an incomplete multipart upload, as listed for garbage collection.
type Upload struct {
	Key       string
	UploadID  string
	Initiated time.Time
}

// Store is the storage interface. Every method takes a context; cancelling it
// abandons the call (a write's outcome is then unknown and reported as the
// context error).
type Store interface {
	// Stat returns the current version of key, or ErrNotFound.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// Get opens a read of key. The returned info describes the version being
	// read. The caller must close the reader. Errors: ErrNotFound,
	// ErrPrecondition (IfMatch), ErrNotModified (IfNoneMatch).
	Get(ctx context.Context, key string, opts GetOptions) (io.ReadCloser, ObjectInfo, error)
	// Put writes size bytes read from body at key, atomically with
	// opts.Cond. body is read with ReadAt so that parts can be uploaded in
	// parallel and retried; it must not change during the call. Every body
	// is sent with a payload integrity check, so a client dying mid-body can
	// never publish a truncated object.
	Put(ctx context.Context, key string, body io.ReaderAt, size int64, opts PutOptions) (ObjectInfo, error)
	// Copy copies the version srcETag of src to dst server-side, with
	// opts.Cond evaluated on dst atomically with the write. If src's ETag is
	// not srcETag it fails with ErrPrecondition. src may equal dst (a
	// rewrite in place, used to change an object's ETag).
	Copy(ctx context.Context, src, srcETag, dst string, opts PutOptions) (ObjectInfo, error)
	// Delete removes key if cond holds. Deleting a missing key without a
	// condition succeeds (S3 semantics). Some backends ignore conditions on
	// DELETE; the probe detects that (CheckConditionalDelete).
	Delete(ctx context.Context, key string, cond Condition) error
	// DeleteMany removes keys unconditionally, in as few requests as the
	// store allows (S3 DeleteObjects: up to 1000 keys each). Missing keys
	// count as deleted. The error joins the failures of single keys.
	DeleteMany(ctx context.Context, keys []string) error
	// List calls fn for each object under prefix in lexical key order, and
	// for each common prefix when delim is non-empty. An error from fn stops
	// the listing and is returned.
	List(ctx context.Context, prefix, delim string, fn func(Entry) error) error
	// ListMeta is List whose object entries also carry each object's
	// user metadata and content type (Entry.Meta), on a store whose
	// listings can (CheckListMetadata: MinIO's ListObjectsV2 with
	// metadata=true). An entry the store listed without its metadata —
	// every entry of a store that cannot, an object the caller may list
	// but not read — has Meta nil, as from List. The metadata is of the
	// version the entry's ETag names.
	ListMeta(ctx context.Context, prefix, delim string, fn func(Entry) error) error
	// CreateUpload starts a multipart upload of key that the caller fills
	// piecewise (UploadPart) while the content is still being produced, and
	// publishes with CompleteUpload. It stores opts.Meta and
	// opts.ContentType; opts.Cond, Shape and Parts are ignored (the
	// condition is CompleteUpload's). The upload is invisible until
	// completed; an abandoned one is found by ListUploads.
	CreateUpload(ctx context.Context, key string, opts PutOptions) (uploadID string, err error)
	// UploadPart uploads n bytes of body from offset off as part number
	// (1..MaxParts) of the upload, with Put's payload integrity check.
	// body must not change during the call. Every part but the last must
	// be at least MinPartSize bytes (checked by CompleteUpload). A number
	// uploaded again replaces the earlier part. ErrConflict when the upload
	// is gone.
	UploadPart(ctx context.Context, key, uploadID string, number int, body io.ReaderAt, off, n int64) (Part, error)
	// CompleteUpload publishes parts (in ascending number order) as key,
	// atomically with cond. The returned info has Key, Size, ETag and
	// LastModified, not Meta. A refused condition (ErrPrecondition) or
	// another failure leaves the upload in place: the caller retries or
	// aborts it. ErrConflict when the upload is gone (aborted by someone
	// else); ErrInvalid for a part list the store refuses.
	CompleteUpload(ctx context.Context, key, uploadID string, parts []Part, cond Condition) (ObjectInfo, error)
	// ListUploads calls fn for each incomplete multipart upload under prefix.
	ListUploads(ctx context.Context, prefix string, fn func(Upload) error) error
	// AbortUpload aborts an incomplete multipart upload.
	AbortUpload(ctx context.Context, key, uploadID string) error
}

// NormalizeETag strips surrounding quotes and weak markers from an ETag.
func NormalizeETag(etag string) string {
	etag = strings.TrimPrefix(etag, "W/")
	return strings.Trim(etag, `"`)
}

// IsMultipartETag reports whether etag has the "-N" suffix of a multipart
// upload, and returns N.
func IsMultipartETag(etag string) (parts int, ok bool) {
	etag = NormalizeETag(etag)
	i := strings.LastIndexByte(etag, '-')
	if i < 0 {
		return 0, false
	}
	n := 0
	for _, c := range etag[i+1:] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, i+1 < len(etag)
}
