package integration

// The filesystem's operation table through the real
// binary: every POSIX operation fencefs implements, with the result or errno
// it must end with, on an active mount, on a fenced mount and on a mount
// without a token; each checked on the mount and in the bucket with a plain
// S3 client. fusefs's package tests run the same table against an
// in-test-binary mount server with more detail; this one proves the binary
// wires it the same way.

import (
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"
)

// fsEnv is one table run: a gateway, a bucket, a mount.
type fsEnv struct {
	gw     *gateway.Gateway
	bucket string
	fs     *harness.FS
}

func (e *fsEnv) get(t testing.TB, key string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o, err := e.gw.Client().GetObject(ctx, e.bucket, key, minio.GetObjectOptions{})
	if err == nil {
		var b []byte
		b, err = io.ReadAll(o)
		st, serr := o.Stat()
		o.Close()
		// Where DELETE ignores If-Match, a deleted name is a tombstone
		// (docs/DESIGN.md §9): absent. Elsewhere a tombstone is content,
		// and fails the row that expected no object.
		if err == nil && serr == nil && e.gw.DeleteIgnoresIfMatch() && st.UserMetadata["Fencefs-Tombstone"] == "1" {
			return "", false
		}
		if err == nil {
			return string(b), true
		}
	}
	var er minio.ErrorResponse
	if errors.As(err, &er) && er.Code == "NoSuchKey" {
		return "", false
	}
	t.Fatalf("S3 get %s: %v", key, err)
	return "", false
}

func (e *fsEnv) put(t testing.TB, key, body string, meta map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.gw.Client().PutObject(ctx, e.bucket, key, strings.NewReader(body), int64(len(body)),
		minio.PutObjectOptions{UserMetadata: meta}); err != nil {
		t.Fatalf("S3 put %s: %v", key, err)
	}
}

// meta returns key's user metadata (lower-case names, no x-amz-meta-).
func (e *fsEnv) meta(t testing.TB, key string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := e.gw.Client().StatObject(ctx, e.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		t.Fatalf("S3 stat %s: %v", key, err)
	}
	out := map[string]string{}
	for h, v := range info.Metadata {
		if lh := strings.ToLower(h); strings.HasPrefix(lh, "x-amz-meta-") && len(v) > 0 {
			out[strings.TrimPrefix(lh, "x-amz-meta-")] = v[0]
		}
	}
	return out
}

func fsErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.Errno(0xffff)
}

