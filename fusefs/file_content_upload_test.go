package fusefs

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"golang.org/x/sys/unix"
)

// The staging bound of these tests: two parts of 8 MiB. A file of
// boundedSize written front to back releases most of its parts.
const (
	boundedStaging = 16 << 20
	boundedSize    = 48<<20 + 4321
)

// stagingBytes reads the mount's staging_bytes control attribute.
func stagingBytes(t *testing.T, m *testMount) int64 {
	t.Helper()
	buf := make([]byte, 64)
	n, err := unix.Getxattr(m.Path(""), "user.fencefs.staging_bytes", buf)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(string(buf[:n]), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// writeInChunks writes data front to back in 1 MiB writes and returns the
// most staging the mount reported meanwhile.
func writeInChunks(t *testing.T, m *testMount, f *os.File, data []byte) int64 {
	t.Helper()
	var peak int64
	for off := 0; off < len(data); off += 1 << 20 {
		if _, err := f.Write(data[off:min(off+1<<20, len(data))]); err != nil {
			t.Fatalf("write at %d: %v", off, err)
		}
		peak = max(peak, stagingBytes(t, m))
	}
	return peak
}

// TestStreamedFileKeepsItsStagingBounded checks a file many times the
// staging bound written front to back on a real mount: it is stored whole
// while the mount never held more than the bound (and the write in
// progress), and each access the released parts no longer allow gets the
// documented answer (file_content_upload.go): a patch of the first part works, a
// write, truncate or read below the released parts is ESPIPE, a refused
// write keeps the previous version in the bucket and leaves no upload, a
// chmod while writing is stored with the content, a whole-file rewrite
// refused because an older epoch changed the file is published on the
// current version, fsync commits the whole file and writing on still stores
// everything.
func TestStreamedFileKeepsItsStagingBounded(t *testing.T) {
	k := newKTAlone(t, 10*time.Minute) // a hang guard: 242 s seen on a loaded machine
	m := k.mount(serveConfig{Token: 2, StreamStaging: boundedStaging})
	data := pattern(11, boundedSize)
	old := []byte("the previous version\n")

	cases := []streamedCase{
		{"a file many times the bound is stored whole", func(t *testing.T, f *os.File, path string) streamedResult {
			if peak := writeInChunks(t, m, f, data); peak > boundedStaging+(2<<20) {
				t.Errorf("the mount staged up to %d bytes of the file; the bound is %d", peak, boundedStaging)
			}
			return streamedResult{want: data}
		}},
		{"a patch of the first part after the rest was released is stored", func(t *testing.T, f *os.File, path string) streamedResult {
			writeInChunks(t, m, f, data)
			if _, err := f.WriteAt([]byte("HEADER"), 10); err != nil {
				t.Fatalf("patching the header: %v", err)
			}
			want := bytes.Clone(data)
			copy(want[10:], "HEADER")
			return streamedResult{want: want}
		}},
		{"a chmod while writing is stored with the content", func(t *testing.T, f *os.File, path string) streamedResult {
			writeInChunks(t, m, f, data)
			if err := f.Chmod(0o600); err != nil {
				t.Fatal(err)
			}
			return streamedResult{want: data, mode: 0o600}
		}},
		{"a rewrite refused because an older epoch changed the file is published on the current version", func(t *testing.T, f *os.File, path string) streamedResult {
			writeInChunks(t, m, f, data)
			k.putObject(t, strings.TrimPrefix(path, m.Path("")+"/"), []byte("an older epoch's last write"), map[string]string{fencing.MetaEpoch: "1"})
			return streamedResult{want: data}
		}},
		{"fsync commits the whole file and writing on stores everything", func(t *testing.T, f *os.File, path string) streamedResult {
			half := len(data) / 2
			writeInChunks(t, m, f, data[:half])
			if err := f.Sync(); err != nil {
				t.Fatalf("fsync: %v", err)
			}
			if got, err := k.getObject(strings.TrimPrefix(path, m.Path("")+"/")); err != nil || !bytes.Equal(got, data[:half]) {
				t.Fatalf("after fsync the bucket has %d bytes, %v; want the %d written", len(got), err, half)
			}
			writeInChunks(t, m, f, data[half:])
			return streamedResult{want: data}
		}},
	}
	for i, tc := range append(cases, seekBackCases(m, data)...) {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			tc.check(t, k, m, "s"+strconv.Itoa(i), old)
		})
	}
}

