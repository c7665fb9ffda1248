package memstore

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"strconv"

	"github.com/fencefs/fencefs/objstore"
)

// pendingUpload is the content of an upload started with CreateUpload.
type pendingUpload struct {
	meta        map[string]string
	tags        map[string]string
	contentType string
	parts       map[int][]byte // by part number
}

// CreateUpload implements objstore.Store.
func (s *Store) CreateUpload(ctx context.Context, key string, opts objstore.PutOptions) (string, error) {
	ev := Event{Op: OpCreateUpload, Key: key}
	if err := s.before(ctx, ev); err != nil {
		return "", err
	}
	var id string
	ev.Err = func() error {
		opts.Cond = objstore.Condition{}
		if err := s.validateWrite(key, opts); err != nil {
			return err
		}
		ct := opts.ContentType
		if ct == "" {
			ct = "application/octet-stream"
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.nextID++
		id = "upload-" + strconv.Itoa(s.nextID)
		s.uploads[id] = objstore.Upload{Key: key, UploadID: id, Initiated: s.now()}
		s.pending[id] = &pendingUpload{meta: maps.Clone(opts.Meta), tags: maps.Clone(opts.Tags), contentType: ct, parts: map[int][]byte{}}
		return nil
	}()
	if err := s.after(ctx, ev); err != nil {
		return "", err
	}
	return id, nil
}

// UploadPart implements objstore.Store.
func (s *Store) UploadPart(ctx context.Context, key, uploadID string, number int, body io.ReaderAt, off, n int64) (objstore.Part, error) {
	ev := Event{Op: OpUploadPart, Key: key}
	if err := s.before(ctx, ev); err != nil {
		return objstore.Part{}, err
	}
	var part objstore.Part
	ev.Err = func() error {
		if number < 1 || number > objstore.MaxParts || n < 0 || n > objstore.MaxPartSize {
			return fmt.Errorf("%w: part %d of %d bytes", objstore.ErrInvalid, number, n)
		}
		data := make([]byte, n)
		if got, err := body.ReadAt(data, off); int64(got) < n {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("upload part %d of %q: reading body: %w", number, key, err)
		}
		sum := md5.Sum(data)
		s.mu.Lock()
		defer s.mu.Unlock()
		u, ok := s.pending[uploadID]
		if !ok || s.uploads[uploadID].Key != key {
			return fmt.Errorf("upload part %d of %q: no upload %q: %w", number, key, uploadID, objstore.ErrConflict)
		}
		u.parts[number] = data
		part = objstore.Part{Number: number, Size: n, ETag: hex.EncodeToString(sum[:])}
		return nil
	}()
	if err := s.after(ctx, ev); err != nil {
		return objstore.Part{}, err
	}
	return part, nil
}

// CompleteUpload implements objstore.Store. The condition is evaluated
// atomically with the publication (unless Options.IgnoreCompleteConditions);
// a refused one leaves the upload in place.
func (s *Store) CompleteUpload(ctx context.Context, key, uploadID string, parts []objstore.Part, cond objstore.Condition) (objstore.ObjectInfo, error) {
	ev := Event{Op: OpCompleteUpload, Key: key, Cond: cond}
	if err := s.before(ctx, ev); err != nil {
		return objstore.ObjectInfo{}, err
	}
	ev.Err = func() error {
		if err := objstore.ValidateCond(cond); err != nil {
			return err
		}
		if s.opts.IgnoreCompleteConditions {
			cond = objstore.Condition{}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		u, ok := s.pending[uploadID]
		if !ok || s.uploads[uploadID].Key != key {
			return fmt.Errorf("complete %q: no upload %q: %w", key, uploadID, objstore.ErrConflict)
		}
		if len(parts) == 0 {
			return fmt.Errorf("%w: complete %q with no parts", objstore.ErrInvalid, key)
		}
		var data []byte
		etags := make([]string, len(parts))
		for i, p := range parts {
			b, ok := u.parts[p.Number]
			sum := md5.Sum(b)
			switch {
			case !ok || hex.EncodeToString(sum[:]) != objstore.NormalizeETag(p.ETag):
				return fmt.Errorf("%w: complete %q: part %d is not the uploaded one", objstore.ErrInvalid, key, p.Number)
			case i > 0 && p.Number <= parts[i-1].Number:
				return fmt.Errorf("%w: complete %q: part numbers not ascending", objstore.ErrInvalid, key)
			case i < len(parts)-1 && int64(len(b)) < objstore.MinPartSize:
				return fmt.Errorf("%w: complete %q: part %d is smaller than %d bytes", objstore.ErrInvalid, key, p.Number, objstore.MinPartSize)
			}
			data = append(data, b...)
			etags[i] = p.ETag
		}
		etag, err := objstore.MultipartETag(etags)
		if err != nil {
			return err
		}
		if err := s.check(OpCompleteUpload, key, s.objects[key], cond); err != nil {
			return err
		}
		o := &object{data: data, etag: etag, meta: u.meta, tags: u.tags, contentType: u.contentType, modified: s.now()}
		s.objects[key] = o
		delete(s.pending, uploadID)
		delete(s.uploads, uploadID)
		info := o.info(key)
		info.Meta, info.ContentType = nil, ""
		ev.Info = info
		return nil
	}()
	if err := s.after(ctx, ev); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return ev.Info, nil
}

// DeleteMany implements objstore.Store: one OpDelete hook event per key.
func (s *Store) DeleteMany(ctx context.Context, keys []string) error {
	var errs []error
	for _, k := range keys {
		if err := s.Delete(ctx, k, objstore.Condition{}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
