package integration

// POSIX as legacy programs expect it, through the real
// binary: special files stored as s3fs stores them, the ownership rules for
// other users, and name limits. docs/POSIX.md has the pjdfstest figures.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"golang.org/x/sys/unix"
)

// TestSpecialFilesAreEmptyObjectsWithTheirTypeInMode creates each special
// file type on a mount and checks what the bucket holds (an empty object,
// S_IF* in x-amz-meta-mode, the device number in x-amz-meta-rdev), and that
// each one renames, chmods, chowns and unlinks like a file.
func TestSpecialFilesAreEmptyObjectsWithTheirTypeInMode(t *testing.T) {
	if os.Geteuid() != 0 {
		gateway.SkipOrFail(t, "mknod of device nodes needs root")
	}
	gw := gateway.ForTest(t)
	e := &fsEnv{gw: gw, bucket: gateway.NewBucket(t, gw)}
	e.fs = harness.Mount(t, gw, e.bucket, "--token", "1")
	dev := int(unix.Mkdev(12, 34))
	cases := []struct {
		name string
		kind uint32
		dev  int
	}{
		{"fifo", syscall.S_IFIFO, 0},
		{"socket", syscall.S_IFSOCK, 0},
		{"char", syscall.S_IFCHR, dev},
		{"block", syscall.S_IFBLK, dev},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := e.fs.Path(tc.name)
			if err := syscall.Mknod(p, tc.kind|0o640, tc.dev); err != nil {
				t.Fatalf("mknod: %v", err)
			}
			wantStat(t, p, tc.kind|0o640, uint64(tc.dev))
			wantS3(t, e, tc.name, "")
			meta := e.meta(t, tc.name)
			if meta["mode"] != strconv.Itoa(int(tc.kind|0o640)) {
				t.Fatalf("x-amz-meta-mode = %q, want %d", meta["mode"], tc.kind|0o640)
			}
			if got, want := meta["rdev"], map[bool]string{true: strconv.Itoa(tc.dev)}[tc.dev != 0]; got != want {
				t.Fatalf("x-amz-meta-rdev = %q, want %q", got, want)
			}
			if err := syscall.Chmod(p, 0o600); err != nil {
				t.Fatalf("chmod: %v", err)
			}
			if err := syscall.Lchown(p, 65534, 65533); err != nil {
				t.Fatalf("chown: %v", err)
			}
			var before syscall.Stat_t
			if err := syscall.Lstat(p, &before); err != nil {
				t.Fatal(err)
			}
			moved := p + ".moved"
			if err := syscall.Rename(p, moved); err != nil {
				t.Fatalf("rename: %v", err)
			}
			st := wantStat(t, moved, tc.kind|0o600, uint64(tc.dev))
			if st.Uid != 65534 || st.Gid != 65533 || st.Ino != before.Ino {
				t.Fatalf("after rename: uid %d gid %d ino %d, want 65534 65533 %d", st.Uid, st.Gid, st.Ino, before.Ino)
			}
			wantNoS3(t, e, tc.name)
			if meta := e.meta(t, tc.name+".moved"); meta["uid"] != "65534" || meta["mode"] != strconv.Itoa(int(tc.kind|0o600)) {
				t.Fatalf("renamed object's metadata %v", meta)
			}
			if err := unix.Setxattr(moved, "user.x", []byte("1"), 0); fsErrno(err) != syscall.EPERM {
				t.Fatalf("setxattr on a special file: %v, want EPERM (as Linux)", err)
			}
			if err := syscall.Unlink(moved); err != nil {
				t.Fatalf("unlink: %v", err)
			}
			syncDir(t, filepath.Dir(moved))
			wantNoS3(t, e, tc.name+".moved")
		})
	}
}

// wantStat lstats p and checks its mode and device number.
func wantStat(t *testing.T, p string, mode uint32, rdev uint64) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	if st.Mode != mode || st.Rdev != rdev || st.Size != 0 || st.Nlink != 1 {
		t.Fatalf("lstat %s: mode %#o rdev %d size %d nlink %d, want mode %#o rdev %d size 0 nlink 1",
			p, st.Mode, st.Rdev, st.Size, st.Nlink, mode, rdev)
	}
	return st
}

