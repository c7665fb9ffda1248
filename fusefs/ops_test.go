package fusefs

import (
	"bytes"
	"os"

	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// opCase is one row of the operation table: an operation on the mount, the
// errno it must end with, and what must then be true on the mount and in
// the bucket. Every row works in its own directory d (key prefix d+"/").
type opCase struct {
	name  string
	setup func(c *opCtx)
	op    func(c *opCtx) error
	want  syscall.Errno
	check func(c *opCtx)
	// staleOK accepts ESTALE besides want.
	staleOK bool
}

// opCtx is what a row sees.
type opCtx struct {
	*testing.T
	k *kt
	m *testMount
	d string // the row's directory, relative to the mount root (= key prefix without "/")
}

func (c *opCtx) path(rel string) string { return c.m.Path(c.d + "/" + rel) }
func (c *opCtx) key(rel string) string  { return c.d + "/" + rel }

func (c *opCtx) write(rel, content string) {
	c.Helper()
	if err := os.WriteFile(c.path(rel), []byte(content), 0o644); err != nil {
		c.Fatalf("write %s: %v", rel, err)
	}
}

func (c *opCtx) wantObject(rel, content string) {
	c.Helper()
	b, err := c.k.getObject(c.key(rel))
	if err != nil {
		c.Fatalf("S3 get %s: %v", c.key(rel), err)
	}
	if string(b) != content {
		c.Fatalf("S3 object %s = %q, want %q", c.key(rel), b, content)
	}
}

func (c *opCtx) wantNoObject(key string) {
	c.Helper()
	if c.k.objectExists(c, key) {
		c.Fatalf("S3 object %s exists, want none", key)
	}
}

func (c *opCtx) wantFile(rel, content string) {
	c.Helper()
	b, err := os.ReadFile(c.path(rel))
	if err != nil {
		c.Fatalf("read %s: %v", rel, err)
	}
	if string(b) != content {
		c.Fatalf("%s reads %q, want %q", rel, b, content)
	}
}

func (c *opCtx) wantErrno(what string, err error, want syscall.Errno) {
	c.Helper()
	if got := errnoOf(err); got != want {
		c.Fatalf("%s: got %v (%v), want %v", what, got, err, want)
	}
}

func (c *opCtx) wantMeta(key, name, want string) {
	c.Helper()
	if got := c.k.userMeta(c, key)[name]; got != want {
		c.Fatalf("S3 %s x-amz-meta-%s = %q, want %q", key, name, got, want)
	}
}

// syncDir fsyncs the directory dir: the point at which the deletes unlink
// acknowledged of its entries are in the bucket (deletewb.go).
func syncDir(t testing.TB, dir string) {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync of directory %s: %v", dir, err)
	}
}

func lstat(path string) (syscall.Stat_t, error) {
	var st syscall.Stat_t
	err := syscall.Lstat(path, &st)
	return st, err
}

