package fusefs

import (
	"bytes"
	"maps"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/fencing"
)

var testDefaults = attrDefaults{UID: 1000, GID: 1000, FileMode: 0o644, DirMode: 0o755}

func TestDecodeAttrReadsS3fsMetadata(t *testing.T) {
	lm := time.Unix(1600000000, 0)
	tests := []struct {
		name string
		kind uint32
		meta map[string]string
		want posixAttr
	}{
		{
			name: "plain object gets the mount defaults and LastModified",
			kind: kindFile,
			want: posixAttr{Mode: syscall.S_IFREG | 0o644, UID: 1000, GID: 1000, Mtime: lm, Ctime: lm, Atime: lm},
		},
		{
			name: "implicit directory gets the directory default",
			kind: kindDir,
			want: posixAttr{Mode: syscall.S_IFDIR | 0o755, UID: 1000, GID: 1000, Mtime: lm, Ctime: lm, Atime: lm},
		},
		{
			name: "s3fs file with mode, owner and times",
			kind: kindFile,
			meta: map[string]string{"mode": "33256", "uid": "0", "gid": "42", "mtime": "1700000000", "ctime": "1700000001", "atime": "1700000002"},
			want: posixAttr{Mode: syscall.S_IFREG | 0o750, UID: 0, GID: 42,
				Mtime: time.Unix(1700000000, 0), Ctime: time.Unix(1700000001, 0), Atime: time.Unix(1700000002, 0)},
		},
		{
			name: "s3fs nanosecond times",
			kind: kindFile,
			meta: map[string]string{"mtime": "1700000000.000000123"},
			want: posixAttr{Mode: syscall.S_IFREG | 0o644, UID: 1000, GID: 1000,
				Mtime: time.Unix(1700000000, 123), Ctime: time.Unix(1700000000, 123), Atime: time.Unix(1700000000, 123)},
		},
		{
			name: "rclone float mtime",
			kind: kindFile,
			meta: map[string]string{"mtime": "1700000000.5"},
			want: posixAttr{Mode: syscall.S_IFREG | 0o644, UID: 1000, GID: 1000,
				Mtime: time.Unix(1700000000, 5e8), Ctime: time.Unix(1700000000, 5e8), Atime: time.Unix(1700000000, 5e8)},
		},
		{
			name: "RFC 3339 mtime",
			kind: kindFile,
			meta: map[string]string{"mtime": "2023-11-14T22:13:20Z"},
			want: posixAttr{Mode: syscall.S_IFREG | 0o644, UID: 1000, GID: 1000,
				Mtime: time.Unix(1700000000, 0), Ctime: time.Unix(1700000000, 0), Atime: time.Unix(1700000000, 0)},
		},
		{
			name: "s3fs symlink mode",
			kind: kindSymlink,
			meta: map[string]string{"mode": "41471"},
			want: posixAttr{Mode: syscall.S_IFLNK | 0o777, UID: 1000, GID: 1000, Mtime: lm, Ctime: lm, Atime: lm},
		},
		{
			name: "garbage values fall back to the defaults",
			kind: kindFile,
			meta: map[string]string{"mode": "rwx", "uid": "-1", "gid": "x", "mtime": "yesterday"},
			want: posixAttr{Mode: syscall.S_IFREG | 0o644, UID: 1000, GID: 1000, Mtime: lm, Ctime: lm, Atime: lm},
		},
		{
			name: "s3fs xattrs",
			kind: kindFile,
			meta: map[string]string{"xattr": "%7B%22user.a%22%3A%22aGVsbG8%3D%22%7D"},
			want: posixAttr{Mode: syscall.S_IFREG | 0o644, UID: 1000, GID: 1000, Mtime: lm, Ctime: lm, Atime: lm,
				Xattrs: map[string][]byte{"user.a": []byte("hello")}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decodeAttr(tt.kind, tt.meta, lm, testDefaults)
			if !attrEqual(got, tt.want) {
				t.Fatalf("decodeAttr =\n  %+v\nwant\n  %+v", got, tt.want)
			}
		})
	}
}

