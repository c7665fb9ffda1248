package fusefs

import (
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func getx(t *testing.T, path, name string) string {
	t.Helper()
	buf := make([]byte, 256)
	n, err := unix.Getxattr(path, name, buf)
	if err != nil {
		t.Fatalf("getxattr %s %s: %v", path, name, err)
	}
	return string(buf[:n])
}

// mutations is every mutating operation, each on names prepared by
// prepareMutations. They all must fail with want on a mount that cannot
// write.
func mutations(m *testMount) []struct {
	name string
	op   func() error
} {
	p := m.Path
	return []struct {
		name string
		op   func() error
	}{
		{"create", func() error { return writeClose(p("new"), os.O_CREATE|os.O_WRONLY, "x") }},
		{"O_EXCL create", func() error { return writeClose(p("new"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, "") }},
		{"open for writing", func() error { return writeClose(p("f"), os.O_WRONLY, "x") }},
		{"open with O_TRUNC", func() error { return writeClose(p("f"), os.O_RDONLY|os.O_TRUNC, "") }},
		{"truncate", func() error { return syscall.Truncate(p("f"), 1) }},
		{"unlink", func() error { return syscall.Unlink(p("f")) }},
		{"mkdir", func() error { return syscall.Mkdir(p("newdir"), 0o755) }},
		{"rmdir", func() error { return syscall.Rmdir(p("d")) }},
		{"rename file", func() error { return syscall.Rename(p("f"), p("g")) }},
		{"rename dir", func() error { return syscall.Rename(p("d"), p("d2")) }},
		{"symlink", func() error { return syscall.Symlink("t", p("newlink")) }},
		{"mknod", func() error { return syscall.Mknod(p("node"), syscall.S_IFREG|0o644, 0) }},
		{"chmod", func() error { return syscall.Chmod(p("f"), 0o600) }},
		{"chown", func() error { return syscall.Chown(p("f"), 1, 1) }},
		{"utimens", func() error { return os.Chtimes(p("f"), time.Unix(1, 0), time.Unix(1, 0)) }},
		{"chmod dir", func() error { return syscall.Chmod(p("d"), 0o700) }},
		{"setxattr", func() error { return unix.Setxattr(p("f"), "user.x", []byte("1"), 0) }},
		{"removexattr", func() error { return unix.Removexattr(p("f"), "user.keep") }},
	}
}

// prepareMutations creates what mutations works on, with a plain S3 client
// (s3fs-style metadata). It does not go through a mount on purpose: the
// fencing sweep of a later bind would have to rewrite every key an earlier
// mount just committed, and this test is about the refusing mount.
func prepareMutations(t *testing.T, k *kt) {
	t.Helper()
	k.putObject(t, "f", []byte("original"), map[string]string{
		"mode": "33188", "xattr": encodeXattrs(map[string][]byte{"user.keep": []byte("v")})})
	k.putObject(t, "d/", nil, map[string]string{"mode": "16877"})
	k.putObject(t, "l", []byte("f"), map[string]string{"mode": "41471"})
}

// checkUnchanged verifies that the bucket still holds exactly what
// prepareMutations wrote, and that reads still work on m.
func checkUnchanged(t *testing.T, k *kt, m *testMount) {
	t.Helper()
	if b, err := k.getObject("f"); err != nil || string(b) != "original" {
		t.Fatalf("S3 f = %q, %v; want it unchanged", b, err)
	}
	for _, key := range []string{"new", "g", "newdir/", "d2/", "newlink", "node"} {
		if k.objectExists(t, key) {
			t.Errorf("S3 has %s: a refused mutation reached the bucket", key)
		}
	}
	if !k.objectExists(t, "d/") {
		t.Error("S3 lost d/")
	}
	if b, err := os.ReadFile(m.Path("f")); err != nil || string(b) != "original" {
		t.Fatalf("read f on the refused mount = %q, %v", b, err)
	}
	if l, err := os.Readlink(m.Path("l")); err != nil || l != "f" {
		t.Fatalf("readlink on the refused mount = %q, %v", l, err)
	}
	if _, err := os.ReadDir(m.Path("")); err != nil {
		t.Fatalf("readdir on the refused mount: %v", err)
	}
}

func TestFencedMountRefusesEveryMutationWithEROFS(t *testing.T) {
	k := newKT(t, 3*time.Minute)
	prepareMutations(t, k)
	a := k.mount(serveConfig{Token: 1, Holder: "a"})

	b := k.mount(serveConfig{Token: 2, Holder: "b"})

	// a does not know yet: its first commit finds out. (The descriptor is
	// opened after b started: starting a process while a descriptor on a
	// FUSE mount is open flushes it in the child.)
	fd, err := syscall.Open(a.Path("late"), os.O_CREATE|os.O_WRONLY|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			syscall.Close(fd)
		}
	})
	// The create's early intent (written in the background) may already
	// have found out, failing the write; else the commit does.
	_, werr := syscall.Write(fd, []byte("too late"))
	switch errnoOf(werr) {
	case 0:
		if got := errnoOf(syscall.Fsync(fd)); got != syscall.EROFS {
			t.Errorf("fsync after a newer epoch bound: %v, want EROFS", got)
		}
		// The refusal is reported once, and the changes dropped (issue
		// 39): the close has nothing left to store.
		closed = true
		if got := errnoOf(syscall.Close(fd)); got != 0 {
			t.Errorf("close after fsync reported the refusal: %v, want success (nothing left to store)", got)
		}
	case syscall.EROFS:
		closed = true
		if got := errnoOf(syscall.Close(fd)); got != 0 && got != syscall.EROFS {
			t.Errorf("close after a refused write: %v, want EROFS or success (nothing to store)", got)
		}
	default:
		t.Fatalf("write after a newer epoch bound: %v, want success or EROFS", werr)
	}
	if k.objectExists(t, "late") {
		t.Fatal("the fenced writer's file reached the bucket")
	}
	if st := getx(t, a.Dir, "user.fencefs.state"); st != "fenced" {
		t.Fatalf("state of a = %q, want fenced", st)
	}
	if e := getx(t, a.Dir, "user.fencefs.epoch"); e != "2" {
		t.Errorf("epoch seen by a = %q, want 2", e)
	}
	if r := getx(t, a.Dir, "user.fencefs.reason"); r == "" {
		t.Error("a fenced mount shows no reason")
	}

	for _, mu := range mutations(a) {
		t.Run(mu.name, func(t *testing.T) {
			if got := errnoOf(mu.op()); got != syscall.EROFS {
				t.Fatalf("%s on a fenced mount: %v, want EROFS", mu.name, got)
			}
		})
	}
	checkUnchanged(t, k, a)

	// A lower token never binds; a higher one takes over again.
	if err := unix.Setxattr(a.Dir, "user.fencefs.token", []byte("1"), 0); errnoOf(err) != syscall.EINVAL {
		t.Fatalf("binding a token below the register: %v, want EINVAL", err)
	}
	if err := unix.Setxattr(a.Dir, "user.fencefs.token", []byte("3"), 0); err != nil {
		t.Fatalf("binding token 3: %v", err)
	}
	if st := getx(t, a.Dir, "user.fencefs.state"); st != "active" {
		t.Fatalf("state after binding 3 = %q", st)
	}
	if err := os.WriteFile(a.Path("again"), []byte("ok"), 0o644); err != nil {
		t.Fatalf("write after rebinding: %v", err)
	}
	if got := errnoOf(writeClose(b.Path("fromb"), os.O_CREATE|os.O_WRONLY, "x")); got != syscall.EROFS {
		t.Fatalf("b after a bound 3: %v, want EROFS", got)
	}
}