// writeClose writes data to a new descriptor of path and returns close(2)'s
// error: where a failed commit shows.
func writeClose(path string, flags int, data string) error {
	fd, err := syscall.Open(path, flags|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	if data != "" {
		if _, err := syscall.Write(fd, []byte(data)); err != nil {
			syscall.Close(fd)
			return err
		}
	}
	return syscall.Close(fd)
}

// activeCases run on a mount with a bound token.
var activeCases = []opCase{
	{
		name: "create write close commits one object with s3fs metadata",
		op:   func(c *opCtx) error { return writeClose(c.path("f"), os.O_CREATE|os.O_WRONLY, "data") },
		check: func(c *opCtx) {
			c.wantObject("f", "data")
			c.wantMeta(c.key("f"), "mode", strconv.Itoa(syscall.S_IFREG|0o644))
			c.wantMeta(c.key("f"), "uid", strconv.Itoa(os.Getuid()))
			c.wantMeta(c.key("f"), "fencefs-epoch", "1")
			c.wantFile("f", "data")
		},
	},
	{
		name:  "O_EXCL on an existing file is EEXIST",
		setup: func(c *opCtx) { c.write("f", "old") },
		op:    func(c *opCtx) error { return writeClose(c.path("f"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, "new") },
		want:  syscall.EEXIST,
		check: func(c *opCtx) { c.wantObject("f", "old") },
	},
	{
		// The leader needs no empty object for exclusivity (no other
		// fencefs writer can create the name): one PUT, at close.
		name: "O_EXCL create on the leader stores the file at close, and a second O_EXCL create is EEXIST",
		op: func(c *opCtx) error {
			fd, err := syscall.Open(c.path("f"), os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_CLOEXEC, 0o600)
			if err != nil {
				return err
			}
			defer syscall.Close(fd)
			c.wantNoObject(c.key("f"))
			if _, err := syscall.Open(c.path("f"), os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_CLOEXEC, 0o600); err != syscall.EEXIST {
				c.Fatalf("second O_EXCL create: %v, want EEXIST", err)
			}
			_, err = syscall.Write(fd, []byte("x"))
			return err
		},
		check: func(c *opCtx) { c.wantObject("f", "x") },
	},
	{
		name:  "O_TRUNC empties the file",
		setup: func(c *opCtx) { c.write("f", "hello") },
		op:    func(c *opCtx) error { return writeClose(c.path("f"), os.O_WRONLY|os.O_TRUNC, "") },
		check: func(c *opCtx) { c.wantObject("f", ""); c.wantFile("f", "") },
	},
	{
		name:  "O_APPEND appends to the stored content",
		setup: func(c *opCtx) { c.k.putObject(c, c.key("f"), []byte("abc"), nil) },
		op:    func(c *opCtx) error { return writeClose(c.path("f"), os.O_WRONLY|os.O_APPEND, "def") },
		check: func(c *opCtx) { c.wantObject("f", "abcdef") },
	},
	{
		name:  "a random write into an existing file keeps the rest",
		setup: func(c *opCtx) { c.k.putObject(c, c.key("f"), []byte("0123456789"), nil) },
		op: func(c *opCtx) error {
			fd, err := syscall.Open(c.path("f"), os.O_RDWR|syscall.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			if _, err := syscall.Pwrite(fd, []byte("XY"), 3); err != nil {
				syscall.Close(fd)
				return err
			}
			return syscall.Close(fd)
		},
		check: func(c *opCtx) { c.wantObject("f", "012XY56789"); c.wantFile("f", "012XY56789") },
	},
	{
		name:  "truncate(2) shrinks and commits at once",
		setup: func(c *opCtx) { c.write("f", "hello world") },
		op:    func(c *opCtx) error { return syscall.Truncate(c.path("f"), 5) },
		check: func(c *opCtx) { c.wantObject("f", "hello"); c.wantFile("f", "hello") },
	},
	{
		name:  "truncate(2) grows with zeros",
		setup: func(c *opCtx) { c.write("f", "ab") },
		op:    func(c *opCtx) error { return syscall.Truncate(c.path("f"), 5) },
		check: func(c *opCtx) { c.wantObject("f", "ab\x00\x00\x00") },
	},
	{
		name:  "ftruncate is committed by close",
		setup: func(c *opCtx) { c.write("f", "hello world") },
		op: func(c *opCtx) error {
			f, err := os.OpenFile(c.path("f"), os.O_RDWR, 0)
			if err != nil {
				return err
			}
			if err := f.Truncate(4); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		},
		check: func(c *opCtx) { c.wantObject("f", "hell") },
	},
	{
		name: "fsync commits before close",
		op: func(c *opCtx) error {
			f, err := os.Create(c.path("f"))
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := f.WriteString("synced"); err != nil {
				return err
			}
			if err := f.Sync(); err != nil {
				return err
			}
			c.wantObject("f", "synced")
			return f.Close()
		},
	},
	{
		name:  "unlink deletes the object, in the bucket once the directory is fsynced",
		setup: func(c *opCtx) { c.write("f", "x") },
		op:    func(c *opCtx) error { return syscall.Unlink(c.path("f")) },
		check: func(c *opCtx) {
			_, err := lstat(c.path("f"))
			c.wantErrno("lstat after unlink", err, syscall.ENOENT)
			syncDir(c, c.path(""))
			c.wantNoObject(c.key("f"))
		},
	},
	{
		name: "unlink of a missing file is ENOENT",
		op:   func(c *opCtx) error { return syscall.Unlink(c.path("nothing")) },
		want: syscall.ENOENT,
	},
	{
		name:  "an open file keeps its data after unlink",
		setup: func(c *opCtx) { c.write("f", "keep me") },
		op: func(c *opCtx) error {
			f, err := os.Open(c.path("f"))
			if err != nil {
				return err
			}
			defer f.Close()
			if err := os.Remove(c.path("f")); err != nil {
				return err
			}
			syncDir(c, c.path(""))
			c.wantNoObject(c.key("f"))
			b, err := readAllFd(f)
			if err != nil {
				return err
			}
			if string(b) != "keep me" {
				c.Fatalf("read after unlink = %q", b)
			}
			var st syscall.Stat_t
			if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
				return err
			}
			if st.Nlink != 0 {
				c.Fatalf("nlink after unlink = %d, want 0", st.Nlink)
			}
			return f.Close()
		},
	},
	{
		name: "mkdir writes a marker with the mode",
		op:   func(c *opCtx) error { return syscall.Mkdir(c.path("sub"), 0o750) },
		check: func(c *opCtx) {
			c.wantMeta(c.key("sub/"), "mode", strconv.Itoa(syscall.S_IFDIR|0o750))
			st, err := lstat(c.path("sub"))
			if err != nil || st.Mode != syscall.S_IFDIR|0o750 {
				c.Fatalf("lstat sub = %o, %v", st.Mode, err)
			}
		},
	},
	{
		name:  "mkdir over an existing directory is EEXIST",
		setup: func(c *opCtx) { c.k.putObject(c, c.key("sub/x"), []byte("x"), nil) },
		op:    func(c *opCtx) error { return syscall.Mkdir(c.path("sub"), 0o755) },
		want:  syscall.EEXIST,
	},
	{
		name:  "rmdir of a non-empty directory is ENOTEMPTY",
		setup: func(c *opCtx) { os.Mkdir(c.path("sub"), 0o755); c.write("sub/f", "x") },
		op:    func(c *opCtx) error { return syscall.Rmdir(c.path("sub")) },
		want:  syscall.ENOTEMPTY,
		check: func(c *opCtx) { c.wantObject("sub/f", "x") },
	},
	{
		name:  "rmdir removes the marker",
		setup: func(c *opCtx) { os.Mkdir(c.path("sub"), 0o755) },
		op:    func(c *opCtx) error { return syscall.Rmdir(c.path("sub")) },
		check: func(c *opCtx) {
			c.wantNoObject(c.key("sub/"))
			_, err := lstat(c.path("sub"))
			c.wantErrno("lstat after rmdir", err, syscall.ENOENT)
		},
	},
	{
		name:  "rename of a file moves the object and its metadata",
		setup: func(c *opCtx) { c.write("a", "content"); os.Chmod(c.path("a"), 0o600) },
		op:    func(c *opCtx) error { return syscall.Rename(c.path("a"), c.path("b")) },
		check: func(c *opCtx) {
			c.wantNoObject(c.key("a"))
			c.wantObject("b", "content")
			c.wantMeta(c.key("b"), "mode", strconv.Itoa(syscall.S_IFREG|0o600))
			c.wantFile("b", "content")
		},
	},
	{
		name:  "rename onto an existing file replaces it",
		setup: func(c *opCtx) { c.write("a", "new"); c.write("b", "old") },
		op:    func(c *opCtx) error { return syscall.Rename(c.path("a"), c.path("b")) },
		check: func(c *opCtx) { c.wantNoObject(c.key("a")); c.wantObject("b", "new") },
	},
	{
		name:  "RENAME_NOREPLACE onto an existing file is EEXIST",
		setup: func(c *opCtx) { c.write("a", "new"); c.write("b", "old") },
		op: func(c *opCtx) error {
			return unix.Renameat2(unix.AT_FDCWD, c.path("a"), unix.AT_FDCWD, c.path("b"), unix.RENAME_NOREPLACE)
		},
		want:  syscall.EEXIST,
		check: func(c *opCtx) { c.wantObject("a", "new"); c.wantObject("b", "old") },
	},
	{
		name:  "RENAME_NOREPLACE to a free name renames",
		setup: func(c *opCtx) { c.write("a", "x") },
		op: func(c *opCtx) error {
			return unix.Renameat2(unix.AT_FDCWD, c.path("a"), unix.AT_FDCWD, c.path("b"), unix.RENAME_NOREPLACE)
		},
		check: func(c *opCtx) { c.wantNoObject(c.key("a")); c.wantObject("b", "x") },
	},
	{
		name:  "RENAME_EXCHANGE is EINVAL",
		setup: func(c *opCtx) { c.write("a", "a"); c.write("b", "b") },
		op: func(c *opCtx) error {
			return unix.Renameat2(unix.AT_FDCWD, c.path("a"), unix.AT_FDCWD, c.path("b"), unix.RENAME_EXCHANGE)
		},
		want:  syscall.EINVAL,
		check: func(c *opCtx) { c.wantObject("a", "a"); c.wantObject("b", "b") },
	},
	{
		name: "rename of a directory moves every object below it",
		setup: func(c *opCtx) {
			os.Mkdir(c.path("src"), 0o700)
			os.MkdirAll(c.path("src/deep/er"), 0o755)
			c.write("src/f1", "1")
			c.write("src/deep/er/f2", "2")
			c.k.putObject(c, c.key("src/implicit/f3"), []byte("3"), nil)
		},
		op: func(c *opCtx) error { return syscall.Rename(c.path("src"), c.path("dst")) },
		check: func(c *opCtx) {
			for _, k := range []string{"src/", "src/f1", "src/deep/er/f2", "src/implicit/f3"} {
				c.wantNoObject(c.key(k))
			}
			c.wantObject("dst/f1", "1")
			c.wantObject("dst/deep/er/f2", "2")
			c.wantObject("dst/implicit/f3", "3")
			c.wantMeta(c.key("dst/"), "mode", strconv.Itoa(syscall.S_IFDIR|0o700))
			c.wantFile("dst/deep/er/f2", "2")
			if _, err := lstat(c.path("src")); errnoOf(err) != syscall.ENOENT {
				c.Fatalf("lstat src after rename: %v", err)
			}
		},
	},
	{
		name: "rename of a directory onto a non-empty directory is ENOTEMPTY",
		setup: func(c *opCtx) {
			os.Mkdir(c.path("a"), 0o755)
			c.write("a/f", "a")
			os.Mkdir(c.path("b"), 0o755)
			c.write("b/g", "b")
		},
		op:    func(c *opCtx) error { return syscall.Rename(c.path("a"), c.path("b")) },
		want:  syscall.ENOTEMPTY,
		check: func(c *opCtx) { c.wantObject("a/f", "a"); c.wantObject("b/g", "b") },
	},
	{
		name: "symlink stores the target as s3fs does",
		op:   func(c *opCtx) error { return os.Symlink("../some/target", c.path("l")) },
		check: func(c *opCtx) {
			c.wantObject("l", "../some/target")
			c.wantMeta(c.key("l"), "mode", strconv.Itoa(syscall.S_IFLNK|0o777))
			got, err := os.Readlink(c.path("l"))
			if err != nil || got != "../some/target" {
				c.Fatalf("readlink = %q, %v", got, err)
			}
			st, err := lstat(c.path("l"))
			if err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFLNK {
				c.Fatalf("lstat mode %o, %v", st.Mode, err)
			}
		},
	},
	{
		name:  "chmod is stored in x-amz-meta-mode",
		setup: func(c *opCtx) { c.write("f", "x") },
		op:    func(c *opCtx) error { return syscall.Chmod(c.path("f"), 0o751) },
		check: func(c *opCtx) {
			c.wantMeta(c.key("f"), "mode", strconv.Itoa(syscall.S_IFREG|0o751))
			c.wantObject("f", "x")
		},
	},
	{
		name:  "chown is stored in x-amz-meta-uid and -gid",
		setup: func(c *opCtx) { c.write("f", "x") },
		op:    func(c *opCtx) error { return syscall.Lchown(c.path("f"), 1234, 5678) },
		check: func(c *opCtx) {
			c.wantMeta(c.key("f"), "uid", "1234")
			c.wantMeta(c.key("f"), "gid", "5678")
		},
	},
	{
		name:  "utimens is stored in x-amz-meta-mtime",
		setup: func(c *opCtx) { c.write("f", "x") },
		op: func(c *opCtx) error {
			return os.Chtimes(c.path("f"), time.Unix(1500000000, 0), time.Unix(1600000000, 500))
		},
		check: func(c *opCtx) {
			c.wantMeta(c.key("f"), "mtime", "1600000000.000000500")
			c.wantMeta(c.key("f"), "atime", "1500000000")
			st, _ := lstat(c.path("f"))
			if st.Mtim.Sec != 1600000000 || st.Mtim.Nsec != 500 {
				c.Fatalf("mtime = %v", st.Mtim)
			}
		},
	},
	{
		name: "statfs answers",
		op: func(c *opCtx) error {
			var s syscall.Statfs_t
			if err := syscall.Statfs(c.path(""), &s); err != nil {
				return err
			}
			if s.Bsize != 4096 || s.Bavail == 0 {
				c.Fatalf("statfs = %+v", s)
			}
			return nil
		},
	},
	{
		name:  "link is ENOTSUP",
		setup: func(c *opCtx) { c.write("f", "x") },
		op:    func(c *opCtx) error { return syscall.Link(c.path("f"), c.path("g")) },
		want:  syscall.ENOTSUP,
	},
	{
		name: "mkfifo stores an empty object with S_IFIFO in x-amz-meta-mode",
		op:   func(c *opCtx) error { return syscall.Mkfifo(c.path("p"), 0o644) },
		check: func(c *opCtx) {
			c.wantObject("p", "")
			c.wantMeta(c.key("p"), "mode", strconv.Itoa(syscall.S_IFIFO|0o644))
			st, err := lstat(c.path("p"))
			if err != nil || st.Mode != syscall.S_IFIFO|0o644 {
				c.Fatalf("lstat mode %o, %v", st.Mode, err)
			}
		},
	},
	{
		name:  "user xattrs are stored in x-amz-meta-xattr",
		setup: func(c *opCtx) { c.write("f", "x") },
		op:    func(c *opCtx) error { return unix.Setxattr(c.path("f"), "user.colour", []byte("blue"), 0) },
		check: func(c *opCtx) {
			x, err := decodeXattrs(c.k.userMeta(c, c.key("f"))["xattr"])
			if err != nil || string(x["user.colour"]) != "blue" {
				c.Fatalf("stored xattrs = %q, %v", x, err)
			}
			buf := make([]byte, 64)
			n, err := unix.Getxattr(c.path("f"), "user.colour", buf)
			if err != nil || string(buf[:n]) != "blue" {
				c.Fatalf("getxattr = %q, %v", buf[:n], err)
			}
			n, err = unix.Listxattr(c.path("f"), buf)
			if err != nil || !strings.Contains(string(buf[:n]), "user.colour\x00") {
				c.Fatalf("listxattr = %q, %v", buf[:n], err)
			}
			if err := unix.Removexattr(c.path("f"), "user.colour"); err != nil {
				c.Fatalf("removexattr: %v", err)
			}
			_, err = unix.Getxattr(c.path("f"), "user.colour", buf)
			c.wantErrno("getxattr after removexattr", err, syscall.ENODATA)
			c.wantObject("f", "x")
		},
	},
	{
		name:  "XATTR_CREATE on an existing attribute is EEXIST",
		setup: func(c *opCtx) { c.write("f", "x"); unix.Setxattr(c.path("f"), "user.a", []byte("1"), 0) },
		op:    func(c *opCtx) error { return unix.Setxattr(c.path("f"), "user.a", []byte("2"), unix.XATTR_CREATE) },
		want:  syscall.EEXIST,
	},
	{
		name:  "an xattr too large for object metadata is E2BIG",
		setup: func(c *opCtx) { c.write("f", "x") },
		op: func(c *opCtx) error {
			return unix.Setxattr(c.path("f"), "user.big", bytes.Repeat([]byte("v"), 4000), 0)
		},
		want: syscall.E2BIG,
	},
	{
		name:  "xattrs outside the user namespace are ENOTSUP",
		setup: func(c *opCtx) { c.write("f", "x") },
		op:    func(c *opCtx) error { return unix.Setxattr(c.path("f"), "trusted.x", []byte("1"), 0) },
		want:  syscall.ENOTSUP,
	},
	{
		// ENOTSUP, not ENODATA: ls -l then stops asking the device for
		// security.selinux instead of asking every file.
		name:  "reading a security label is ENOTSUP, not ENODATA",
		setup: func(c *opCtx) { c.write("f", "x") },
		op: func(c *opCtx) error {
			_, err := unix.Lgetxattr(c.path("f"), "security.selinux", make([]byte, 64))
			return err
		},
		want: syscall.ENOTSUP,
	},
	{
		name:  "reading a POSIX ACL is ENOTSUP, not ENODATA",
		setup: func(c *opCtx) { c.write("f", "x") },
		op: func(c *opCtx) error {
			_, err := unix.Getxattr(c.path("f"), "system.posix_acl_access", nil)
			return err
		},
		want: syscall.ENOTSUP,
	},
	{
		name:  "a file has no capabilities (ENODATA)",
		setup: func(c *opCtx) { c.write("f", "x") },
		op: func(c *opCtx) error {
			_, err := unix.Getxattr(c.path("f"), "security.capability", nil)
			return err
		},
		want: syscall.ENODATA,
	},
	{
		name:  "user.fencefs attributes of files are reserved (EPERM)",
		setup: func(c *opCtx) { c.write("f", "x") },
		op:    func(c *opCtx) error { return unix.Setxattr(c.path("f"), "user.fencefs.stamp", []byte("9"), 0) },
		want:  syscall.EPERM,
	},
	{
		name:  "user.fencefs.stamp shows the epoch that wrote the file",
		setup: func(c *opCtx) { c.write("f", "x") },
		op: func(c *opCtx) error {
			buf := make([]byte, 32)
			n, err := unix.Getxattr(c.path("f"), "user.fencefs.stamp", buf)
			if err == nil && string(buf[:n]) != "1" {
				c.Fatalf("stamp = %q, want 1", buf[:n])
			}
			return err
		},
	},
	{
		name:  "a file written by a plain S3 client has no stamp (ENODATA)",
		setup: func(c *opCtx) { c.k.putObject(c, c.key("f"), []byte("x"), nil) },
		op: func(c *opCtx) error {
			_, err := unix.Getxattr(c.path("f"), "user.fencefs.stamp", make([]byte, 32))
			return err
		},
		want: syscall.ENODATA,
	},
	{
		name:  "an object from a plain S3 client is a regular file with the mount's defaults",
		setup: func(c *opCtx) { c.k.putObject(c, c.key("plain"), []byte("plain bytes"), nil) },
		op: func(c *opCtx) error {
			st, err := lstat(c.path("plain"))
			if err != nil {
				return err
			}
			if st.Mode != syscall.S_IFREG|0o644 || st.Size != 11 || st.Uid != uint32(os.Getuid()) || st.Nlink != 1 {
				c.Fatalf("lstat = mode %o size %d uid %d nlink %d", st.Mode, st.Size, st.Uid, st.Nlink)
			}
			c.wantFile("plain", "plain bytes")
			return nil
		},
	},
	{
		name:  "implicit directories come from common prefixes",
		setup: func(c *opCtx) { c.k.putObject(c, c.key("i/j/k"), []byte("k"), nil) },
		op: func(c *opCtx) error {
			ents, err := os.ReadDir(c.path("i"))
			if err != nil {
				return err
			}
			if len(ents) != 1 || ents[0].Name() != "j" || !ents[0].IsDir() {
				c.Fatalf("readdir i = %v", ents)
			}
			c.wantFile("i/j/k", "k")
			return nil
		},
	},
	{
		name: "getattr of a missing name is ENOENT",
		op:   func(c *opCtx) error { _, err := lstat(c.path("missing")); return err },
		want: syscall.ENOENT,
	},
	{
		name:  "a write to a file changed behind the mount's back fails at close with ESTALE",
		setup: func(c *opCtx) { c.write("f", "mine") },
		op: func(c *opCtx) error {
			f, err := os.OpenFile(c.path("f"), os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("MINE"), 0); err != nil {
				return err
			}
			c.k.putObject(c, c.key("f"), []byte("theirs"), nil)
			return f.Close()
		},
		want:  syscall.ESTALE,
		check: func(c *opCtx) { c.wantObject("f", "theirs") },
	},
	{
		name:  "a read of a file changed after bytes were returned is ESTALE or the old version whole, never a mix",
		setup: func(c *opCtx) { c.k.putObject(c, c.key("f"), bytes.Repeat([]byte("a"), 8<<20), nil) },
		op: func(c *opCtx) error {
			f, err := os.Open(c.path("f"))
			if err != nil {
				return err
			}
			defer f.Close()
			first := make([]byte, 4096)
			if _, err := syscall.Read(int(f.Fd()), first); err != nil {
				return err
			}
			c.k.putObject(c, c.key("f"), bytes.Repeat([]byte("b"), 8<<20), nil)
			rest, err := readAllFd(f)
			if err != nil {
				return err
			}
			if got := append(first, rest...); !bytes.Equal(got, bytes.Repeat([]byte("a"), 8<<20)) {
				c.Fatalf("read %d bytes, not the old version whole (a mix?)", len(got))
			}
			return nil
		},
		staleOK: true,
	},
	{
		name:  "a read that returned nothing yet takes the version current at the read",
		setup: func(c *opCtx) { c.k.putObject(c, c.key("f"), bytes.Repeat([]byte("a"), 100000), nil) },
		op: func(c *opCtx) error {
			f, err := os.Open(c.path("f"))
			if err != nil {
				return err
			}
			defer f.Close()
			c.k.putObject(c, c.key("f"), bytes.Repeat([]byte("b"), 120000), nil)
			got, err := readAllFd(f)
			if err == nil && !bytes.Equal(got, bytes.Repeat([]byte("b"), 120000)) {
				c.Fatalf("read %d bytes, want the new version (120000 b) whole", len(got))
			}
			return err
		},
	},
	{
		name: "the protocol directory cannot be created",
		op:   func(c *opCtx) error { return syscall.Mkdir(c.m.Path(".fencefs"), 0o755) },
		want: syscall.EPERM,
	},
}

// TestOperationsOnAnActiveMount runs the operation table on a mount holding
// token 1, through the kernel, against the real gateway.
func TestOperationsOnAnActiveMount(t *testing.T) {
	k := newKT(t, 3*time.Minute)
	// Rows write objects with a plain S3 client and look them up at once:
	// no negative entry may outlive the row that made it (EntryTTL also
	// bounds what a directory listing says of absent names).
	m := k.mount(serveConfig{Token: 1, EntryTTL: time.Millisecond})
	runCases(t, k, m, activeCases)

	// The protocol directory is hidden at the domain root.
	if !k.objectExists(t, ".fencefs/epoch") {
		t.Fatal("no .fencefs/epoch in the bucket: the test does not test hiding")
	}
	ents, err := os.ReadDir(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == ".fencefs" {
			t.Fatal(".fencefs is listed in the mount root")
		}
	}
	if _, err := lstat(m.Path(".fencefs")); errnoOf(err) != syscall.ENOENT {
		t.Fatalf("lstat .fencefs = %v, want ENOENT", err)
	}
}

func runCases(t *testing.T, k *kt, m *testMount, cases []opCase) {
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &opCtx{T: t, k: k, m: m, d: "case" + strconv.Itoa(i)}
			if err := os.Mkdir(m.Path(c.d), 0o755); err != nil && !os.IsExist(err) {
				t.Fatalf("mkdir %s: %v", c.d, err)
			}
			if tc.setup != nil {
				tc.setup(c)
			}
			err := tc.op(c)
			if got := errnoOf(err); got != tc.want && !(tc.staleOK && got == syscall.ESTALE) {
				t.Fatalf("got errno %v (err %v), want %v", got, err, tc.want)
			}
			if tc.check != nil {
				tc.check(c)
			}
		})
	}
}

// readAllFd reads f to the end with plain reads, so that an errno comes
// back unwrapped.
func readAllFd(f *os.File) ([]byte, error) {
	var out []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.Read(int(f.Fd()), buf)
		if err != nil {
			return out, err
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
}
