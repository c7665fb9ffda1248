// Package spool keeps content read once from a stream so that it can be
// read again at any offset: in memory when small, else in a temporary file
// in a directory the caller names (fencefs: mount.cache_dir).
package spool

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrSize is wrapped by Read's error when the stream held fewer or more
// bytes than the caller said.
var ErrSize = errors.New("content size differs from the size expected")

// FileError is Read's error when the temporary file could not be created,
// written or read back (the disk, not the stream, failed).
type FileError struct{ Err error }

func (e *FileError) Error() string { return "spool file: " + e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }

// Body is spooled content: readable at any offset until Close, which frees
// the memory or removes the temporary file. It is safe for concurrent
// ReadAt calls.
type Body interface {
	io.ReaderAt
	io.Closer
}

// Read reads exactly size bytes from r. Content of at most inMemory bytes
// is kept in memory; larger content goes to a temporary file
// "fencefs-spool-*" in dir (created if missing, mode 0700; "" means
// os.TempDir()), removed by Body.Close or when Read fails.
//
// Errors: r's own error, unwrapped (callers classify storage errors
// themselves); an error wrapping ErrSize when r ends before size bytes or
// holds more; a *FileError when the temporary file fails.
func Read(r io.Reader, size, inMemory int64, dir string) (Body, error) {
	if size <= inMemory {
		b, err := io.ReadAll(io.LimitReader(r, size+1))
		if err != nil {
			return nil, err
		}
		if int64(len(b)) != size {
			return nil, fmt.Errorf("got %d bytes, want %d: %w", len(b), size, ErrSize)
		}
		return memBody{bytes.NewReader(b)}, nil
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, &FileError{err}
		}
	}
	f, err := os.CreateTemp(dir, "fencefs-spool-*")
	if err != nil {
		return nil, &FileError{err}
	}
	body := fileBody{f}
	n, err := io.Copy(writerOnly{f}, io.LimitReader(r, size+1))
	switch {
	case err != nil:
		body.Close()
		var we *writeError
		if errors.As(err, &we) {
			return nil, &FileError{we.err}
		}
		return nil, err
	case n != size:
		body.Close()
		return nil, fmt.Errorf("got %d bytes, want %d: %w", n, size, ErrSize)
	}
	return body, nil
}

type memBody struct{ *bytes.Reader }

func (memBody) Close() error { return nil }

type fileBody struct{ *os.File }

func (f fileBody) Close() error {
	err := f.File.Close()
	if rerr := os.Remove(f.Name()); err == nil {
		err = rerr
	}
	return err
}

// writerOnly marks the file's write errors, so that Read tells them from
// the stream's read errors (io.Copy returns either).
type writerOnly struct{ f *os.File }

type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }

func (w writerOnly) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		return n, &writeError{err}
	}
	return n, nil
}