// TestFIFOWrittenByS3fsIsAPipeOnTheMount reads a bucket as s3fs leaves it
// (an empty object whose mode says S_IFIFO, no rdev key) and uses the FIFO
// as a pipe: its data never goes to the bucket.
func TestFIFOWrittenByS3fsIsAPipeOnTheMount(t *testing.T) {
	gw := gateway.ForTest(t)
	e := &fsEnv{gw: gw, bucket: gateway.NewBucket(t, gw)}
	e.put(t, "queue", "", map[string]string{"mode": strconv.Itoa(syscall.S_IFIFO | 0o644), "uid": "0", "gid": "0"})
	e.fs = harness.Mount(t, gw, e.bucket, "--token", "1")
	wantStat(t, e.fs.Path("queue"), syscall.S_IFIFO|0o644, 0)
	fd, err := syscall.Open(e.fs.Path("queue"), syscall.O_RDWR|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open the fifo: %v", err)
	}
	defer syscall.Close(fd)
	if _, err := syscall.Write(fd, []byte("through the pipe")); err != nil {
		t.Fatalf("write: %v", err)
	}
	buf := make([]byte, 64)
	n, err := syscall.Read(fd, buf)
	if err != nil || string(buf[:n]) != "through the pipe" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	wantS3(t, e, "queue", "")
}

// TestFindSeesEveryEntrysTypeOnAColdMount lists, on a mount that has not
// seen them, a FIFO, empty and small files, a symlink
// and a large file written by a plain S3 client in s3fs's format: the types
// readdir reports (what find -type uses without a stat) are never wrong —
// an empty object may be a FIFO, so it is unknown until stat.
func TestFindSeesEveryEntrysTypeOnAColdMount(t *testing.T) {
	gateway.ForEachServer(t, gateway.SingleDriveServers, testFindSeesEveryEntrysTypeOnAColdMount)
}

func testFindSeesEveryEntrysTypeOnAColdMount(t *testing.T, gw *gateway.Gateway) {
	e := &fsEnv{gw: gw, bucket: gateway.NewBucket(t, gw)}
	meta := func(mode int) map[string]string {
		return map[string]string{"mode": strconv.Itoa(mode), "uid": "0", "gid": "0"}
	}
	e.put(t, "d/pipe", "", meta(syscall.S_IFIFO|0o644))
	e.put(t, "d/empty", "", meta(syscall.S_IFREG|0o644))
	e.put(t, "d/small", "x", meta(syscall.S_IFREG|0o644))
	e.put(t, "d/link", "small", meta(syscall.S_IFLNK|0o777))
	e.put(t, "d/large", strings.Repeat("y", 5000), meta(syscall.S_IFREG|0o644))
	e.fs = harness.Mount(t, gw, e.bucket, "--token", "1")
	want := map[string]os.FileMode{"pipe": os.ModeNamedPipe, "empty": 0, "small": 0, "link": os.ModeSymlink, "large": 0}
	entries, err := os.ReadDir(e.fs.Path("d")) // d_type, or lstat where it is DT_UNKNOWN
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range entries {
		if w, ok := want[de.Name()]; !ok || de.Type() != w {
			t.Errorf("%s: type %v, want %v", de.Name(), de.Type(), w)
		}
		delete(want, de.Name())
	}
	if len(want) != 0 {
		t.Errorf("not listed: %v", want)
	}
	out, err := exec.Command("find", e.fs.Path("d"), "-type", "p").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != e.fs.Path("d", "pipe") {
		t.Errorf("find -type p = %q, %v; want the FIFO", out, err)
	}
}

