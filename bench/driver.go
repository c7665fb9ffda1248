package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"
)

// driver performs the benchmark's operations on one target. Names are
// slash-separated paths relative to the bucket root, which are also the
// object keys every target stores them at. Methods are not safe for
// concurrent use; the workloads are serial.
type driver interface {
	// WriteLarge creates name with the content of src, from open to a
	// successful close, and returns the time spent in close(2) (-1 when
	// there is no separate close).
	WriteLarge(ctx context.Context, name string, src *largeSource) (time.Duration, error)
	// ReadLarge reads name to its end and returns the number of bytes read.
	ReadLarge(ctx context.Context, name string) (int64, error)
	// Mkdir makes a directory (a no-op for the raw client: prefixes).
	Mkdir(ctx context.Context, name string) error
	// WriteSmall creates name with data: create, write, close.
	WriteSmall(ctx context.Context, name string, data []byte) error
	// Stat looks name up and returns its size.
	Stat(ctx context.Context, name string) (int64, error)
	// List lists directory name and returns the number of entries.
	List(ctx context.Context, name string) (int, error)
	// ReadSmall reads the whole of name.
	ReadSmall(ctx context.Context, name string) ([]byte, error)
	// Remove unlinks name.
	Remove(ctx context.Context, name string) error
	// Rename renames file from to to.
	Rename(ctx context.Context, from, to string) error
	// RenameDir renames directory from, holding n files, to to.
	RenameDir(ctx context.Context, from, to string, n int) error
	// Uncache drops the kernel's page cache of name, so that the next read
	// goes to the filesystem (a no-op for the raw client). Caches of the
	// filesystem process itself are kept: they are part of what is measured.
	Uncache(ctx context.Context, name string) error
}

// fsDriver runs the operations as system calls on a kernel mount.
type fsDriver struct {
	root  string
	chunk int // bytes per write(2) and read(2) on large files
}

var _ driver = (*fsDriver)(nil)

func (d *fsDriver) path(name string) string { return filepath.Join(d.root, filepath.FromSlash(name)) }