func attrEqual(a, b posixAttr) bool {
	return a.Mode == b.Mode && a.UID == b.UID && a.GID == b.GID &&
		a.Mtime.Equal(b.Mtime) && a.Ctime.Equal(b.Ctime) && a.Atime.Equal(b.Atime) &&
		maps.EqualFunc(a.Xattrs, b.Xattrs, bytes.Equal)
}

func TestEncodeAttrWritesS3fsKeysAndRoundTrips(t *testing.T) {
	a := posixAttr{
		Mode: syscall.S_IFREG | 0o640, UID: 7, GID: 8,
		Mtime: time.Unix(1700000000, 123456789), Ctime: time.Unix(1700000001, 0), Atime: time.Unix(1700000002, 0),
		Xattrs: map[string][]byte{"user.comment": []byte("a,b:\"c\"\x00\xff"), "user.empty": {}},
	}
	base := map[string]string{
		"content-owner":    "keep me",
		fencing.MetaEpoch:  "3",
		fencing.MetaHolder: "h",
		fencing.MetaWID:    "w",
		"mode":             "1",
		"xattr":            "stale",
	}
	m := encodeAttr(a, base)
	wantKeys := map[string]string{"mode": "33184", "uid": "7", "gid": "8",
		"mtime": "1700000000.123456789", "ctime": "1700000001", "atime": "1700000002", "content-owner": "keep me"}
	for k, v := range wantKeys {
		if m[k] != v {
			t.Errorf("meta[%q] = %q, want %q", k, m[k], v)
		}
	}
	for _, k := range []string{fencing.MetaEpoch, fencing.MetaHolder, fencing.MetaWID} {
		if _, ok := m[k]; ok {
			t.Errorf("stamp key %q was passed on; the Guard writes it", k)
		}
	}
	if err := checkMetaSize(m); err != nil {
		t.Fatalf("encoded metadata does not validate: %v", err)
	}
	got := decodeAttr(kindFile, m, time.Time{}, testDefaults)
	if !attrEqual(got, a) {
		t.Fatalf("round trip =\n  %+v\nwant\n  %+v", got, a)
	}
	// Without xattrs the key disappears.
	a.Xattrs = nil
	if _, ok := encodeAttr(a, m)["xattr"]; ok {
		t.Fatal("xattr key kept after the last attribute was removed")
	}
}

