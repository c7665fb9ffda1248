package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/minio/minio-go/v7"
)

// Stat implements objstore.Store with a HEAD request.
func (s *Store) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	return s.stat(ctx, key, "")
}

// stat is Stat, failing with ErrPrecondition unless the ETag is ifMatch
// (when set).
func (s *Store) stat(ctx context.Context, key, ifMatch string) (objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.ObjectInfo{}, err
	}
	var info objstore.ObjectInfo
	err := s.call(ctx, "head", false, func(ctx context.Context) error {
		opts := minio.StatObjectOptions{}
		if ifMatch != "" {
			_ = opts.SetMatchETag(objstore.NormalizeETag(ifMatch))
		}
		oi, err := s.core.StatObject(ctx, s.cfg.Bucket, key, opts)
		if err != nil {
			return s.classify(err, "head", key)
		}
		info = infoFromHeader(key, oi.Metadata)
		info.Size = oi.Size
		info.ETag = objstore.NormalizeETag(oi.ETag)
		info.LastModified = oi.LastModified
		if info.ContentType == "" {
			info.ContentType = oi.ContentType
		}
		return nil
	})
	return info, err
}

// infoFromHeader builds an ObjectInfo from a HEAD or GET response.
func infoFromHeader(key string, h http.Header) objstore.ObjectInfo {
	info := objstore.ObjectInfo{
		Key:         key,
		ETag:        objstore.NormalizeETag(h.Get("ETag")),
		ContentType: h.Get("Content-Type"),
		Meta:        map[string]string{},
	}
	info.Size, _ = strconv.ParseInt(h.Get("Content-Length"), 10, 64)
	if cr := h.Get("Content-Range"); cr != "" {
		// "bytes a-b/total"
		if i := strings.LastIndexByte(cr, '/'); i >= 0 {
			if n, err := strconv.ParseInt(cr[i+1:], 10, 64); err == nil {
				info.Size = n
			}
		}
	}
	if t, err := http.ParseTime(h.Get("Last-Modified")); err == nil {
		info.LastModified = t.UTC()
	}
	for k, v := range h {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "x-amz-meta-") && len(v) > 0 {
			info.Meta[lk[len("x-amz-meta-"):]] = v[0]
		}
	}
	return info
}

func parseISOTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	return t.UTC(), err
}

// Get implements objstore.Store. Length <= 0 reads to the end; an Offset
// at or past the end gives an empty body. The returned reader is bound to
// ctx. If its body breaks, it resumes with a ranged GET pinned to the ETag
// of the first response (at most MaxRetries times, or 4 when it sets no cap); if the object changed
// meanwhile, Read fails with ErrPrecondition rather than mixing versions.
func (s *Store) Get(ctx context.Context, key string, opts objstore.GetOptions) (io.ReadCloser, objstore.ObjectInfo, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	if opts.Offset < 0 {
		return nil, objstore.ObjectInfo{}, fmt.Errorf("get %q: negative offset: %w", key, objstore.ErrInvalid)
	}
	end := int64(-1) // exclusive end, -1: to the end
	if opts.Length > 0 {
		end = opts.Offset + opts.Length
	}
	body, info, err := s.getRange(ctx, key, opts.Offset, end, objstore.NormalizeETag(opts.IfMatch), objstore.NormalizeETag(opts.IfNoneMatch))
	if errors.Is(err, errRangeNotSatisfiable) {
		// Offset at or past the end: S3 answers 416. Check the version
		// with a HEAD and return an empty body.
		st, err := s.stat(ctx, key, opts.IfMatch)
		if err != nil {
			return nil, objstore.ObjectInfo{}, err
		}
		if opts.IfNoneMatch != "" && objstore.NormalizeETag(opts.IfNoneMatch) == st.ETag {
			return nil, objstore.ObjectInfo{}, fmt.Errorf("get %q: %w", key, objstore.ErrNotModified)
		}
		if opts.Offset < st.Size {
			// The object grew between the GET and the HEAD: retry once.
			return s.Get(ctx, key, objstore.GetOptions{Offset: opts.Offset, Length: opts.Length, IfMatch: st.ETag})
		}
		return io.NopCloser(strings.NewReader("")), st, nil
	}
	if err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	if end < 0 || end > info.Size {
		end = info.Size
	}
	return &pinnedReader{s: s, ctx: ctx, key: key, etag: info.ETag, off: opts.Offset, end: end, body: body}, info, nil
}

var errRangeNotSatisfiable = errors.New("range not satisfiable")

