package spool_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencefs/fencefs/internal/spool"
)

func TestReadKeepsTheContentReadableAtAnyOffset(t *testing.T) {
	content := []byte(strings.Repeat("0123456789", 100))
	for _, tc := range []struct {
		name     string
		inMemory int64
		wantFile bool
	}{
		{"small content stays in memory", 1 << 20, false},
		{"large content goes to a file in the directory", 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "cache")
			b, err := spool.Read(bytes.NewReader(content), int64(len(content)), tc.inMemory, dir)
			if err != nil {
				t.Fatal(err)
			}
			files, _ := filepath.Glob(filepath.Join(dir, "fencefs-spool-*"))
			if got := len(files) == 1; got != tc.wantFile {
				t.Fatalf("spool files in %s: %v, want a file: %v", dir, files, tc.wantFile)
			}
			got := make([]byte, 10)
			if _, err := b.ReadAt(got, 500); err != nil || string(got) != "0123456789" {
				t.Fatalf("ReadAt(500) = %q, %v", got, err)
			}
			all, err := io.ReadAll(io.NewSectionReader(b, 0, int64(len(content))))
			if err != nil || !bytes.Equal(all, content) {
				t.Fatalf("content differs (%d bytes, %v)", len(all), err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if files, _ := filepath.Glob(filepath.Join(dir, "fencefs-spool-*")); len(files) != 0 {
				t.Fatalf("Close left %v", files)
			}
		})
	}
}

func TestReadRefusesContentOfAnotherSizeAndLeavesNoFile(t *testing.T) {
	for _, tc := range []struct {
		name     string
		content  string
		size     int64
		inMemory int64
	}{
		{"short, in memory", "abc", 5, 100},
		{"long, in memory", "abcdef", 5, 100},
		{"short, in a file", "abc", 5, 1},
		{"long, in a file", "abcdef", 5, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := spool.Read(strings.NewReader(tc.content), tc.size, tc.inMemory, dir)
			if !errors.Is(err, spool.ErrSize) {
				t.Fatalf("Read = %v, want ErrSize", err)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Fatalf("left %d files", len(left))
			}
		})
	}
}

func TestReadPassesTheStreamsErrorThroughAndNamesFileErrors(t *testing.T) {
	boom := errors.New("connection reset")
	dir := t.TempDir()
	_, err := spool.Read(io.MultiReader(strings.NewReader("ab"), errReader{boom}), 10, 1, dir)
	var fe *spool.FileError
	if !errors.Is(err, boom) || errors.As(err, &fe) {
		t.Fatalf("stream error: Read = %v, want %v unwrapped", err, boom)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("left %d files", len(left))
	}
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = spool.Read(strings.NewReader("abc"), 3, 1, notDir)
	if !errors.As(err, &fe) {
		t.Fatalf("unusable directory: Read = %v, want a *FileError", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
