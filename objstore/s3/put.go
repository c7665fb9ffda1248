package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/minio/minio-go/v7"
)

// Put implements objstore.Store; see the package documentation for the
// request shapes and integrity checks. The returned LastModified is the
// client's clock at commit (S3 does not return it on writes).
func (s *Store) Put(ctx context.Context, key string, body io.ReaderAt, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := validateWrite(key, opts); err != nil {
		return objstore.ObjectInfo{}, err
	}
	layout, err := s.sizing.Layout(size, opts.Shape, opts.Parts)
	if err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("put %q: %w", key, err)
	}
	var etag string
	if layout == nil {
		etag, err = s.putPlain(ctx, key, body, size, opts)
	} else {
		etag, err = s.putMultipart(ctx, key, layout, opts, func(ctx context.Context, uploadID string, part int, off, n int64) (minio.CompletePart, error) {
			return s.uploadPart(ctx, key, uploadID, part, io.NewSectionReader(body, off, n), n)
		})
	}
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	return s.written(key, size, etag, opts.Meta, opts.ContentType), nil
}

func (s *Store) written(key string, size int64, etag string, meta map[string]string, ct string) objstore.ObjectInfo {
	if ct == "" {
		ct = "application/octet-stream"
	}
	m := maps.Clone(meta)
	if m == nil {
		m = map[string]string{}
	}
	return objstore.ObjectInfo{Key: key, Size: size, ETag: etag, LastModified: time.Now().UTC().Truncate(time.Second), Meta: m, ContentType: ct}
}

func validateWrite(key string, opts objstore.PutOptions) error {
	return objstore.ValidateWrite(key, opts)
}

// putOptions builds minio-go's options: metadata, content type, condition.
func putOptions(meta map[string]string, ct string, cond objstore.Condition) minio.PutObjectOptions {
	o := minio.PutObjectOptions{
		ContentType: ct,
		// The SHA-256 is computed here and sent as the signed payload hash;
		// minio-go must not replace it by a streaming signature (HTTP) or
		// UNSIGNED-PAYLOAD (HTTPS).
		DisableContentSha256: true,
		DisableMultipart:     true,
	}
	if len(meta) > 0 {
		o.UserMetadata = make(map[string]string, len(meta))
		for k, v := range meta {
			// The full header name, so that minio-go never mistakes a key
			// such as "content-type" for a standard header.
			o.UserMetadata["x-amz-meta-"+k] = v
		}
	}
	switch {
	case cond.IfMatch != "":
		o.SetMatchETag(objstore.NormalizeETag(cond.IfMatch))
	case cond.IfNoneMatch:
		o.SetMatchETagExcept("*")
	}
	return o
}

// payloadHash returns the hex SHA-256 of n bytes of r: the signed payload
// hash the server checks the body against. (No Content-MD5: the SHA-256
// already makes the server refuse a body that is not the one hashed, and
// MD5 cost a second pass of CPU on every upload; docs/DECISIONS.md.)
func payloadHash(r io.Reader, n int64) (string, error) {
	hs := sha256.New()
	got, err := io.CopyBuffer(hs, io.LimitReader(r, n), make([]byte, 1<<20))
	if err != nil {
		return "", err
	}
	if got != n {
		return "", fmt.Errorf("%w: %d of %d bytes", errBodyShort, got, n)
	}
	return hex.EncodeToString(hs.Sum(nil)), nil
}

// maxBufferedBody is the largest request body read into memory once (hashed
// and sent from there); larger ones are read twice from the caller's
// ReaderAt. Parts (8 MiB by default) and plain PUTs up to the multipart
// threshold are buffered: one pread instead of two passes of 32 KiB reads,
// which cost a syscall each.
const maxBufferedBody = 64 << 20

// bodyPool holds request body buffers (*[]byte).
var bodyPool sync.Pool

// payload is a request body ready to send: its bytes (when buffered) or the
// caller's section, and its signed SHA-256.
type payload struct {
	r   io.ReadSeeker
	sha string
	buf *[]byte // pooled buffer holding the body, or nil
}

// loadPayload reads n bytes of r (from its start) for one request.
func loadPayload(r *io.SectionReader, n int64) (*payload, error) {
	if n > maxBufferedBody {
		sha, err := payloadHash(r, n)
		if err != nil {
			return nil, err
		}
		return &payload{r: r, sha: sha}, nil
	}
	bp, _ := bodyPool.Get().(*[]byte)
	if bp == nil || int64(cap(*bp)) < n {
		b := make([]byte, n)
		bp = &b
	}
	buf := (*bp)[:n]
	if got, err := io.ReadFull(r, buf); err != nil {
		bodyPool.Put(bp)
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			return nil, fmt.Errorf("%w: %d of %d bytes", errBodyShort, got, n)
		}
		return nil, err
	}
	sum := sha256.Sum256(buf)
	return &payload{r: bytes.NewReader(buf), sha: hex.EncodeToString(sum[:]), buf: bp}, nil
}