// fsWriteClose writes data through a new descriptor and returns close(2)'s
// result, where a failed commit shows.
func fsWriteClose(path string, flags int, data string) error {
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

type fsCase struct {
	name  string
	setup func(t *testing.T, e *fsEnv, d string)
	op    func(t *testing.T, e *fsEnv, d string) error
	want  syscall.Errno
	check func(t *testing.T, e *fsEnv, d string)
}

func wantS3(t *testing.T, e *fsEnv, key, content string) {
	t.Helper()
	got, ok := e.get(t, key)
	if !ok || got != content {
		t.Fatalf("S3 %s = %q (exists %v), want %q", key, got, ok, content)
	}
}

// syncDir fsyncs the directory dir: the point at which the deletes unlink
// acknowledged of its entries are in the bucket.
func syncDir(t *testing.T, dir string) {
	t.Helper()
	if err := fsyncDir(dir); err != nil {
		t.Fatalf("fsync of directory %s: %v", dir, err)
	}
}

func wantNoS3(t *testing.T, e *fsEnv, key string) {
	t.Helper()
	if got, ok := e.get(t, key); ok {
		t.Fatalf("S3 %s = %q, want no object", key, got)
	}
}

func wantMetaValue(t *testing.T, e *fsEnv, key, name, want string) {
	t.Helper()
	if got := e.meta(t, key)[name]; got != want {
		t.Fatalf("S3 %s x-amz-meta-%s = %q, want %q", key, name, got, want)
	}
}

var fsActiveCases = []fsCase{
	{name: "create-write-close stores one object with s3fs metadata",
		op: func(t *testing.T, e *fsEnv, d string) error {
			return fsWriteClose(e.fs.Path(d, "f"), os.O_CREATE|os.O_WRONLY, "data")
		},
		check: func(t *testing.T, e *fsEnv, d string) {
			wantS3(t, e, d+"/f", "data")
			wantMetaValue(t, e, d+"/f", "mode", strconv.Itoa(syscall.S_IFREG|0o644))
			wantMetaValue(t, e, d+"/f", "fencefs-epoch", "7")
		}},
	{name: "O_EXCL on an existing file is EEXIST",
		setup: func(t *testing.T, e *fsEnv, d string) { e.put(t, d+"/f", "old", nil) },
		op: func(t *testing.T, e *fsEnv, d string) error {
			return fsWriteClose(e.fs.Path(d, "f"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, "new")
		},
		want:  syscall.EEXIST,
		check: func(t *testing.T, e *fsEnv, d string) { wantS3(t, e, d+"/f", "old") }},
	{name: "O_TRUNC empties",
		setup: func(t *testing.T, e *fsEnv, d string) { e.put(t, d+"/f", "hello", nil) },
		op: func(t *testing.T, e *fsEnv, d string) error {
			return fsWriteClose(e.fs.Path(d, "f"), os.O_WRONLY|os.O_TRUNC, "")
		},
		check: func(t *testing.T, e *fsEnv, d string) { wantS3(t, e, d+"/f", "") }},
	{name: "O_APPEND appends",
		setup: func(t *testing.T, e *fsEnv, d string) { e.put(t, d+"/f", "abc", nil) },
		op: func(t *testing.T, e *fsEnv, d string) error {
			return fsWriteClose(e.fs.Path(d, "f"), os.O_WRONLY|os.O_APPEND, "def")
		},
		check: func(t *testing.T, e *fsEnv, d string) { wantS3(t, e, d+"/f", "abcdef") }},
	{name: "a random write into an existing file keeps the rest",
		setup: func(t *testing.T, e *fsEnv, d string) { e.put(t, d+"/f", "0123456789", nil) },
		op: func(t *testing.T, e *fsEnv, d string) error {
			f, err := os.OpenFile(e.fs.Path(d, "f"), os.O_RDWR, 0)
			if err != nil {
				return err
			}
			if _, err := f.WriteAt([]byte("XY"), 3); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		},
		check: func(t *testing.T, e *fsEnv, d string) { wantS3(t, e, d+"/f", "012XY56789") }},
	{name: "truncate shrinks and grows",
		setup: func(t *testing.T, e *fsEnv, d string) { e.put(t, d+"/f", "hello world", nil) },
		op: func(t *testing.T, e *fsEnv, d string) error {
			if err := syscall.Truncate(e.fs.Path(d, "f"), 5); err != nil {
				return err
			}
			wantS3(t, e, d+"/f", "hello")
			return syscall.Truncate(e.fs.Path(d, "f"), 7)
		},
		check: func(t *testing.T, e *fsEnv, d string) { wantS3(t, e, d+"/f", "hello\x00\x00") }},
	{name: "fsync commits before close",
		op: func(t *testing.T, e *fsEnv, d string) error {
			f, err := os.Create(e.fs.Path(d, "f"))
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
			wantS3(t, e, d+"/f", "synced")
			return f.Close()
		}},
	{name: "unlink deletes (in the bucket once the directory is fsynced); an open descriptor keeps reading",
		setup: func(t *testing.T, e *fsEnv, d string) { e.put(t, d+"/f", "keep", nil) },
		op: func(t *testing.T, e *fsEnv, d string) error {
			f, err := os.Open(e.fs.Path(d, "f"))
			if err != nil {
				return err
			}
			defer f.Close()
			if err := syscall.Unlink(e.fs.Path(d, "f")); err != nil {
				return err
			}
			syncDir(t, e.fs.Path(d))
			wantNoS3(t, e, d+"/f")
			b, err := io.ReadAll(f)
			if err != nil || string(b) != "keep" {
				t.Fatalf("read after unlink = %q, %v", b, err)
			}
			return nil
		}},
	{name: "unlink of a missing name is ENOENT",
		op:   func(t *testing.T, e *fsEnv, d string) error { return syscall.Unlink(e.fs.Path(d, "missing")) },
		want: syscall.ENOENT},
	{name: "mkdir stores a marker; rmdir of a non-empty directory is ENOTEMPTY",
		op: func(t *testing.T, e *fsEnv, d string) error {
			if err := syscall.Mkdir(e.fs.Path(d, "sub"), 0o750); err != nil {
				return err
			}
			wantMetaValue(t, e, d+"/sub/", "mode", strconv.Itoa(syscall.S_IFDIR|0o750))
			if err := os.WriteFile(e.fs.Path(d, "sub", "x"), []byte("x"), 0o644); err != nil {
				return err
			}
			return syscall.Rmdir(e.fs.Path(d, "sub"))
		},
		want: syscall.ENOTEMPTY},
	{name: "rmdir of an empty directory removes the marker",
		setup: func(t *testing.T, e *fsEnv, d string) { e.put(t, d+"/sub/", "", nil) },
		op:    func(t *testing.T, e *fsEnv, d string) error { return syscall.Rmdir(e.fs.Path(d, "sub")) },
		check: func(t *testing.T, e *fsEnv, d string) { wantNoS3(t, e, d+"/sub/") }},
	{name: "rename moves a file; RENAME_NOREPLACE onto it is EEXIST",
		setup: func(t *testing.T, e *fsEnv, d string) { e.put(t, d+"/a", "A", nil); e.put(t, d+"/c", "C", nil) },
		op: func(t *testing.T, e *fsEnv, d string) error {
			if err := syscall.Rename(e.fs.Path(d, "a"), e.fs.Path(d, "b")); err != nil {
				return err
			}
			wantNoS3(t, e, d+"/a")
			wantS3(t, e, d+"/b", "A")
			return unix.Renameat2(unix.AT_FDCWD, e.fs.Path(d, "c"), unix.AT_FDCWD, e.fs.Path(d, "b"), unix.RENAME_NOREPLACE)
		},
		want:  syscall.EEXIST,
		check: func(t *testing.T, e *fsEnv, d string) { wantS3(t, e, d+"/b", "A"); wantS3(t, e, d+"/c", "C") }},
	{name: "rename of a directory moves every object",
		setup: func(t *testing.T, e *fsEnv, d string) {
			e.put(t, d+"/src/", "", nil)
			e.put(t, d+"/src/f", "1", nil)
			e.put(t, d+"/src/deep/g", "2", nil)
		},
		op: func(t *testing.T, e *fsEnv, d string) error {
			return syscall.Rename(e.fs.Path(d, "src"), e.fs.Path(d, "dst"))
		},
		check: func(t *testing.T, e *fsEnv, d string) {
			wantNoS3(t, e, d+"/src/f")
			wantNoS3(t, e, d+"/src/deep/g")
			wantS3(t, e, d+"/dst/f", "1")
			wantS3(t, e, d+"/dst/deep/g", "2")
		}},
	{name: "symlink and readlink",
		op: func(t *testing.T, e *fsEnv, d string) error { return os.Symlink("target/x", e.fs.Path(d, "l")) },
		check: func(t *testing.T, e *fsEnv, d string) {
			wantS3(t, e, d+"/l", "target/x")
			wantMetaValue(t, e, d+"/l", "mode", strconv.Itoa(syscall.S_IFLNK|0o777))
			if l, err := os.Readlink(e.fs.Path(d, "l")); err != nil || l != "target/x" {
				t.Fatalf("readlink = %q, %v", l, err)
			}
		}},
	{name: "chmod chown utimens are stored in s3fs keys by fsync",
		setup: func(t *testing.T, e *fsEnv, d string) { e.put(t, d+"/f", "x", nil) },
		op: func(t *testing.T, e *fsEnv, d string) error {
			p := e.fs.Path(d, "f")
			if err := syscall.Chmod(p, 0o751); err != nil {
				return err
			}
			if err := syscall.Chown(p, 1234, 5678); err != nil {
				return err
			}
			if err := os.Chtimes(p, time.Unix(1500000000, 0), time.Unix(1600000000, 0)); err != nil {
				return err
			}
			return fsyncPath(p)
		},
		check: func(t *testing.T, e *fsEnv, d string) {
			m := e.meta(t, d+"/f")
			want := map[string]string{"mode": strconv.Itoa(syscall.S_IFREG | 0o751), "uid": "1234", "gid": "5678",
				"mtime": "1600000000", "atime": "1500000000"}
			for k, v := range want {
				if m[k] != v {
					t.Errorf("x-amz-meta-%s = %q, want %q", k, m[k], v)
				}
			}
			wantS3(t, e, d+"/f", "x")
		}},
	{name: "statfs answers",
		op: func(t *testing.T, e *fsEnv, d string) error {
			var s syscall.Statfs_t
			return syscall.Statfs(e.fs.Path(d), &s)
		}},
	{name: "link is ENOTSUP",
		setup: func(t *testing.T, e *fsEnv, d string) { e.put(t, d+"/f", "x", nil) },
		op: func(t *testing.T, e *fsEnv, d string) error {
			return syscall.Link(e.fs.Path(d, "f"), e.fs.Path(d, "g"))
		},
		want: syscall.ENOTSUP},
	{name: "user xattrs are stored in x-amz-meta-xattr",
		setup: func(t *testing.T, e *fsEnv, d string) { e.put(t, d+"/f", "x", nil) },
		op: func(t *testing.T, e *fsEnv, d string) error {
			return unix.Setxattr(e.fs.Path(d, "f"), "user.colour", []byte("blue"), 0)
		},
		check: func(t *testing.T, e *fsEnv, d string) {
			raw, err := url.PathUnescape(e.meta(t, d+"/f")["xattr"])
			if err != nil || raw != `{"user.colour":"Ymx1ZQ=="}` {
				t.Fatalf("x-amz-meta-xattr decodes to %q, %v", raw, err)
			}
			buf := make([]byte, 16)
			n, err := unix.Getxattr(e.fs.Path(d, "f"), "user.colour", buf)
			if err != nil || string(buf[:n]) != "blue" {
				t.Fatalf("getxattr = %q, %v", buf[:n], err)
			}
		}},
	{name: "user.fencefs.stamp is the epoch that wrote the file",
		op: func(t *testing.T, e *fsEnv, d string) error {
			if err := os.WriteFile(e.fs.Path(d, "f"), []byte("x"), 0o644); err != nil {
				return err
			}
			buf := make([]byte, 16)
			n, err := unix.Getxattr(e.fs.Path(d, "f"), "user.fencefs.stamp", buf)
			if err == nil && string(buf[:n]) != "7" {
				t.Fatalf("stamp = %q, want 7", buf[:n])
			}
			return err
		}},
	{name: "a file changed behind the mount's back fails at close with ESTALE",
		setup: func(t *testing.T, e *fsEnv, d string) { e.put(t, d+"/f", "v1", nil) },
		op: func(t *testing.T, e *fsEnv, d string) error {
			f, err := os.OpenFile(e.fs.Path(d, "f"), os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("mine"), 0); err != nil {
				return err
			}
			e.put(t, d+"/f", "theirs", nil)
			return f.Close()
		},
		want:  syscall.ESTALE,
		check: func(t *testing.T, e *fsEnv, d string) { wantS3(t, e, d+"/f", "theirs") }},
	{name: "an object from a plain S3 client is a regular file",
		setup: func(t *testing.T, e *fsEnv, d string) { e.put(t, d+"/plain", "plain bytes", nil) },
		op: func(t *testing.T, e *fsEnv, d string) error {
			var st syscall.Stat_t
			if err := syscall.Lstat(e.fs.Path(d, "plain"), &st); err != nil {
				return err
			}
			if st.Mode != syscall.S_IFREG|0o644 || st.Size != 11 {
				t.Fatalf("lstat: mode %o size %d", st.Mode, st.Size)
			}
			b, err := os.ReadFile(e.fs.Path(d, "plain"))
			if err != nil || string(b) != "plain bytes" {
				t.Fatalf("read = %q, %v", b, err)
			}
			return nil
		}},
}

func runFSCases(t *testing.T, e *fsEnv, cases []fsCase) {
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := "c" + strconv.Itoa(i)
			if err := os.Mkdir(e.fs.Path(d), 0o755); err != nil {
				t.Fatalf("mkdir %s: %v", d, err)
			}
			if tc.setup != nil {
				tc.setup(t, e, d)
			}
			if got := fsErrno(tc.op(t, e, d)); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			if tc.check != nil {
				tc.check(t, e, d)
			}
		})
	}
}

