package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"
)

// benchEnv is what every target run shares: the gateway, an S3 client for
// setup and durability checks, the large file's content, and what the
// legacy-program workloads share (legacy.go).
type benchEnv struct {
	cfg       config
	gw        *gateway.Gateway
	client    *minio.Client
	large     *largeSource
	srcBucket string // holds largeReadKey, copied into each target's bucket
	legacy    legacyEnv
}

// newBenchEnv prepares the shared state of the selected workloads: the large
// source file in the work directory and the bucket holding the object every
// target reads sequentially; what the legacy workloads share.
func newBenchEnv(ctx context.Context, cfg config, gw *gateway.Gateway) (*benchEnv, error) {
	e := &benchEnv{cfg: cfg, gw: gw, client: gw.Client(), srcBucket: "bench-source"}
	if cfg.selectedAny(legacyWorkloads) {
		if err := e.prepareLegacy(ctx); err != nil {
			e.close()
			return nil, err
		}
	}
	if !cfg.selectedAny([]string{mSeqRead, mSeqWrite}) {
		return e, nil
	}
	var err error
	if e.large, err = newLargeSource(filepath.Join(cfg.WorkDir, "large.bin"), cfg.LargeSize, cfg.WriteChunk); err != nil {
		return nil, err
	}
	if !cfg.selected(mSeqRead) {
		return e, nil
	}
	if err := gw.CreateBucket(ctx, e.srcBucket); err != nil {
		return nil, err
	}
	f, err := os.Open(e.large.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := e.client.PutObject(ctx, e.srcBucket, largeReadKey, f, e.large.size, minio.PutObjectOptions{
		PartSize: uint64(cfg.PartSize), NumThreads: uint(cfg.RawThreads),
	}); err != nil {
		return nil, fmt.Errorf("uploading the read source: %w", err)
	}
	return e, nil
}

// close removes the shared state from the gateway.
func (e *benchEnv) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if e.cfg.selected(mSeqRead) {
		e.deleteBucket(ctx, e.srcBucket)
	}
	if e.legacy.listingBucket != "" {
		e.deleteBucket(ctx, e.legacy.listingBucket)
	}
}

// settle writes back the dirty pages of the filesystem holding the work
// directory (the gateway's data, the caches), so that the write-back of one
// phase's data does not land in the next phase's measurement.
func (e *benchEnv) settle() {
	f, err := os.Open(e.cfg.WorkDir)
	if err != nil {
		return
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		slog.Warn("syncfs", "err", err)
	}
}

// largeSource is the content of the large file: a random pattern repeated
// (random so that nothing on the path can compress it), kept in memory for
// write(2) and in a local file for the raw client's PutObject.
type largeSource struct {
	size    int64
	pattern []byte // a multiple of the write chunk
	path    string
}

func newLargeSource(path string, size int64, chunk int) (*largeSource, error) {
	n := (8*mib + chunk - 1) / chunk * chunk
	s := &largeSource{size: size, pattern: make([]byte, n), path: path}
	if _, err := rand.Read(s.pattern); err != nil {
		return nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	for off := int64(0); off < size; off += int64(chunk) {
		if _, err := f.Write(s.chunk(off, min(int64(chunk), size-off))); err != nil {
			f.Close()
			return nil, err
		}
	}
	return s, f.Close()
}

// chunk returns the n bytes of content at off; off must be a multiple of the
// chunk size the source was made with, and n at most that chunk size.
func (s *largeSource) chunk(off, n int64) []byte {
	p := off % int64(len(s.pattern))
	return s.pattern[p : p+n]
}

// smallContent returns the deterministic content of small file i.
func smallContent(i, size int) []byte {
	b := make([]byte, size)
	var seed [32]byte
	copy(seed[:], fmt.Sprintf("fencefs-bench-%d", i))
	_, _ = mrand.NewChaCha8(seed).Read(b)
	return b
}

// deleteBucket removes a bucket and everything in it; failures are logged.
func (e *benchEnv) deleteBucket(ctx context.Context, bucket string) {
	objs := make(chan minio.ObjectInfo)
	go func() {
		defer close(objs)
		for o := range e.client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
			if o.Err != nil {
				slog.Warn("listing for cleanup", "bucket", bucket, "err", o.Err)
				return
			}
			objs <- o
		}
	}()
	for r := range e.client.RemoveObjects(ctx, bucket, objs, minio.RemoveObjectsOptions{}) {
		slog.Warn("cleanup: delete", "bucket", bucket, "key", r.ObjectName, "err", r.Err)
	}
	for u := range e.client.ListIncompleteUploads(ctx, bucket, "", true) {
		if u.Err == nil {
			_ = e.client.RemoveIncompleteUpload(ctx, bucket, u.Key)
		}
	}
	if err := e.client.RemoveBucket(ctx, bucket); err != nil {
		slog.Warn("cleanup: remove bucket", "bucket", bucket, "err", err)
	}
}