// TestOtherUsersFollowTheOwnershipRules runs chown, chgrp, chmod and
// utimensat as user nobody on an --allow-other mount: only root gives files
// away, the group changes only to the caller's groups, only the owner
// chmods or sets explicit times, a writer may set the times to now, and a
// write or a chown clears S_ISUID/S_ISGID.
func TestOtherUsersFollowTheOwnershipRules(t *testing.T) {
	nobody := lookupNobody(t)
	gw := gateway.ForTest(t)
	e := &fsEnv{gw: gw, bucket: gateway.NewBucket(t, gw)}
	e.fs = harness.MountWith(t, gw, e.bucket, harness.Options{Dir: publicMountpoint(t)}, "--token", "1", "--allow-other")
	p := e.fs.Path
	own := strconv.Itoa(int(nobody.uid)) + ":" + strconv.Itoa(int(nobody.gid))
	for name, mode := range map[string]os.FileMode{"roots": 0o644, "shared": 0o666, "mine": 0o644, "setid": 0o777} {
		if err := os.WriteFile(p(name), []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p(name), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Lchown(p("mine"), int(nobody.uid), int(nobody.gid)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p("setid"), 0o6777); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, script string
		ok           bool
	}{
		{"nobody cannot give its file away", "chown 0 " + p("mine"), false},
		{"nobody cannot take root's file", "chown " + own + " " + p("roots"), false},
		{"nobody cannot chgrp to a group it is not in", "chgrp 0 " + p("mine"), false},
		{"nobody chgrps its file to its own group", "chgrp " + strconv.Itoa(int(nobody.gid)) + " " + p("mine"), true},
		{"nobody chmods its file", "chmod 0600 " + p("mine"), true},
		{"nobody cannot chmod root's file", "chmod 0777 " + p("shared"), false},
		{"nobody cannot set explicit times on root's file", "touch -d @1000 " + p("shared"), false},
		{"nobody may set a writable file's times to now", "touch " + p("shared"), true},
		{"nobody cannot touch a file it cannot write", "touch " + p("roots"), false},
		{"nobody's write clears suid and sgid", "echo more >> " + p("setid"), true},
	}
	for _, tc := range cases {
		out, ok := nobody.sh(t, tc.script)
		if ok != tc.ok {
			t.Errorf("%s: %q succeeded=%v (%s), want %v", tc.name, tc.script, ok, out, tc.ok)
		}
	}
	if st := lstat(t, p("setid")); st.Mode&0o7777 != 0o777 {
		t.Errorf("setid after nobody's write: mode %#o, want 0777", st.Mode&0o7777)
	}
	if st := lstat(t, p("mine")); st.Uid != nobody.uid || st.Mode&0o7777 != 0o600 {
		t.Errorf("mine: uid %d mode %#o, want %d 0600", st.Uid, st.Mode&0o7777, nobody.uid)
	}
	if err := os.Chmod(p("roots"), 0o6755); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(p("roots"), 1, 1); err != nil {
		t.Fatal(err)
	}
	if st := lstat(t, p("roots")); st.Mode&0o7777 != 0o755 {
		t.Errorf("root's chown kept set-id bits: %#o, want 0755 (Linux clears them for every caller)", st.Mode&0o7777)
	}
	if err := fsyncPath(p("roots")); err != nil {
		t.Fatal(err)
	}
	if m := e.meta(t, "roots"); m["mode"] != strconv.Itoa(syscall.S_IFREG|0o755) || m["uid"] != "1" {
		t.Errorf("stored metadata after chown: %v", m)
	}
}

func lstat(t *testing.T, p string) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return st
}

// TestNamesOverNameMaxAreENAMETOOLONG checks the 255-byte limit of one
// name (as on ext4) for lookups and creates.
func TestNamesOverNameMaxAreENAMETOOLONG(t *testing.T) {
	gw := gateway.ForTest(t)
	fs := harness.Mount(t, gw, gateway.NewBucket(t, gw), "--token", "1")
	long := strings.Repeat("n", 256)
	ops := map[string]func() error{
		"create": func() error { return fsWriteClose(fs.Path(long), os.O_CREATE|os.O_WRONLY, "x") },
		"mkdir":  func() error { return syscall.Mkdir(fs.Path(long), 0o755) },
		"mkfifo": func() error { return syscall.Mkfifo(fs.Path(long), 0o644) },
		"stat":   func() error { var st syscall.Stat_t; return syscall.Stat(fs.Path(long), &st) },
	}
	for name, op := range ops {
		if err := op(); fsErrno(err) != syscall.ENAMETOOLONG {
			t.Errorf("%s of a 256-byte name: %v, want ENAMETOOLONG", name, err)
		}
	}
	if err := syscall.Mkfifo(fs.Path(strings.Repeat("n", 200)), 0o644); err != nil {
		t.Errorf("mkfifo of a 200-byte name: %v", err)
	}
}