// rewind prepares the body for an attempt.
func (p *payload) rewind() error {
	_, err := p.r.Seek(0, io.SeekStart)
	return err
}

// release returns the buffer to the pool. Only after a successful request:
// after a failed one the HTTP transport may still be reading the body.
func (p *payload) release() {
	if p.buf != nil {
		bodyPool.Put(p.buf)
		p.buf = nil
	}
}

func (s *Store) putPlain(ctx context.Context, key string, body io.ReaderAt, size int64, opts objstore.PutOptions) (string, error) {
	pl, err := loadPayload(io.NewSectionReader(body, 0, size), size)
	if err != nil {
		return "", s.classify(err, "hash", key)
	}
	po := putOptions(opts.Meta, opts.ContentType, opts.Cond)
	po.UserTags = opts.Tags
	var etag string
	err = s.call(ctx, "put", true, func(ctx context.Context) error {
		if err := pl.rewind(); err != nil {
			return s.classify(err, "hash", key)
		}
		info, err := s.core.PutObject(ctx, s.cfg.Bucket, key, pl.r, size, "", pl.sha, po)
		if err != nil {
			return asPrecondition(s.classify(err, "put", key), opts.Cond)
		}
		etag = objstore.NormalizeETag(info.ETag)
		s.m.up(size)
		return nil
	})
	if err == nil {
		pl.release()
	}
	return etag, err
}

func (s *Store) uploadPart(ctx context.Context, key, uploadID string, part int, r *io.SectionReader, n int64) (minio.CompletePart, error) {
	pl, err := loadPayload(r, n)
	if err != nil {
		return minio.CompletePart{}, s.classify(err, "hash", key)
	}
	var cp minio.CompletePart
	err = s.call(ctx, "upload_part", true, func(ctx context.Context) error {
		if err := pl.rewind(); err != nil {
			return s.classify(err, "hash", key)
		}
		p, err := s.core.PutObjectPart(ctx, s.cfg.Bucket, key, uploadID, part, pl.r, n, minio.PutObjectPartOptions{
			Sha256Hex: pl.sha, DisableContentSha256: true,
		})
		if err != nil {
			return s.classify(err, "upload part", key)
		}
		cp = minio.CompletePart{PartNumber: part, ETag: objstore.NormalizeETag(p.ETag)}
		s.m.up(n)
		return nil
	})
	if err == nil {
		pl.release()
	}
	return cp, err
}

// abortBudget bounds the abort of a failed upload, retries included.
const abortBudget = 30 * time.Second

// partFunc uploads (or copies) one part of an upload.
type partFunc func(ctx context.Context, uploadID string, part int, off, n int64) (minio.CompletePart, error)

// putMultipart runs a multipart upload with the part sizes in layout:
// create, parts in parallel (Concurrency at a time), then a Complete
// carrying opts.Cond. Any failure aborts the upload.
func (s *Store) putMultipart(ctx context.Context, key string, layout []int64, opts objstore.PutOptions, part partFunc) (string, error) {
	uploadID, err := s.createUpload(ctx, key, opts)
	if err != nil {
		// A lost response may have created an upload nobody knows of; the
		// garbage collector finds it with ListUploads.
		return "", err
	}
	etag, err := s.runUpload(ctx, key, uploadID, layout, opts.Cond, part)
	if err != nil {
		// Abort even when ctx is done (a failed conditional Complete leaves
		// the upload behind on the gateway), and with retries of its own:
		// the upload's budget may be spent, or the storage found down by
		// the very failure that ends it.
		actx, cancel := objstore.Cleanup(ctx, abortBudget)
		defer cancel()
		if aerr := s.AbortUpload(actx, key, uploadID); aerr != nil && !errors.Is(aerr, objstore.ErrNotFound) {
			s.log.Warn("s3: cannot abort a failed multipart upload", "key", key, "upload", uploadID, "err", aerr)
		}
	}
	return etag, err
}