func TestDecodeXattrsAcceptsS3fsForms(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want map[string][]byte
	}{
		{"url-encoded JSON", "%7B%22user.a%22%3A%22YQ%3D%3D%22%2C%22user.b%22%3A%22Yg%3D%3D%22%7D",
			map[string][]byte{"user.a": []byte("a"), "user.b": []byte("b")}},
		{"raw JSON", `{"user.a":"YQ=="}`, map[string][]byte{"user.a": []byte("a")}},
		{"empty object", "%7B%7D", map[string][]byte{}},
		{"unescaped quote in a name (s3fs does not escape)", `{"user.x"y":"YQ=="}`, map[string][]byte{`user.x"y`: []byte("a")}},
		{"unpadded base64", `{"user.a":"YQ"}`, map[string][]byte{"user.a": []byte("a")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeXattrs(tt.in)
			if err != nil {
				t.Fatalf("decodeXattrs(%q): %v", tt.in, err)
			}
			if !maps.EqualFunc(got, tt.want, bytes.Equal) {
				t.Fatalf("decodeXattrs(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	if _, err := decodeXattrs("not json"); err == nil {
		t.Fatal("decodeXattrs accepted garbage")
	}
}

func TestKindOfFollowsKeyAndMode(t *testing.T) {
	tests := []struct {
		key  string
		meta map[string]string
		want uint32
	}{
		{"a", nil, kindFile},
		{"a/", nil, kindDir},
		{"a", map[string]string{"mode": "41471"}, kindSymlink},
		{"a", map[string]string{"mode": "16877"}, kindDir},
		{"a", map[string]string{"mode": "33188"}, kindFile},
		{"a", map[string]string{"mode": "4480"}, syscall.S_IFIFO}, // FIFO written by s3fs
		{"a", map[string]string{"mode": strconv.Itoa(syscall.S_IFSOCK | 0o755)}, syscall.S_IFSOCK},
		{"a", map[string]string{"mode": strconv.Itoa(syscall.S_IFCHR | 0o600)}, syscall.S_IFCHR},
		{"a", map[string]string{"mode": strconv.Itoa(syscall.S_IFBLK | 0o600)}, syscall.S_IFBLK},
		{"a/", map[string]string{"mode": "4480"}, kindDir}, // a marker is a directory whatever its mode
	}
	for _, tt := range tests {
		if got := kindOf(tt.key, tt.meta); got != tt.want {
			t.Errorf("kindOf(%q, %v) = %o, want %o", tt.key, tt.meta, got, tt.want)
		}
	}
}

// TestDeviceNumbersRoundTripInRdev checks that a device node's number is
// stored in the "rdev" key and read back, and that other kinds store none.
func TestDeviceNumbersRoundTripInRdev(t *testing.T) {
	now := time.Unix(1700000000, 0)
	dev := posixAttr{Mode: syscall.S_IFCHR | 0o600, Rdev: 3106, Mtime: now, Ctime: now, Atime: now}
	meta := encodeAttr(dev, map[string]string{"rdev": "1"})
	if meta["rdev"] != "3106" {
		t.Fatalf("rdev stored as %q, want 3106", meta["rdev"])
	}
	if got := decodeAttr(syscall.S_IFCHR, meta, now, attrDefaults{}); got.Rdev != 3106 || got.Mode != dev.Mode {
		t.Fatalf("decoded mode %#o rdev %d, want %#o 3106", got.Mode, got.Rdev, dev.Mode)
	}
	fifo := posixAttr{Mode: syscall.S_IFIFO | 0o644, Mtime: now, Ctime: now, Atime: now}
	if m := encodeAttr(fifo, meta); m["rdev"] != "" {
		t.Fatalf("a FIFO stores rdev %q, want none", m["rdev"])
	}
}

func TestCheckMetaSizeRefusesXattrsThatDoNotFit(t *testing.T) {
	a := posixAttr{Mode: syscall.S_IFREG | 0o644, Xattrs: map[string][]byte{"user.big": bytes.Repeat([]byte("x"), 2048)}}
	if err := checkMetaSize(encodeAttr(a, nil)); toErrno(err) != syscall.E2BIG {
		t.Fatalf("checkMetaSize of a 2 KiB xattr = %v (%v), want E2BIG", err, toErrno(err))
	}
}

func TestParseTokenAcceptsNumbersAndAuto(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"5", 5, false},
		{" 17\n", 17, false},
		{"auto", 0, false},
		{"0", 0, true},
		{"-3", 0, true},
		{"seven", 0, true},
		{"", 0, true},
	}
	for _, tt := range tests {
		got, err := fencing.ParseToken(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseToken(%q) = %d, %v; want %d, err=%v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && toErrno(err) != syscall.EINVAL {
			t.Errorf("ParseToken(%q) error maps to %v, want EINVAL", tt.in, toErrno(err))
		}
	}
}

func TestGuessModeCallsOnlyObjectsLargerThanASymlinkRegular(t *testing.T) {
	// 0: a FIFO, socket or device node is an empty object.
	for size, want := range map[int64]uint32{0: 0, 1: 0, 4095: 0, 4096: syscall.S_IFREG, 1 << 30: syscall.S_IFREG} {
		if got := guessMode(size); got != want {
			t.Errorf("guessMode(%d) = %o, want %o", size, got, want)
		}
	}
}