// streamedResult is what a streamedCase expects.
type streamedResult struct {
	want     []byte        // the object after close; nil: the old version
	closeErr syscall.Errno // what close reports
	mode     os.FileMode   // the stored mode; 0: 0644
}

// streamedCase is one way of writing a streamed file, given an open
// O_RDWR|O_TRUNC descriptor of an object holding old.
type streamedCase struct {
	name string
	run  func(t *testing.T, f *os.File, path string) streamedResult
}

// check runs c on key (created with old) and checks the close, the bucket
// (content, mode, no upload left) and a read back through the mount.
func (c streamedCase) check(t *testing.T, k *kt, m *testMount, key string, old []byte) {
	k.putObject(t, key, old, nil)
	f, err := os.OpenFile(m.Path(key), os.O_RDWR|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res := c.run(t, f, m.Path(key))
	if err := f.Close(); (res.closeErr == 0) != (err == nil) || err != nil && !errors.Is(err, res.closeErr) {
		t.Fatalf("close: %v; want errno %d", err, res.closeErr)
	}
	want := res.want
	if want == nil {
		want = old
	}
	got, err := k.getObject(key)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("S3 %s: %d bytes, %v; want %d bytes", key, len(got), err, len(want))
	}
	if res.mode != 0 {
		if mode := k.userMeta(t, key)[metaMode]; mode != modeString(syscall.S_IFREG|uint32(res.mode)) {
			t.Fatalf("mode %s, want %o", mode, res.mode)
		}
	}
	k.waitNoUploads(t, key)
	back, err := os.ReadFile(m.Path(key))
	if err != nil || !bytes.Equal(back, want) {
		t.Fatalf("read back through the mount: %d bytes, %v; want %d bytes", len(back), err, len(want))
	}
}

// seekBackCases are the accesses below the parts a streamed file released
// (file_content_upload.go's rules): refused, except a truncate to 0 and reads of
// what is still local.
func seekBackCases(m *testMount, data []byte) []streamedCase {
	return []streamedCase{
		{"a write below the released parts is ESPIPE and stores nothing", func(t *testing.T, f *os.File, path string) streamedResult {
			writeInChunks(t, m, f, data)
			if _, err := f.WriteAt([]byte("late"), 20<<20); !errors.Is(err, syscall.ESPIPE) {
				t.Fatalf("write into a released part: %v; want ESPIPE", err)
			}
			if _, err := f.Write([]byte("more")); !errors.Is(err, syscall.ESPIPE) {
				t.Fatalf("a write after the refused one: %v; want ESPIPE (the file's changes are lost)", err)
			}
			return streamedResult{closeErr: syscall.ESPIPE}
		}},
		{"a truncate below the released parts is ESPIPE and stores nothing", func(t *testing.T, f *os.File, path string) streamedResult {
			writeInChunks(t, m, f, data)
			if err := f.Truncate(30 << 20); !errors.Is(err, syscall.ESPIPE) {
				t.Fatalf("truncate into a released part: %v; want ESPIPE", err)
			}
			return streamedResult{closeErr: syscall.ESPIPE}
		}},
		{"a truncate to 0 makes the file whole again", func(t *testing.T, f *os.File, path string) streamedResult {
			writeInChunks(t, m, f, data)
			if err := f.Truncate(0); err != nil {
				t.Fatalf("truncate to 0: %v", err)
			}
			if _, err := f.WriteAt([]byte("again"), 0); err != nil {
				t.Fatal(err)
			}
			return streamedResult{want: []byte("again")}
		}},
		{"a read of a released part before close is ESPIPE, of the first part works", func(t *testing.T, f *os.File, path string) streamedResult {
			writeInChunks(t, m, f, data)
			buf := make([]byte, 4096)
			if _, err := f.ReadAt(buf, 12<<20); !errors.Is(err, syscall.ESPIPE) {
				t.Fatalf("read of a released part: %v; want ESPIPE", err)
			}
			if _, err := f.ReadAt(buf, 4096); err != nil || !bytes.Equal(buf, data[4096:8192]) {
				t.Fatalf("read of the first part: %v", err)
			}
			return streamedResult{want: data}
		}},
	}
}
