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
	errMine, errTheirs, errUnknown := errors.New("mine"), errors.New("theirs"), errors.New("unknown")

	w := newDeleteWriteback(1, nil, nil)
	w.failures["d/"] = []deleteFailure{{err: errMine, tgid: me}, {err: errTheirs, tgid: them}}
	if err := w.report(them, "d/"); err != errMine {
		t.Fatalf("the first fsync, by the other process: %v; want the first failure", err)
	}
	if err := w.report(me, "d/"); err != errMine {
		t.Fatalf("fsync by the process whose delete failed, after another fsync reported it: %v; want its failure", err)
	}
	if err := w.report(bystander, "d/"); err != nil {
		t.Fatalf("fsync by a process that deleted nothing, every failure reported: %v", err)
	}
	if err := w.report(them, "d/"); err != nil {
		t.Fatalf("the other process's second fsync: %v; its own failure was reported at its first", err)
	}
	if err := w.report(bystander, "e/"); err != nil {
		t.Fatalf("fsync of another directory: %v; want nil", err)
	}
	w.failures["d/"] = []deleteFailure{{err: errUnknown}}
	if err := w.report(bystander, "d/"); err != errUnknown {
		t.Fatalf("a failure whose process is unknown: %v; want it at the next fsync of anyone", err)
	}
	if len(w.failures) != 0 {
		t.Fatalf("failures left after every one was reported: %v", w.failures)
	}

	// The write-back records the unlink's process with its failure.
	w = newDeleteWriteback(1, func(string, fencing.Version, fencing.Binding) error { return errMine }, func(string, error) {})
	if err := w.add(as(me), &recordingDir{}, "a/f", fencing.Version{ETag: "e"}); err != nil {
		t.Fatal(err)
	}
	_ = w.waitDir(context.Background(), "a/")
	if err := w.report(bystander, "a/"); err != errMine {
		t.Fatalf("first fsync of a/ after the failure: %v; want it", err)
	}
	if err := w.report(bystander, "a/"); err != nil {
		t.Fatalf("a bystander's second fsync: %v; want nil", err)
	}
	if err := w.report(me, "a/"); err != errMine {
		t.Fatalf("fsync by the process that unlinked: %v; want its failure once more", err)
	}
}

// TestAFailedDeleteOfAnExitedProcessGoesOnceToAnyoneAndIsForgotten: the
// process whose unlink was acknowledged exited; its failure goes to the
// next fsync of anyone if none reported it, and is then dropped (it is
// owed to nobody any longer).
func TestAFailedDeleteOfAnExitedProcessGoesOnceToAnyoneAndIsForgotten(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(gone.Process.Pid)
	refused := errors.New("refused")
	for _, seen := range []bool{false, true} {
		w := newDeleteWriteback(1, nil, nil)
		w.failures["d/"] = []deleteFailure{{err: refused, tgid: pid, seen: seen}}
		want := refused
		if seen {
			want = nil
		}
		if err := w.report(uint32(os.Getpid()), "d/"); err != want {
			t.Errorf("seen %v: fsync after its process exited: %v, want %v", seen, err, want)
		}
		if len(w.failures) != 0 {
			t.Errorf("seen %v: kept %v after its process exited", seen, w.failures)
		}
	}
}

// TestFailedDeletesFollowTheirDirectoryThroughARenameAndEndWithItsRmdir:
// the failures kept for a directory and those below it move with a
// rename (what the destination kept is dropped: it was replaced) and are
// gone once the directory was removed.
func TestFailedDeletesFollowTheirDirectoryThroughARenameAndEndWithItsRmdir(t *testing.T) {
	refused := errors.New("refused")
	w := newDeleteWriteback(1, nil, nil)
	for _, k := range []string{"a/", "a/b/", "ab/", "c/"} {
		w.failures[k] = []deleteFailure{{err: refused}}
	}
	w.moveFailures("a/", "c/")
	for k, want := range map[string]error{"a/": nil, "a/b/": nil, "ab/": refused, "c/": refused, "c/b/": refused} {
		if err := w.report(0, k); err != want {
			t.Errorf("after the rename of a/ onto c/, fsync of %s: %v, want %v", k, err, want)
		}
	}
	w.failures["c/"] = []deleteFailure{{err: refused}}
	w.failures["c/b/"] = []deleteFailure{{err: refused}}
	w.failures["cd/"] = []deleteFailure{{err: refused}}
	w.dropFailures("c/")
	if _, ok := w.failures["cd/"]; !ok || len(w.failures) != 1 {
		t.Errorf("after the rmdir of c/: kept %v, want only cd/", w.failures)
	}
}