func TestMountWithoutTokenIsReadOnlyUntilBound(t *testing.T) {
	k := newKT(t, 2*time.Minute)
	prepareMutations(t, k)
	u := k.mount(serveConfig{})
	if st := getx(t, u.Dir, "user.fencefs.state"); st != "unbound" {
		t.Fatalf("state = %q, want unbound", st)
	}
	if tok := getx(t, u.Dir, "user.fencefs.token"); tok != "0" {
		t.Fatalf("token = %q, want 0", tok)
	}
	if h := getx(t, u.Dir, "user.fencefs.holder"); h == "" {
		t.Fatal("no holder id")
	}
	for _, mu := range mutations(u) {
		t.Run(mu.name, func(t *testing.T) {
			if got := errnoOf(mu.op()); got != syscall.EROFS {
				t.Fatalf("%s without a token: %v, want EROFS", mu.name, got)
			}
		})
	}
	checkUnchanged(t, k, u)

	controls := []struct {
		name, attr, value string
		want              syscall.Errno
	}{
		{"a token that is not a number is EINVAL", "user.fencefs.token", "seven", syscall.EINVAL},
		{"token 0 is EINVAL", "user.fencefs.token", "0", syscall.EINVAL},
		{"the state is read-only", "user.fencefs.state", "active", syscall.EPERM},
		{"the epoch is read-only", "user.fencefs.epoch", "9", syscall.EPERM},
		{"the holder is read-only", "user.fencefs.holder", "me", syscall.EPERM},
		{"unknown control names are EPERM", "user.fencefs.nonsense", "1", syscall.EPERM},
		{"auto binds the next epoch", "user.fencefs.token", "auto", 0},
	}
	for _, c := range controls {
		t.Run(c.name, func(t *testing.T) {
			err := unix.Setxattr(u.Dir, c.attr, []byte(c.value), 0)
			if got := errnoOf(err); got != c.want {
				t.Fatalf("setxattr %s=%q: %v, want %v", c.attr, c.value, got, c.want)
			}
		})
	}
	if tok := getx(t, u.Dir, "user.fencefs.token"); tok != "1" {
		t.Fatalf("token after auto = %q, want 1 (the first epoch)", tok)
	}
	if err := os.WriteFile(u.Path("f"), []byte("bound"), 0o644); err != nil {
		t.Fatalf("write after binding: %v", err)
	}
	if s := getx(t, u.Path("f"), "user.fencefs.stamp"); s != "1" {
		t.Fatalf("stamp = %q, want 1", s)
	}
	buf := make([]byte, 1024)
	n, err := unix.Listxattr(u.Dir, buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range controlNames {
		if !containsName(buf[:n], name) {
			t.Errorf("listxattr of the root lacks %s: %q", name, buf[:n])
		}
	}
}

func containsName(list []byte, name string) bool {
	for _, n := range splitNul(list) {
		if n == name {
			return true
		}
	}
	return false
}

func splitNul(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == 0 {
			out = append(out, string(b[start:i]))
			start = i + 1
		}
	}
	return out
}

