package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/minio/minio-go/v7"
)

// CreateUpload implements objstore.Store.
func (s *Store) CreateUpload(ctx context.Context, key string, opts objstore.PutOptions) (string, error) {
	opts.Cond = objstore.Condition{}
	if err := validateWrite(key, opts); err != nil {
		return "", err
	}
	return s.createUpload(ctx, key, opts)
}

// createUpload starts a multipart upload of key with opts' metadata,
// content type and tags (never a condition: the Complete carries it).
func (s *Store) createUpload(ctx context.Context, key string, opts objstore.PutOptions) (string, error) {
	po := putOptions(opts.Meta, opts.ContentType, objstore.Condition{})
	po.UserTags = opts.Tags
	var uploadID string
	err := s.call(ctx, "create_multipart", true, func(ctx context.Context) error {
		var err error
		uploadID, err = s.core.NewMultipartUpload(ctx, s.cfg.Bucket, key, po)
		return s.classify(err, "create multipart upload", key)
	})
	return uploadID, err
}

// UploadPart implements objstore.Store.
func (s *Store) UploadPart(ctx context.Context, key, uploadID string, number int, body io.ReaderAt, off, n int64) (objstore.Part, error) {
	if number < 1 || number > objstore.MaxParts {
		return objstore.Part{}, fmt.Errorf("%w: part number %d (1..%d)", objstore.ErrInvalid, number, objstore.MaxParts)
	}
	if n < 0 || n > objstore.MaxPartSize {
		return objstore.Part{}, fmt.Errorf("%w: part of %d bytes", objstore.ErrInvalid, n)
	}
	cp, err := s.uploadPart(ctx, key, uploadID, number, io.NewSectionReader(body, off, n), n)
	if err != nil {
		if oe := (*opError)(nil); errors.As(err, &oe) && oe.code == "NoSuchUpload" {
			return objstore.Part{}, fmt.Errorf("%w: upload part %d of %s: the upload is gone (%v)", objstore.ErrConflict, number, key, err)
		}
		return objstore.Part{}, err
	}
	return objstore.Part{Number: number, Size: n, ETag: cp.ETag}, nil
}

// CompleteUpload implements objstore.Store. Retries follow complete: a
// repeated Complete after an attempt with an unknown outcome is confirmed
// with a HEAD.
func (s *Store) CompleteUpload(ctx context.Context, key, uploadID string, parts []objstore.Part, cond objstore.Condition) (objstore.ObjectInfo, error) {
	if err := objstore.ValidateCond(cond); err != nil {
		return objstore.ObjectInfo{}, err
	}
	if len(parts) == 0 {
		return objstore.ObjectInfo{}, fmt.Errorf("%w: complete %s with no parts", objstore.ErrInvalid, key)
	}
	cps := make([]minio.CompletePart, len(parts))
	var size int64
	for i, p := range parts {
		if i > 0 && p.Number <= parts[i-1].Number {
			return objstore.ObjectInfo{}, fmt.Errorf("%w: complete %s: part numbers not ascending", objstore.ErrInvalid, key)
		}
		cps[i] = minio.CompletePart{PartNumber: p.Number, ETag: p.ETag}
		size += p.Size
	}
	etag, err := s.complete(ctx, key, uploadID, cps, size, cond)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	return objstore.ObjectInfo{Key: key, Size: size, ETag: etag, LastModified: time.Now().UTC().Truncate(time.Second)}, nil
}