// maxResumes caps the resumes of one read's broken bodies when
// Config.MaxRetries sets no cap.
const maxResumes = 3

// getRange sends one GET of [off, end) (end < 0: to the end).
func (s *Store) getRange(ctx context.Context, key string, off, end int64, ifMatch, ifNoneMatch string) (io.ReadCloser, objstore.ObjectInfo, error) {
	var body io.ReadCloser
	var info objstore.ObjectInfo
	err := s.call(ctx, "get", false, func(ctx context.Context) error {
		o := minio.GetObjectOptions{}
		switch {
		case end >= 0:
			o.Set("Range", fmt.Sprintf("bytes=%d-%d", off, end-1))
		case off > 0:
			o.Set("Range", fmt.Sprintf("bytes=%d-", off))
		}
		if ifMatch != "" {
			_ = o.SetMatchETag(ifMatch)
		}
		if ifNoneMatch != "" {
			_ = o.SetMatchETagExcept(ifNoneMatch)
		}
		rc, _, h, err := s.core.GetObject(ctx, s.cfg.Bucket, key, o)
		if err != nil {
			var er minio.ErrorResponse
			if errors.As(err, &er) && (er.Code == "InvalidRange" || er.StatusCode == http.StatusRequestedRangeNotSatisfiable) {
				return errRangeNotSatisfiable
			}
			return s.classify(err, "get", key)
		}
		if off > 0 && h.Get("Content-Range") == "" {
			// A server that ignored the Range header sent everything.
			if _, err := io.CopyN(io.Discard, rc, off); err != nil {
				rc.Close()
				return s.classify(err, "get", key)
			}
		}
		body, info = rc, infoFromHeader(key, h)
		return nil
	})
	return body, info, err
}

// pinnedReader reads [off, end) of one version (etag) of key, resuming
// broken bodies with GETs pinned to etag.
type pinnedReader struct {
	s         *Store
	ctx       context.Context
	key, etag string
	off, end  int64 // next offset to read; exclusive end
	body      io.ReadCloser
	resumes   int
	err       error // sticky
}

func (r *pinnedReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	for {
		if r.off >= r.end {
			return 0, io.EOF
		}
		if r.body == nil {
			if err := r.resume(); err != nil {
				r.err = err
				return 0, err
			}
		}
		if rem := r.end - r.off; int64(len(p)) > rem {
			p = p[:rem]
		}
		n, err := r.body.Read(p)
		r.off += int64(n)
		r.s.m.down(int64(n))
		if err == nil || n > 0 && err == io.EOF && r.off >= r.end {
			return n, nil
		}
		if err == io.EOF && r.off >= r.end {
			return n, io.EOF
		}
		// A broken or short body. One that stalled (the idle timeout)
		// tells the breaker the storage is down, so the resume fails fast.
		r.body.Close()
		r.body = nil
		var oe *opError
		if err != io.EOF && errors.As(r.s.classify(err, "get", r.key), &oe) && !oe.answered && oe.sentinel == objstore.ErrUnavailable && r.ctx.Err() == nil {
			r.s.brk.failed(oe, oe.down)
		}
		if cerr := r.ctx.Err(); cerr != nil {
			r.err = cerr
			return n, cerr
		}
		r.s.log.Debug("s3: resuming a broken GET body", "key", r.key, "offset", r.off, "err", err)
		if n > 0 {
			return n, nil
		}
	}
}

func (r *pinnedReader) resume() error {
	limit := r.s.maxRetries
	if limit < 0 {
		limit = maxResumes
	}
	if r.resumes >= limit+1 {
		return fmt.Errorf("s3 get %s/%s: body broke %d times: %w", r.s.cfg.Bucket, r.key, r.resumes, objstore.ErrUnavailable)
	}
	r.resumes++
	body, _, err := r.s.getRange(r.ctx, r.key, r.off, r.end, r.etag, "")
	if errors.Is(err, objstore.ErrPrecondition) || errors.Is(err, objstore.ErrNotFound) || errors.Is(err, errRangeNotSatisfiable) {
		return fmt.Errorf("s3 get %s/%s: the object changed while it was read (was %s): %w", r.s.cfg.Bucket, r.key, r.etag, objstore.ErrPrecondition)
	}
	if err != nil {
		return err
	}
	r.body = body
	return nil
}

func (r *pinnedReader) Close() error {
	if r.body != nil {
		err := r.body.Close()
		r.body = nil
		return err
	}
	return nil
}
