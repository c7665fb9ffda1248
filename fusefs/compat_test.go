package fusefs

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestS3fsBucketMountsWithItsModesOwnersTimesAndSymlinks mounts a bucket laid
// out the way s3fs writes it (and one rclone object) and checks what stat,
// readlink and getxattr show.
func TestS3fsBucketMountsWithItsModesOwnersTimesAndSymlinks(t *testing.T) {
	k := newKT(t, 2*time.Minute)
	xattr := encodeXattrs(map[string][]byte{"user.origin": []byte("s3fs")})
	k.putObject(t, "docs/", nil, map[string]string{
		"mode": strconv.Itoa(syscall.S_IFDIR | 0o750), "uid": "1001", "gid": "1002", "mtime": "1600000000"})
	k.putObject(t, "docs/report.txt", []byte("quarterly"), map[string]string{
		"mode": strconv.Itoa(syscall.S_IFREG | 0o640), "uid": "1001", "gid": "1002",
		"mtime": "1600000100", "ctime": "1600000200", "atime": "1600000300", "xattr": xattr})
	k.putObject(t, "docs/latest", []byte("report.txt"), map[string]string{
		"mode": strconv.Itoa(syscall.S_IFLNK | 0o777), "uid": "1001", "gid": "1002", "mtime": "1600000400"})
	k.putObject(t, "docs/exec.sh", []byte("#!/bin/sh\n"), map[string]string{
		"mode": strconv.Itoa(syscall.S_IFREG | 0o4755), "mtime": "1600000500.250000000"})
	k.putObject(t, "rclone.bin", []byte("r"), map[string]string{"mtime": "1650000000.123456789"})
	k.putObject(t, "implicit/child", []byte("c"), nil)

	m := k.mount(serveConfig{})
	tests := []struct {
		path              string
		mode              uint32
		uid, gid          uint32
		mtime             unix.Timespec
		ctime, atime      int64
		size              int64
		link, xattrOrigin string
	}{
		{path: "docs", mode: syscall.S_IFDIR | 0o750, uid: 1001, gid: 1002, mtime: unix.Timespec{Sec: 1600000000}},
		{path: "docs/report.txt", mode: syscall.S_IFREG | 0o640, uid: 1001, gid: 1002, size: 9,
			mtime: unix.Timespec{Sec: 1600000100}, ctime: 1600000200, atime: 1600000300, xattrOrigin: "s3fs"},
		{path: "docs/latest", mode: syscall.S_IFLNK | 0o777, uid: 1001, gid: 1002, size: 10,
			mtime: unix.Timespec{Sec: 1600000400}, link: "report.txt"},
		{path: "docs/exec.sh", mode: syscall.S_IFREG | 0o4755, uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), size: 10,
			mtime: unix.Timespec{Sec: 1600000500, Nsec: 250000000}},
		{path: "rclone.bin", mode: syscall.S_IFREG | 0o644, uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), size: 1,
			mtime: unix.Timespec{Sec: 1650000000, Nsec: 123456789}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			var st unix.Stat_t
			if err := unix.Lstat(m.Path(tt.path), &st); err != nil {
				t.Fatal(err)
			}
			if st.Mode != tt.mode || st.Uid != tt.uid || st.Gid != tt.gid {
				t.Errorf("mode %o uid %d gid %d, want %o %d %d", st.Mode, st.Uid, st.Gid, tt.mode, tt.uid, tt.gid)
			}
			if st.Mtim != tt.mtime {
				t.Errorf("mtime %v, want %v", st.Mtim, tt.mtime)
			}
			if tt.ctime != 0 && (st.Ctim.Sec != tt.ctime || st.Atim.Sec != tt.atime) {
				t.Errorf("ctime %v atime %v, want %d %d", st.Ctim, st.Atim, tt.ctime, tt.atime)
			}
			if tt.size != 0 && st.Size != tt.size {
				t.Errorf("size %d, want %d", st.Size, tt.size)
			}
			if tt.link != "" {
				if l, err := os.Readlink(m.Path(tt.path)); err != nil || l != tt.link {
					t.Errorf("readlink = %q, %v; want %q", l, err, tt.link)
				}
			}
			if tt.xattrOrigin != "" {
				if v := getx(t, m.Path(tt.path), "user.origin"); v != tt.xattrOrigin {
					t.Errorf("user.origin = %q, want %q", v, tt.xattrOrigin)
				}
			}
		})
	}
	if b, err := os.ReadFile(m.Path("docs/latest")); err != nil || string(b) != "quarterly" {
		t.Fatalf("reading through the symlink: %q, %v", b, err)
	}
	ents, err := os.ReadDir(m.Path("docs"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
		if e.Name() == "latest" && e.Type() != os.ModeSymlink {
			t.Errorf("readdir type of latest = %v, want a symlink", e.Type())
		}
	}
	if len(names) != 3 || names[0] != "exec.sh" || names[1] != "latest" || names[2] != "report.txt" {
		t.Errorf("readdir docs = %v", names)
	}
	if fi, err := os.Stat(m.Path("implicit")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Errorf("implicit directory: %v, %v", fi, err)
	}
}

// TestWhatTheMountWritesS3fsReads checks the exact header values fencefs
// writes for each kind of object, as s3fs parses them.
func TestWhatTheMountWritesS3fsReads(t *testing.T) {
	k := newKT(t, time.Minute)
	m := k.mount(serveConfig{Token: 1})
	if err := os.Mkdir(m.Path("d"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.Path("d/f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(m.Path("d/f"), time.Unix(1700000000, 0), time.Unix(1700000001, 0)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("f", m.Path("d/l")); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"d/":  {"mode": "16832", "uid": strconv.Itoa(os.Getuid()), "gid": strconv.Itoa(os.Getgid())},
		"d/f": {"mode": "33152", "mtime": "1700000001", "atime": "1700000000"},
		"d/l": {"mode": "41471"},
	}
	for key, kv := range want {
		meta := k.userMeta(t, key)
		for name, v := range kv {
			if meta[name] != v {
				t.Errorf("%s x-amz-meta-%s = %q, want %q", key, name, meta[name], v)
			}
		}
		for _, name := range []string{"mtime", "ctime", "atime"} {
			if _, ok := parseTime(meta[name]); !ok {
				t.Errorf("%s x-amz-meta-%s = %q: not a time s3fs can read", key, name, meta[name])
			}
		}
	}
}
