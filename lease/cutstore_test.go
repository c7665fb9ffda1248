package lease_test

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/fencefs/fencefs/objstore"
)

// cutStore wraps a Store and fails every operation with ErrUnavailable
// while cut is set: one client's network partition, the other clients
// unaffected.
type cutStore struct {
	objstore.Store
	cut atomic.Bool
}

func (s *cutStore) fail(op string) error {
	if s.cut.Load() {
		return fmt.Errorf("%s: partitioned by the test: %w", op, objstore.ErrUnavailable)
	}
	return nil
}

func (s *cutStore) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := s.fail("stat"); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return s.Store.Stat(ctx, key)
}

func (s *cutStore) Get(ctx context.Context, key string, o objstore.GetOptions) (io.ReadCloser, objstore.ObjectInfo, error) {
	if err := s.fail("get"); err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	return s.Store.Get(ctx, key, o)
}

func (s *cutStore) Put(ctx context.Context, key string, body io.ReaderAt, size int64, o objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := s.fail("put"); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return s.Store.Put(ctx, key, body, size, o)
}

func (s *cutStore) Copy(ctx context.Context, src, srcETag, dst string, o objstore.PutOptions) (objstore.ObjectInfo, error) {
	if err := s.fail("copy"); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return s.Store.Copy(ctx, src, srcETag, dst, o)
}

func (s *cutStore) Delete(ctx context.Context, key string, c objstore.Condition) error {
	if err := s.fail("delete"); err != nil {
		return err
	}
	return s.Store.Delete(ctx, key, c)
}

func (s *cutStore) List(ctx context.Context, prefix, delim string, fn func(objstore.Entry) error) error {
	if err := s.fail("list"); err != nil {
		return err
	}
	return s.Store.List(ctx, prefix, delim, fn)
}

func (s *cutStore) ListUploads(ctx context.Context, prefix string, fn func(objstore.Upload) error) error {
	if err := s.fail("list-uploads"); err != nil {
		return err
	}
	return s.Store.ListUploads(ctx, prefix, fn)
}

func (s *cutStore) AbortUpload(ctx context.Context, key, id string) error {
	if err := s.fail("abort-upload"); err != nil {
		return err
	}
	return s.Store.AbortUpload(ctx, key, id)
}