func (s *Store) runUpload(ctx context.Context, key, uploadID string, layout []int64, cond objstore.Condition, part partFunc) (string, error) {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	parts := make([]minio.CompletePart, len(layout))
	var (
		mu       sync.Mutex
		firstErr error // GUARDED_BY(mu)
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, s.cfg.Concurrency)
	var off int64
	for i, n := range layout {
		select {
		case sem <- struct{}{}:
		case <-pctx.Done():
		}
		if pctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(i int, off, n int64) {
			defer wg.Done()
			defer func() { <-sem }()
			cp, err := part(pctx, uploadID, i+1, off, n)
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				cancel()
				return
			}
			parts[i] = cp
		}(i, off, n)
		off += n
	}
	wg.Wait()
	if firstErr != nil {
		return "", firstErr
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	var size int64
	for _, n := range layout {
		size += n
	}
	return s.complete(ctx, key, uploadID, parts, size, cond)
}

// complete sends CompleteMultipartUpload with cond.
//
// A retry after an attempt whose outcome is unknown is not trusted blindly:
// the gateway acknowledges a repeated Complete whenever the upload is gone
// and the key exists, or while another Complete of it is still in progress
// (before that one has evaluated its precondition). So a success after
// such an attempt is confirmed with a HEAD: the key must hold the upload's
// ETag (computed from the part ETags); otherwise the result is
// ErrUnavailable, uncertain. A retry that finds the upload gone
// (NoSuchUpload) is ErrUnavailable, uncertain, too. Gone at the first
// attempt, the upload was aborted by someone else: ErrConflict.
//
// The server may assemble the parts before it answers, moving no byte
// meanwhile: the request's idle timeout grows with size (completeIdle).
func (s *Store) complete(ctx context.Context, key, uploadID string, parts []minio.CompletePart, size int64, cond objstore.Condition) (string, error) {
	ctx = withIdle(ctx, s.completeIdle(size))
	po := putOptions(nil, "", cond)
	var etag string
	maybeDone := false
	err := s.call(ctx, "complete", true, func(ctx context.Context) error {
		info, err := s.core.CompleteMultipartUpload(ctx, s.cfg.Bucket, key, uploadID, parts, po)
		if err == nil {
			etag = objstore.NormalizeETag(info.ETag)
			if maybeDone {
				return s.confirmComplete(ctx, key, parts)
			}
			return nil
		}
		e := s.classify(err, "complete multipart upload", key)
		var oe *opError
		if errors.As(e, &oe) {
			if oe.code == "NoSuchUpload" {
				if maybeDone {
					return &opError{sentinel: objstore.ErrUnavailable, msg: oe.msg + ": the upload is gone after an attempt whose outcome is unknown", noRetry: true}
				}
				return &opError{sentinel: objstore.ErrConflict, msg: oe.msg + ": the upload was aborted by someone else", certain: true, noRetry: true}
			}
			if !oe.certain {
				maybeDone = true
			}
		}
		return asPrecondition(e, cond)
	})
	return etag, err
}

// completeRate is the slowest assembly of parts a CompleteMultipartUpload
// is given time for: the Versity gateway took over 10 s, silent, to answer
// the Complete of a 1 GiB object on an idle 2-core machine.
const completeRate = 20 << 20 // bytes per second

// completeIdle is the idle timeout of a Complete of size bytes:
// Config.IdleTimeout plus a second per completeRate bytes.
func (s *Store) completeIdle(size int64) time.Duration {
	return s.cfg.IdleTimeout + time.Duration(size/completeRate)*time.Second
}

// confirmComplete checks that key holds the upload made of parts, after a
// repeated Complete was acknowledged.
func (s *Store) confirmComplete(ctx context.Context, key string, parts []minio.CompletePart) error {
	etags := make([]string, len(parts))
	for i, p := range parts {
		etags[i] = p.ETag
	}
	want, err := objstore.MultipartETag(etags)
	if err != nil {
		return &opError{sentinel: objstore.ErrUnavailable, noRetry: true,
			msg: fmt.Sprintf("s3 complete %s/%s: a repeated Complete was acknowledged and cannot be confirmed (%v)", s.cfg.Bucket, key, err)}
	}
	info, err := s.stat(ctx, key, "")
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &opError{sentinel: objstore.ErrUnavailable, noRetry: true,
			msg: fmt.Sprintf("s3 complete %s/%s: a repeated Complete was acknowledged, and the key cannot be read to confirm it: %v", s.cfg.Bucket, key, err)}
	}
	if info.ETag != want {
		return &opError{sentinel: objstore.ErrUnavailable, noRetry: true,
			msg: fmt.Sprintf("s3 complete %s/%s: a repeated Complete was acknowledged, but the key holds %s, not the upload (%s)", s.cfg.Bucket, key, info.ETag, want)}
	}
	return nil
}