func TestReadOnlyMountRefusesMutationsAndBinding(t *testing.T) {
	k := newKT(t, 2*time.Minute)
	prepareMutations(t, k)
	r := k.mount(serveConfig{ReadOnly: true})
	for _, mu := range mutations(r) {
		if got := errnoOf(mu.op()); got != syscall.EROFS {
			t.Errorf("%s on a read-only mount: %v, want EROFS", mu.name, got)
		}
	}
	if err := unix.Setxattr(r.Dir, "user.fencefs.token", []byte("5"), 0); errnoOf(err) != syscall.EROFS {
		t.Errorf("binding on a read-only mount: %v, want EROFS", err)
	}
	checkUnchanged(t, k, r)
}

func TestFencingOffMountWritesWithoutToken(t *testing.T) {
	k := newKT(t, time.Minute)
	m := k.mount(serveConfig{Mode: "off"})
	if st := getx(t, m.Dir, "user.fencefs.state"); st != "off" {
		t.Fatalf("state = %q, want off", st)
	}
	if err := os.WriteFile(m.Path("f"), []byte("free"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := k.getObject("f"); err != nil || string(b) != "free" {
		t.Fatalf("S3 f = %q, %v", b, err)
	}
	if err := unix.Setxattr(m.Dir, "user.fencefs.token", []byte("5"), 0); errnoOf(err) != syscall.EINVAL {
		t.Fatalf("binding with fencing off: %v, want EINVAL", err)
	}
}