// WriteLarge implements driver: chunk-sized write(2) calls, then close(2),
// whose error counts.
func (d *fsDriver) WriteLarge(ctx context.Context, name string, src *largeSource) (time.Duration, error) {
	f, err := os.OpenFile(d.path(name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	for off := int64(0); off < src.size; off += int64(d.chunk) {
		if err := ctx.Err(); err != nil {
			f.Close()
			return 0, err
		}
		n := min(int64(d.chunk), src.size-off)
		if _, err := f.Write(src.chunk(off, n)); err != nil {
			f.Close()
			return 0, err
		}
	}
	t0 := time.Now()
	err = f.Close()
	return time.Since(t0), err
}

// ReadLarge implements driver with chunk-sized read(2) calls.
func (d *fsDriver) ReadLarge(ctx context.Context, name string) (int64, error) {
	f, err := os.Open(d.path(name))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return readAll(ctx, f, d.chunk)
}

// readAll reads r to EOF with a chunk-sized buffer (not io.Copy: io.Discard
// would read with 8 KiB buffers) and returns the byte count.
func readAll(ctx context.Context, r io.Reader, chunk int) (int64, error) {
	buf := make([]byte, chunk)
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := r.Read(buf)
		total += int64(n)
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// Mkdir implements driver.
func (d *fsDriver) Mkdir(_ context.Context, name string) error { return os.Mkdir(d.path(name), 0o755) }

// WriteSmall implements driver: open(O_CREAT|O_TRUNC), one write(2), close(2).
func (d *fsDriver) WriteSmall(_ context.Context, name string, data []byte) error {
	f, err := os.OpenFile(d.path(name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Stat implements driver with lstat(2).
func (d *fsDriver) Stat(_ context.Context, name string) (int64, error) {
	fi, err := os.Lstat(d.path(name))
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// List implements driver with open + getdents (no stat of the entries).
func (d *fsDriver) List(_ context.Context, name string) (int, error) {
	ents, err := os.ReadDir(d.path(name))
	return len(ents), err
}

// ReadSmall implements driver: open, read to EOF, close.
func (d *fsDriver) ReadSmall(_ context.Context, name string) ([]byte, error) {
	return os.ReadFile(d.path(name))
}

// Remove implements driver with unlink(2).
func (d *fsDriver) Remove(_ context.Context, name string) error {
	return pathErr("unlink", name, syscall.Unlink(d.path(name)))
}

// Rename implements driver with rename(2).
func (d *fsDriver) Rename(_ context.Context, from, to string) error {
	return pathErr("rename", from, syscall.Rename(d.path(from), d.path(to)))
}

// RenameDir implements driver with one rename(2).
func (d *fsDriver) RenameDir(ctx context.Context, from, to string, _ int) error {
	return d.Rename(ctx, from, to)
}

// Uncache implements driver with posix_fadvise(POSIX_FADV_DONTNEED).
func (d *fsDriver) Uncache(_ context.Context, name string) error {
	f, err := os.Open(d.path(name))
	if err != nil {
		return err
	}
	defer f.Close()
	return pathErr("fadvise", name, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
}

func pathErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	return &os.PathError{Op: op, Path: name, Err: err}
}

// s3Driver runs the operations with the minio-go client directly: the raw
// client, an upper bound for what a filesystem over S3 can do.
type s3Driver struct {
	env    *benchEnv
	bucket string
}

var _ driver = (*s3Driver)(nil)

// WriteLarge implements driver: PutObject from the source file (an
// io.ReaderAt, so minio-go uploads parts in parallel), with signed
// (streaming SigV4) payloads as minio-go does over plain HTTP.
func (d *s3Driver) WriteLarge(ctx context.Context, name string, src *largeSource) (time.Duration, error) {
	f, err := os.Open(src.path)
	if err != nil {
		return -1, err
	}
	defer f.Close()
	_, err = d.env.client.PutObject(ctx, d.bucket, name, f, src.size, minio.PutObjectOptions{
		PartSize:   uint64(d.env.cfg.PartSize),
		NumThreads: uint(d.env.cfg.RawThreads),
	})
	return -1, err
}

// ReadLarge implements driver: one GetObject streamed to the end.
func (d *s3Driver) ReadLarge(ctx context.Context, name string) (int64, error) {
	obj, err := d.env.client.GetObject(ctx, d.bucket, name, minio.GetObjectOptions{})
	if err != nil {
		return 0, err
	}
	defer obj.Close()
	return readAll(ctx, obj, d.env.cfg.WriteChunk)
}

// Mkdir implements driver: a no-op, prefixes need no object.
func (d *s3Driver) Mkdir(context.Context, string) error { return nil }

// WriteSmall implements driver: one signed PutObject.
func (d *s3Driver) WriteSmall(ctx context.Context, name string, data []byte) error {
	_, err := d.env.client.PutObject(ctx, d.bucket, name, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{})
	return err
}

// Stat implements driver: HeadObject.
func (d *s3Driver) Stat(ctx context.Context, name string) (int64, error) {
	info, err := d.env.client.StatObject(ctx, d.bucket, name, minio.StatObjectOptions{})
	return info.Size, err
}

// List implements driver: ListObjectsV2 with delimiter "/".
func (d *s3Driver) List(ctx context.Context, name string) (int, error) {
	n := 0
	for obj := range d.env.client.ListObjects(ctx, d.bucket, minio.ListObjectsOptions{Prefix: name + "/"}) {
		if obj.Err != nil {
			return n, obj.Err
		}
		n++
	}
	return n, nil
}

// ReadSmall implements driver: GetObject read to the end.
func (d *s3Driver) ReadSmall(ctx context.Context, name string) ([]byte, error) {
	obj, err := d.env.client.GetObject(ctx, d.bucket, name, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	return io.ReadAll(obj)
}

// Remove implements driver: DeleteObject.
func (d *s3Driver) Remove(ctx context.Context, name string) error {
	return d.env.client.RemoveObject(ctx, d.bucket, name, minio.RemoveObjectOptions{})
}

// Rename implements driver: server-side CopyObject, then DeleteObject of
// the source (what every S3 filesystem does).
func (d *s3Driver) Rename(ctx context.Context, from, to string) error {
	_, err := d.env.client.CopyObject(ctx,
		minio.CopyDestOptions{Bucket: d.bucket, Object: to},
		minio.CopySrcOptions{Bucket: d.bucket, Object: from})
	if err != nil {
		return err
	}
	return d.Remove(ctx, from)
}

// RenameDir implements driver: list the prefix, then copy and delete every
// object serially.
func (d *s3Driver) RenameDir(ctx context.Context, from, to string, n int) error {
	var keys []string
	for obj := range d.env.client.ListObjects(ctx, d.bucket, minio.ListObjectsOptions{Prefix: from + "/", Recursive: true}) {
		if obj.Err != nil {
			return obj.Err
		}
		keys = append(keys, obj.Key)
	}
	if len(keys) != n {
		return fmt.Errorf("listed %d objects under %s/, want %d", len(keys), from, n)
	}
	for _, k := range keys {
		if err := d.Rename(ctx, k, path.Join(to, k[len(from)+1:])); err != nil {
			return err
		}
	}
	return nil
}

// Uncache implements driver: nothing to drop.
func (d *s3Driver) Uncache(context.Context, string) error { return nil }