func TestFSOperationTableOnAnActiveMount(t *testing.T) {
	gateway.ForEachServer(t, gateway.SingleDriveServers, testFSOperationTableOnAnActiveMount)
}

func testFSOperationTableOnAnActiveMount(t *testing.T, gw *gateway.Gateway) {
	e := &fsEnv{gw: gw, bucket: gateway.NewBucket(t, gw)}
	// Rows write objects with a plain S3 client and look them up at once:
	// no knowledge of absent names may outlive the row that made it
	// (entry_ttl bounds it; see fusefs/names.go), and the leader's trust
	// is off, as docs/DESIGN.md asks when other clients write while
	// fencefs leads.
	e.fs = harness.Mount(t, gw, e.bucket, "--token", "7", "--entry-ttl", "1ms", "--leader-cache-ttl", "0")
	runFSCases(t, e, fsActiveCases)
	for _, ent := range mustReadDir(t, e.fs.Path()) {
		if ent == ".fencefs" {
			t.Fatal(".fencefs is visible in the mount root")
		}
	}
}

func mustReadDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// fsMutations are the mutating operations a mount that cannot write must
// refuse; they work on f, d/ and l, created by fsPrepare.
func fsMutations(fs *harness.FS) map[string]func() error {
	p := func(n string) string { return fs.Path(n) }
	return map[string]func() error{
		"create":           func() error { return fsWriteClose(p("new"), os.O_CREATE|os.O_WRONLY, "x") },
		"open for writing": func() error { return fsWriteClose(p("f"), os.O_WRONLY, "x") },
		"truncate":         func() error { return syscall.Truncate(p("f"), 1) },
		"unlink":           func() error { return syscall.Unlink(p("f")) },
		"mkdir":            func() error { return syscall.Mkdir(p("newdir"), 0o755) },
		"rmdir":            func() error { return syscall.Rmdir(p("d")) },
		"rename":           func() error { return syscall.Rename(p("f"), p("g")) },
		"symlink":          func() error { return syscall.Symlink("t", p("newlink")) },
		"chmod":            func() error { return syscall.Chmod(p("f"), 0o600) },
		"chown":            func() error { return syscall.Chown(p("f"), 1, 1) },
		"utimens":          func() error { return os.Chtimes(p("f"), time.Unix(1, 0), time.Unix(1, 0)) },
		"setxattr":         func() error { return unix.Setxattr(p("f"), "user.x", []byte("1"), 0) },
		"mkfifo":           func() error { return syscall.Mkfifo(p("newfifo"), 0o644) },
		"chmod of a fifo":  func() error { return syscall.Chmod(p("fifo"), 0o600) },
	}
}

