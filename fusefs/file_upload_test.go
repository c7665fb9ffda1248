package fusefs

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// streamSize is above the default multipart threshold (16 MiB) with a tail:
// parts of 8 MiB are sent while writing, the tail at close.
const streamSize = 40<<20 + 12345

// uploadsOf lists the incomplete multipart uploads of key.
func (k *kt) uploadsOf(t testing.TB, key string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ids []string
	for u := range k.s3.ListIncompleteUploads(ctx, k.bucket, key, false) {
		if u.Err != nil {
			t.Fatalf("list uploads: %v", u.Err)
		}
		if u.Key == key {
			ids = append(ids, u.UploadID)
		}
	}
	return ids
}

// waitNoUploads waits (boundedly) until key has no incomplete upload: an
// abandoned stream is aborted in the background.
func (k *kt) waitNoUploads(t testing.TB, key string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ids := k.uploadsOf(t, key)
		if len(ids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("uploads of %s left behind: %v", key, ids)
		}
	}
}

// TestLargeSequentialWritesUploadWhileWriting checks streamed uploads on a
// real mount: the parts of a large sequential write are uploaded before
// close (an upload of the key is in progress while the file is still open
// and nothing is published yet), close publishes exactly the written
// content, and every way the stream can become unusable (a rewrite of a
// part already sent, a truncate below it, a chmod while writing, unlink)
// still stores the right content and mode and leaves no upload behind.
func TestLargeSequentialWritesUploadWhileWriting(t *testing.T) {
	k := newKT(t, 3*time.Minute)
	m := k.mount(serveConfig{Token: 1})
	data := pattern(7, streamSize)

	t.Run("parts are sent before close and close publishes them", func(t *testing.T) {
		f, err := os.Create(m.Path("big"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for off := 0; off < len(data); off += 1 << 20 {
			if _, err := f.Write(data[off:min(off+1<<20, len(data))]); err != nil {
				t.Fatal(err)
			}
		}
		for deadline := time.Now().Add(30 * time.Second); len(k.uploadsOf(t, "big")) == 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("no multipart upload of the file while it is open: its parts are not streamed")
			}
		}
		// (Whether the object exists before close is not checked: a
		// parallel test's fork+exec closes inherited descriptors, which
		// flushes — commits — this file early.)
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		got, err := k.getObject("big")
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("S3 big: %d bytes, %v; want the %d written", len(got), err, len(data))
		}
		info, err := k.statObject("big")
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := objstore.IsMultipartETag(info.ETag); !ok || n != 6 {
			t.Fatalf("ETag %s: want a 6-part upload (5 parts of 8 MiB sent while writing, the tail at close)", info.ETag)
		}
		meta := k.userMeta(t, "big")
		if _, ok := meta[metaMtime]; ok {
			t.Fatalf("a streamed object stores %s=%s; its time is its Last-Modified", metaMtime, meta[metaMtime])
		}
		if meta[metaMode] == "" {
			t.Fatalf("no mode in %v", meta)
		}
		k.waitNoUploads(t, "big")
		var st syscall.Stat_t
		if err := syscall.Stat(m.Path("big"), &st); err != nil || st.Size != streamSize {
			t.Fatalf("stat big: size %d, %v", st.Size, err)
		}
	})

	fallbacks := []struct {
		name   string
		change func(t *testing.T, f *os.File, path string) []byte // returns the expected content
		mode   os.FileMode
	}{
		{"a rewrite of a part already sent", func(t *testing.T, f *os.File, path string) []byte {
			if _, err := f.WriteAt([]byte("REWRITTEN"), 100); err != nil {
				t.Fatal(err)
			}
			want := bytes.Clone(data)
			copy(want[100:], "REWRITTEN")
			return want
		}, 0o644},
		{"a truncate below the parts sent", func(t *testing.T, f *os.File, path string) []byte {
			if err := f.Truncate(20 << 20); err != nil {
				t.Fatal(err)
			}
			return data[:20<<20]
		}, 0o644},
		{"a chmod while writing", func(t *testing.T, f *os.File, path string) []byte {
			if err := os.Chmod(path, 0o600); err != nil {
				t.Fatal(err)
			}
			return data
		}, 0o600},
	}
	for i, tc := range fallbacks {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			name := "fb" + string(rune('a'+i))
			f, err := os.OpenFile(m.Path(name), os.O_CREATE|os.O_RDWR, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.Write(data); err != nil {
				t.Fatal(err)
			}
			want := tc.change(t, f, m.Path(name))
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := k.getObject(name)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("S3 %s: %d bytes, %v; want the %d staged", name, len(got), err, len(want))
			}
			if mode := k.userMeta(t, name)[metaMode]; mode != modeString(syscall.S_IFREG|uint32(tc.mode)) {
				t.Fatalf("mode %s, want %o", mode, tc.mode)
			}
			k.waitNoUploads(t, name)
		})
	}

	t.Run("unlink while writing aborts the upload", func(t *testing.T) {
		f, err := os.Create(m.Path("gone"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(m.Path("gone")); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		// A parallel test's fork+exec may have flushed (committed) the
		// file before the unlink, whose delete is then stored by the
		// directory's fsync.
		syncDir(t, m.Path(""))
		if k.objectExists(t, "gone") {
			t.Fatal("an unlinked file was published")
		}
		k.waitNoUploads(t, "gone")
	})
}

func modeString(m uint32) string { return strconv.FormatUint(uint64(m), 10) }
