package fusefs

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/fencefs/fencefs/fencing"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// TestAFailedDeleteIsReportedToItsOwnProcessEvenAfterAnotherFsync: two
// processes' acknowledged deletes in one directory failed. The first
// fsync (by one of them) reports a failure; the other process's fsync
// still reports its own, and a process that deleted nothing then gets
// success; a failure whose process is unknown goes to the next fsync of
// anyone (rm, then sync). The history checker found the second fsync
// returning 0 for a delete that never landed.
func TestAFailedDeleteIsReportedToItsOwnProcessEvenAfterAnotherFsync(t *testing.T) {
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	third := exec.Command("sleep", "60")
	if err := third.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = third.Process.Kill(); _ = third.Wait() }()
	me, them, bystander := uint32(os.Getpid()), uint32(other.Process.Pid), uint32(third.Process.Pid)
	as := func(pid uint32) context.Context {
		return fuse.NewContext(context.Background(), &fuse.Caller{Pid: pid})
	}
	fsys := newFilesystem(Options{}, t.TempDir())
	errMine, errTheirs, errUnknown := errors.New("mine"), errors.New("theirs"), errors.New("unknown")

	d := &dirNode{}
	d.fsys = fsys
	d.deleteErrs = []deleteFailure{{err: errMine, tgid: me}, {err: errTheirs, tgid: them}}
	if err := d.syncDeletes(as(them)); err != errMine {
		t.Fatalf("the first fsync, by the other process: %v; want the first failure", err)
	}
	if err := d.syncDeletes(as(me)); err != errMine {
		t.Fatalf("fsync by the process whose delete failed, after another fsync reported it: %v; want its failure", err)
	}
	if err := d.syncDeletes(as(bystander)); err != nil {
		t.Fatalf("fsync by a process that deleted nothing, every failure reported: %v", err)
	}
	if err := d.syncDeletes(as(them)); err != nil {
		t.Fatalf("the other process's second fsync: %v; its own failure was reported at its first", err)
	}
	d.deleteErrs = []deleteFailure{{err: errUnknown}}
	if err := d.syncDeletes(as(bystander)); err != errUnknown {
		t.Fatalf("a failure whose process is unknown: %v; want it at the next fsync of anyone", err)
	}
	if len(d.deleteErrs) != 0 {
		t.Fatalf("failures left after every one was reported: %v", d.deleteErrs)
	}

	// The write-back records the unlink's process with its failure.
	rd := &recordingDir{}
	w := newDeleteWriteback(1, func(string, fencing.Version, fencing.Binding) error { return errMine }, func(string, error) {})
	if err := w.add(as(me), rd, "a/f", fencing.Version{ETag: "e"}); err != nil {
		t.Fatal(err)
	}
	_ = w.waitDir(context.Background(), rd)
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if len(rd.tgids) != 1 || rd.tgids[0] != me {
		t.Fatalf("failure recorded for processes %v, want [%d]", rd.tgids, me)
	}
}