func fsPrepare(t *testing.T, e *fsEnv) {
	e.put(t, "f", "original", nil)
	e.put(t, "d/", "", nil)
	e.put(t, "l", "f", map[string]string{"mode": strconv.Itoa(syscall.S_IFLNK | 0o777)})
	e.put(t, "fifo", "", map[string]string{"mode": strconv.Itoa(syscall.S_IFIFO | 0o644)})
}

func fsCheckUnchanged(t *testing.T, e *fsEnv) {
	t.Helper()
	wantS3(t, e, "f", "original")
	for _, k := range []string{"new", "g", "newdir/", "newlink", "newfifo"} {
		wantNoS3(t, e, k)
	}
	if b, err := os.ReadFile(e.fs.Path("f")); err != nil || string(b) != "original" {
		t.Fatalf("read on the refusing mount = %q, %v", b, err)
	}
}

func TestFSFencedMountRefusesEveryMutationWithEROFS(t *testing.T) {
	gateway.ForEachServer(t, gateway.SingleDriveServers, testFSFencedMountRefusesEveryMutationWithEROFS)
}

func testFSFencedMountRefusesEveryMutationWithEROFS(t *testing.T, gw *gateway.Gateway) {
	e := &fsEnv{gw: gw, bucket: gateway.NewBucket(t, gw)}
	fsPrepare(t, e)
	e.fs = harness.Mount(t, gw, e.bucket, "--token", "1", "--holder", "a")
	harness.Mount(t, gw, e.bucket, "--token", "2", "--holder", "b")
	if err := fsWriteClose(e.fs.Path("late"), os.O_CREATE|os.O_WRONLY, "late"); fsErrno(err) != syscall.EROFS {
		t.Fatalf("close on the older epoch's mount: %v, want EROFS", err)
	}
	buf := make([]byte, 64)
	n, err := unix.Getxattr(e.fs.Path(), "user.fencefs.state", buf)
	if err != nil || string(buf[:n]) != "fenced" {
		t.Fatalf("user.fencefs.state = %q, %v; want fenced", buf[:n], err)
	}
	for name, op := range fsMutations(e.fs) {
		if got := fsErrno(op()); got != syscall.EROFS {
			t.Errorf("%s on a fenced mount: %v, want EROFS", name, got)
		}
	}
	fsCheckUnchanged(t, e)
}

func TestFSMountWithoutTokenIsReadOnly(t *testing.T) {
	gw := gateway.ForTest(t)
	e := &fsEnv{gw: gw, bucket: gateway.NewBucket(t, gw)}
	fsPrepare(t, e)
	e.fs = harness.Mount(t, gw, e.bucket)
	for name, op := range fsMutations(e.fs) {
		if got := fsErrno(op()); got != syscall.EROFS {
			t.Errorf("%s without a token: %v, want EROFS", name, got)
		}
	}
	fsCheckUnchanged(t, e)
	if err := unix.Setxattr(e.fs.Path(), "user.fencefs.token", []byte("seven"), 0); fsErrno(err) != syscall.EINVAL {
		t.Fatalf("token seven: %v, want EINVAL", err)
	}
	if err := unix.Setxattr(e.fs.Path(), "user.fencefs.token", []byte("3"), 0); err != nil {
		t.Fatalf("binding token 3 at run time: %v", err)
	}
	if err := os.WriteFile(e.fs.Path("bound"), []byte("ok"), 0o644); err != nil {
		t.Fatalf("write after binding: %v", err)
	}
	wantS3(t, e, "bound", "ok")
}
