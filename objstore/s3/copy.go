package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/fencefs/fencefs/internal/spool"
	"github.com/fencefs/fencefs/objstore"
	"github.com/minio/minio-go/v7"
)

// spoolInMemory is the largest plain-copy source kept in memory; larger
// ones are spooled to a temporary file in Config.SpoolDir.
const spoolInMemory = 32 << 20

// Copy implements objstore.Store without CopyObject (whose destination
// conditions MinIO and the Versity gateway ignore):
//
//   - multipart-shaped (ShapeMultipart, or ShapeAuto above the threshold):
//     UploadPartCopy of each part with x-amz-copy-source-if-match: srcETag,
//     then CompleteMultipartUpload carrying opts.Cond; server-side;
//   - plain-shaped (ShapePlain, or ShapeAuto up to the threshold): a GET
//     pinned to srcETag, then a PutObject carrying opts.Cond; the bytes pass
//     through this process. ShapePlain is limited to 5 GiB.
//
// The source's size, metadata and content type are read by a HEAD pinned
// to srcETag (metadata used when opts.Meta is nil, content type when
// opts.ContentType is empty), unless opts.Source gives them.
// Errors: ErrNotFound (src missing), ErrPrecondition (src is not srcETag,
// also if it changes during the copy, or opts.Cond fails on dst).
func (s *Store) Copy(ctx context.Context, src, srcETag, dst string, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := validateWrite(dst, opts); err != nil {
		return objstore.ObjectInfo{}, err
	}
	if err := objstore.ValidateKey(src); err != nil {
		return objstore.ObjectInfo{}, err
	}
	srcETag = objstore.NormalizeETag(srcETag)
	if srcETag == "" {
		return objstore.ObjectInfo{}, fmt.Errorf("copy %q: empty source ETag: %w", src, objstore.ErrInvalid)
	}
	headed := opts.Source == nil || objstore.NormalizeETag(opts.Source.ETag) != srcETag // copySource sends a pinned HEAD
	si, err := s.copySource(ctx, src, srcETag, opts.Source)
	if err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("copy source: %w", err)
	}
	meta, ct := opts.Meta, opts.ContentType
	if meta == nil {
		meta = si.Meta
	}
	if ct == "" {
		ct = si.ContentType
	}
	layout, err := s.sizing.Layout(si.Size, opts.Shape, opts.Parts)
	if err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("copy %q: %w", src, err)
	}
	wopts := objstore.PutOptions{Cond: opts.Cond, Meta: meta, ContentType: ct, Shape: objstore.ShapePlain}
	var etag string
	switch {
	case layout == nil && si.Size == 0 && (headed || (dst == src && objstore.NormalizeETag(opts.Cond.IfMatch) == srcETag)):
		// Empty, as a HEAD pinned to srcETag just showed, or a self-copy
		// whose condition fails unless the source is still srcETag:
		// nothing to read (a directory marker's or an empty file's
		// metadata change costs no GET).
		etag, err = s.putPlain(ctx, dst, bytes.NewReader(nil), 0, wopts)
	case layout == nil:
		etag, err = s.copyPlain(ctx, src, srcETag, si.Size, dst, wopts)
	default:
		etag, err = s.putMultipart(ctx, dst, layout, wopts, func(ctx context.Context, uploadID string, part int, off, n int64) (minio.CompletePart, error) {
			return s.copyPart(ctx, src, srcETag, dst, uploadID, part, off, n)
		})
	}
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	return s.written(dst, si.Size, etag, meta, ct), nil
}

// copySource returns the source version's info: known, when the caller's
// is of srcETag, else read by a HEAD pinned to srcETag.
func (s *Store) copySource(ctx context.Context, src, srcETag string, known *objstore.ObjectInfo) (objstore.ObjectInfo, error) {
	if known != nil && objstore.NormalizeETag(known.ETag) == srcETag {
		return *known, nil
	}
	return s.stat(ctx, src, srcETag)
}

// copyPart copies [off, off+n) of src version srcETag as one part. An
// empty part (an empty source) is uploaded, as UploadPartCopy cannot copy
// an empty range; the HEAD pinned to srcETag proved the source empty.
func (s *Store) copyPart(ctx context.Context, src, srcETag, dst, uploadID string, part int, off, n int64) (minio.CompletePart, error) {
	if n == 0 {
		return s.uploadPart(ctx, dst, uploadID, part, io.NewSectionReader(bytes.NewReader(nil), 0, 0), 0)
	}
	var cp minio.CompletePart
	err := s.call(ctx, "upload_part_copy", true, func(ctx context.Context) error {
		p, err := s.core.CopyObjectPart(ctx, s.cfg.Bucket, src, s.cfg.Bucket, dst, uploadID, part, off, n,
			map[string]string{"x-amz-copy-source-if-match": `"` + srcETag + `"`})
		if err != nil {
			e := s.classify(err, "upload part copy from "+src+" to", dst)
			var oe *opError
			if errors.As(e, &oe) && oe.code == "NoSuchUpload" {
				return &opError{sentinel: objstore.ErrConflict, msg: oe.msg + ": the upload was aborted by someone else", certain: true, noRetry: true}
			}
			return e
		}
		cp = minio.CompletePart{PartNumber: part, ETag: objstore.NormalizeETag(p.ETag)}
		return nil
	})
	return cp, err
}

// copyPlain reads src pinned to srcETag into a spool and writes it to dst
// with one conditional PutObject.
func (s *Store) copyPlain(ctx context.Context, src, srcETag string, size int64, dst string, opts objstore.PutOptions) (string, error) {
	rc, info, err := s.Get(ctx, src, objstore.GetOptions{IfMatch: srcETag})
	if err != nil {
		return "", fmt.Errorf("copy source: %w", err)
	}
	defer rc.Close()
	if info.Size != size {
		return "", fmt.Errorf("copy %q: source size changed: %w", src, objstore.ErrPrecondition)
	}
	body, err := spool.Read(rc, size, spoolInMemory, s.cfg.SpoolDir)
	var fe *spool.FileError
	switch {
	case errors.As(err, &fe):
		return "", fmt.Errorf("copy %q: %w", src, err)
	case errors.Is(err, spool.ErrSize):
		return "", s.readErr(fmt.Errorf("%v: %w", err, io.ErrUnexpectedEOF), src)
	case err != nil:
		return "", s.readErr(err, src)
	}
	defer body.Close()
	return s.putPlain(ctx, dst, body, size, opts)
}

func (s *Store) readErr(err error, key string) error {
	if errors.Is(err, objstore.ErrPrecondition) || errors.Is(err, objstore.ErrUnavailable) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("s3 get %s/%s: %v: %w", s.cfg.Bucket, key, err, objstore.ErrUnavailable)
}
