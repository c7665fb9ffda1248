package fusefs

// Each kind of change a mount holds before storing it, across another
// holder's epoch and a new bind of the mount (held.go; issue 39): never
// stored once another holder's epoch was active, reported once with EROFS;
// kept when the mount binds its own next token with nobody in between.

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func bindMount(t *testing.T, m *testMount, token uint64) {
	t.Helper()
	if err := unix.Setxattr(m.Dir, "user.fencefs.token", []byte(strconv.FormatUint(token, 10)), 0); err != nil {
		t.Fatalf("bind %d on %s: %v\n%s", token, m.Dir, err, m.logTail())
	}
}

func TestHeldContentAcrossAnotherHoldersEpochIsRefusedOnceAndNeverStored(t *testing.T) {
	k := newKTAlone(t, 3*time.Minute) // holds descriptors: no fork beside it
	a := k.mount(serveConfig{Token: 1, Holder: "a"})
	b := k.mount(serveConfig{Holder: "b", MetaTTL: time.Nanosecond, AttrTTL: time.Nanosecond, EntryTTL: time.Nanosecond})
	if err := writeClose(a.Path("f"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, "first"); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(a.Path("f"), os.O_WRONLY|syscall.O_TRUNC|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	fd2, err := syscall.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.Write(fd, []byte("held under 1")); err != nil {
		t.Fatal(err)
	}
	bindMount(t, b, 2)
	if err := writeClose(b.Path("f"), os.O_WRONLY|os.O_TRUNC, "b's"); err != nil {
		t.Fatalf("b writes: %v", err)
	}
	bindMount(t, a, 3) // a never met the refusal: it leads again
	if got := errnoOf(syscall.Close(fd)); got != syscall.EROFS {
		t.Errorf("close of a change held across b's epoch = %v, want EROFS", got)
	}
	if got := errnoOf(syscall.Close(fd2)); got != 0 {
		t.Errorf("the dup's close after the refusal was reported = %v, want success (nothing left)", got)
	}
	if got, err := k.getObject("f"); err != nil || string(got) != "b's" {
		t.Fatalf("f = %q, %v; want b's version", got, err)
	}
	if err := writeClose(a.Path("f"), os.O_WRONLY|os.O_APPEND, " then a's"); err != nil {
		t.Fatalf("a write after the new bind: %v", err)
	}
	if got, _ := k.getObject("f"); string(got) != "b's then a's" {
		t.Fatalf("f = %q after a's new write, want %q", got, "b's then a's")
	}
}

func TestHeldContentAcrossTheMountsOwnNextTokenIsStored(t *testing.T) {
	k := newKTAlone(t, 3*time.Minute) // holds descriptors: no fork beside it
	a := k.mount(serveConfig{Token: 1, Holder: "a"})
	fd, err := syscall.Open(a.Path("f"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.Write(fd, []byte("held under 1")); err != nil {
		t.Fatal(err)
	}
	bindMount(t, a, 2) // its own next token, nobody in between
	if got := errnoOf(syscall.Close(fd)); got != 0 {
		t.Fatalf("close after binding the mount's own next token = %v, want success", got)
	}
	if got, err := k.getObject("f"); err != nil || string(got) != "held under 1" {
		t.Fatalf("f = %q, %v; want the held content", got, err)
	}
}

func TestHeldAttributeChangeAcrossAnotherHoldersEpochIsNeverStored(t *testing.T) {
	k := newKTAlone(t, 3*time.Minute) // holds descriptors: no fork beside it
	a := k.mount(serveConfig{Token: 1, Holder: "a", AttrWriteback: time.Hour})
	b := k.mount(serveConfig{Holder: "b"})
	if err := writeClose(a.Path("f"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, "x"); err != nil {
		t.Fatal(err)
	}
	// Held open, so that the kernel keeps the inode (and its pending
	// change) through the cache drops of the fence and the new bind.
	fd, err := syscall.Open(a.Path("f"), os.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Fchmod(fd, 0o600); err != nil { // held for an hour
		t.Fatal(err)
	}
	bindMount(t, b, 2)
	bindMount(t, a, 3)
	if got := errnoOf(syscall.Fsync(fd)); got != syscall.EROFS {
		t.Errorf("fsync of a chmod held across b's epoch = %v, want EROFS", got)
	}
	if mode := k.userMeta(t, "f")["mode"]; mode == strconv.Itoa(syscall.S_IFREG|0o600) {
		t.Fatalf("the chmod made under token 1 was stored under token 3 (mode %s)", mode)
	}
	if got := errnoOf(syscall.Fsync(fd)); got != 0 {
		t.Errorf("the next fsync = %v, want success (reported once)", got)
	}
	if err := os.Chmod(a.Path("f"), 0o640); err != nil {
		t.Fatalf("a chmod after the new bind: %v", err)
	}
	if got := errnoOf(syscall.Fsync(fd)); got != 0 {
		t.Fatalf("fsync of the new chmod = %v", got)
	}
	if mode := k.userMeta(t, "f")["mode"]; mode != strconv.Itoa(syscall.S_IFREG|0o640) {
		t.Fatalf("mode in the bucket = %s after the new chmod, want %o", mode, syscall.S_IFREG|0o640)
	}
}

// TestARefusalIsReportedToTheWritersCloseNotToAForkedChilds: a child
// forked and exec'd while the writer holds the file closes its copy of the
// descriptor at exec, a FLUSH of the same handle that meets the refusal
// first; the writer's own close is told, not the child's exec.
func TestARefusalIsReportedToTheWritersCloseNotToAForkedChilds(t *testing.T) {
	k := newKTAlone(t, 3*time.Minute) // holds descriptors: no fork beside it
	a := k.mount(serveConfig{Token: 1, Holder: "a"})
	b := k.mount(serveConfig{Holder: "b"})
	if err := writeClose(a.Path("f"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, "first"); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(a.Path("f"), os.O_WRONLY|syscall.O_TRUNC|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.Write(fd, []byte("refused")); err != nil {
		t.Fatal(err)
	}
	bindMount(t, b, 2)
	if err := exec.Command("true").Run(); err != nil { // its exec closes the copy: a FLUSH
		t.Fatal(err)
	}
	if got := errnoOf(syscall.Close(fd)); got != syscall.EROFS {
		t.Fatalf("the writer's close after a child's FLUSH met the refusal = %v, want EROFS", got)
	}
	if got, err := k.getObject("f"); err != nil || string(got) != "first" {
		t.Fatalf("f = %q, %v; want the stored version", got, err)
	}
}
