package fencing

import (
	"context"
	"io"

	"github.com/fencefs/fencefs/objstore"
)

const tombstoneSize = 96

func isTombstone(info objstore.ObjectInfo) bool {
	return info.Size == tombstoneSize && info.Meta["fencefs-tombstone"] == "1"
}

// Guard is the single door for mutations of the bucket.
type Guard struct {
	store objstore.Store
	cfg   Config
}

// New returns an unbound Guard.
func New(store objstore.Store, cfg Config) (*Guard, error) {
	return &Guard{store: store, cfg: cfg}, nil
}

// Bind binds token (0 = auto).
func (g *Guard) Bind(ctx context.Context, token uint64) (uint64, error) { return 0, ErrBadToken }

// Status returns a snapshot.
func (g *Guard) Status() Status { return Status{State: StateUnbound} }

// Prepare hints that key became dirty.
func (g *Guard) Prepare(key string) {}

// Put writes key.
func (g *Guard) Put(ctx context.Context, key string, body io.ReaderAt, size int64, base Version, meta Meta) (objstore.ObjectInfo, error) {
	return objstore.ObjectInfo{}, ErrReadOnly
}

// Copy copies src to dst.
func (g *Guard) Copy(ctx context.Context, src, srcETag, dst string, dstBase Version, meta Meta) (objstore.ObjectInfo, error) {
	return objstore.ObjectInfo{}, ErrReadOnly
}

// Delete deletes key.
func (g *Guard) Delete(ctx context.Context, key string, base Version) error { return ErrReadOnly }

// Close flushes.
func (g *Guard) Close(ctx context.Context) error { return nil }

// Refresh re-reads the register.
func (g *Guard) Refresh(ctx context.Context) error { return nil }