// TestDirectoryTimesMoveWhenEntriesComeAndGo checks that adding or removing
// an entry sets the directory's mtime and ctime (as ext4 does; in the
// mount's memory, docs/POSIX.md), and that an explicit utimens of the
// directory afterwards is what it shows and stores.
func TestDirectoryTimesMoveWhenEntriesComeAndGo(t *testing.T) {
	gw := gateway.ForTest(t)
	e := &fsEnv{gw: gw, bucket: gateway.NewBucket(t, gw)}
	e.fs = harness.Mount(t, gw, e.bucket, "--token", "1")
	d := e.fs.Path("d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	past := unix.NsecToTimespec(1000 * 1e9)
	cases := []struct {
		name string
		op   func(p string) error
	}{
		{"create", func(p string) error { return fsWriteClose(p+"/f", os.O_CREATE|os.O_WRONLY, "x") }},
		{"mkdir", func(p string) error { return syscall.Mkdir(p+"/sub", 0o755) }},
		{"mkfifo", func(p string) error { return syscall.Mkfifo(p+"/fifo", 0o644) }},
		{"symlink", func(p string) error { return syscall.Symlink("f", p+"/l") }},
		{"rename within", func(p string) error { return syscall.Rename(p+"/l", p+"/l2") }},
		{"unlink", func(p string) error { return syscall.Unlink(p + "/l2") }},
		{"rmdir", func(p string) error { return syscall.Rmdir(p + "/sub") }},
		{"rename out", func(p string) error { return syscall.Rename(p+"/fifo", e.fs.Path("fifo")) }},
	}
	for _, tc := range cases {
		if err := unix.UtimesNano(d, []unix.Timespec{past, past}); err != nil {
			t.Fatal(err)
		}
		before := lstat(t, d)
		if err := tc.op(d); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		after := lstat(t, d)
		if after.Mtim.Sec <= 1000 || !timespecAfter(after.Ctim, before.Ctim) {
			t.Errorf("%s: directory mtime %v ctime %v (before: ctime %v), want both moved to now",
				tc.name, after.Mtim, after.Ctim, before.Ctim)
		}
	}
	if err := fsWriteClose(d+"/g", os.O_CREATE|os.O_WRONLY, "x"); err != nil {
		t.Fatal(err)
	}
	later := unix.NsecToTimespec(2000 * 1e9)
	if err := unix.UtimesNano(d, []unix.Timespec{later, later}); err != nil {
		t.Fatal(err)
	}
	if st := lstat(t, d); st.Mtim.Sec != 2000 {
		t.Errorf("utimens after a create: mtime %v, want 2000", st.Mtim)
	}
	if err := fsyncPath(d); err != nil {
		t.Fatal(err)
	}
	wantMetaValue(t, e, "d/", "mtime", "2000")
}

func timespecAfter(a, b syscall.Timespec) bool {
	return a.Sec > b.Sec || (a.Sec == b.Sec && a.Nsec > b.Nsec)
}

// TestNameUnlinkedAfterAListingIsGone lists a directory (which reads ahead
// the metadata of what it shows), unlinks a FIFO and a file through the
// mount and makes them again: what was read ahead before the unlink must not
// answer the lookups after it (the FIFO came back as EEXIST).
func TestNameUnlinkedAfterAListingIsGone(t *testing.T) {
	gw := gateway.ForTest(t)
	fs := harness.Mount(t, gw, gateway.NewBucket(t, gw), "--token", "1")
	for round := 0; round < 3; round++ {
		if err := syscall.Mkfifo(fs.Path("fifo"), 0o644); err != nil {
			t.Fatalf("round %d: mkfifo: %v", round, err)
		}
		if err := fsWriteClose(fs.Path("file"), os.O_CREATE|os.O_WRONLY, "x"); err != nil {
			t.Fatalf("round %d: create: %v", round, err)
		}
		if _, err := os.ReadDir(fs.Path()); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"fifo", "file"} {
			if err := syscall.Unlink(fs.Path(name)); err != nil {
				t.Fatalf("round %d: unlink %s: %v", round, name, err)
			}
			var st syscall.Stat_t
			if err := syscall.Lstat(fs.Path(name), &st); fsErrno(err) != syscall.ENOENT {
				t.Fatalf("round %d: lstat %s after its unlink: %v (mode %#o), want ENOENT", round, name, err, st.Mode)
			}
		}
	}
}
