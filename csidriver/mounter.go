package csidriver

// Starting and stopping the fencefs process of a volume. The driver runs
// `fencefs mount` without --foreground: that command starts the mount as
// a background process in a session of its own (setsid; no parent-death
// signal), waits until it serves or fails, and prints one line — the
// ready mount's summary, or the reason it failed. The mount process thus
// outlives the driver, and only the mount process: it holds no descriptor
// of the driver's (its stdio is /dev/null, its log a file).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/internal/ctxsleep"
	"github.com/moby/sys/mountinfo"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// FSType is the type fencefs mounts show in mountinfo.
const FSType = "fuse.fencefs"

// mountTimeout bounds one `fencefs mount` (its own start timeout is 2
// minutes; kubelet gives a NodePublishVolume about as long).
const mountTimeout = 150 * time.Second

// summaryPid finds the mount process's pid in the line `fencefs mount`
// prints once the mount is ready ("mounted B at T (...; pid N); stop with:
// ...").
var summaryPid = regexp.MustCompile(`; pid ([0-9]+)\); stop with: `)

// PidOfMountSummary returns the pid of the mount process that the line
// `fencefs mount` prints once the mount is ready names (cmd/fencefs tests
// that its summary keeps this form).
func PidOfMountSummary(line string) (int, bool) {
	m := summaryPid.FindStringSubmatch(line)
	if m == nil {
		return 0, false
	}
	pid, err := strconv.Atoi(m[1])
	return pid, err == nil && pid > 0
}

// runMount runs bin's `fencefs mount` of s with its cache and log as
// given, and returns the pid of the mount process. A failure is a gRPC
// status whose message is the line fencefs printed (credentials
// redacted), its code chosen by mountFailureCode.
func runMount(ctx context.Context, bin string, s volumeSpec, cache, log string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, mountTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, s.mountArgs(cache, log)...)
	// Only PATH (fusermount3) and the credentials: the driver's own
	// FENCEFS_* or AWS_* variables must not change a volume.
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, s.Env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A cancelled publish: SIGTERM, which `fencefs mount` forwards to the
	// mount process, which gives up and reports it.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	err := cmd.Run()
	line := redactAll(lastLine(stderr.String()), secretValues(s.Env))
	if err == nil {
		pid, ok := PidOfMountSummary(stdout.String())
		if !ok {
			return 0, status.Errorf(codes.Internal, "fencefs mount printed no pid: %q", lastLine(stdout.String()))
		}
		return pid, nil
	}
	code := -1
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	if line == "" {
		line = fmt.Sprintf("fencefs mount of %s at %s failed: %v", s.Bucket, s.Target, err)
	}
	return 0, status.Error(mountFailureCode(code, line), line)
}

// mountFailureCode is the gRPC code of a failed `fencefs mount` that
// exited with status exit and printed line: a configuration mistake
// (exit 2) is InvalidArgument; a missing bucket NotFound; refused
// credentials PermissionDenied; an unreachable endpoint Unavailable;
// anything else Internal.
func mountFailureCode(exit int, line string) codes.Code {
	switch {
	case exit == 2:
		return codes.InvalidArgument
	case strings.Contains(line, "access denied to bucket"):
		return codes.PermissionDenied
	case strings.Contains(line, "cannot reach "):
		return codes.Unavailable
	case strings.Contains(line, "bucket ") && strings.Contains(line, " does not exist at "):
		return codes.NotFound
	}
	return codes.Internal
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// redactAll replaces each of secrets in s.
func redactAll(s string, secrets []string) string {
	for _, v := range secrets {
		s = strings.ReplaceAll(s, v, "[REDACTED]")
	}
	return s
}

// mountedAt returns the mount at dir (the last of several stacked there),
// from /proc/self/mountinfo only: dir itself is never touched, since a
// stopped fencefs process would hang the caller.
func mountedAt(dir string) (*mountinfo.Info, bool, error) {
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
	if err != nil || len(ms) == 0 {
		return nil, false, err
	}
	return ms[len(ms)-1], true, nil
}

// fencefsMountsUnder lists the fencefs mounts at or below dir.
func fencefsMountsUnder(dir string) ([]*mountinfo.Info, error) {
	return mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return m.FSType != FSType || !(m.Mountpoint == dir || strings.HasPrefix(m.Mountpoint, strings.TrimSuffix(dir, "/")+"/")), false
	})
}

// Unmount attempts and the pause between them while the kernel reports
// the mount busy.
const (
	unmountAttempts = 20
	unmountPause    = 100 * time.Millisecond
)

// unmount removes the fencefs mount at target: fusermount3 -u (the mount
// process commits nothing at that point: every file was committed when it
// was closed, and a file still open makes the mount busy), retried while
// busy, then a lazy unmount, which detaches it at once (lazy is then
// true). Nothing mounted there is success.
func unmount(ctx context.Context, target string) (lazy bool, err error) {
	var last []byte
	for range unmountAttempts {
		m, ok, err := mountedAt(target)
		if err != nil {
			return false, err
		}
		if !ok {
			return false, nil
		}
		if m.FSType != FSType {
			return false, status.Errorf(codes.FailedPrecondition, "target path %s is a %s mount, not a fencefs one: not unmounted", target, m.FSType)
		}
		out, err := exec.CommandContext(ctx, "fusermount3", "-u", target).CombinedOutput()
		if err == nil {
			continue
		}
		last = out
		if err := ctxsleep.Sleep(ctx, unmountPause); err != nil {
			return false, err
		}
	}
	if out, err := exec.CommandContext(ctx, "fusermount3", "-uz", target).CombinedOutput(); err != nil {
		return false, fmt.Errorf("cannot unmount %s: %s; lazy unmount: %s", target, oneLine(last), oneLine(out))
	}
	return true, nil
}

func oneLine(b []byte) string { return strings.Join(strings.Fields(string(b)), " ") }

// waitExit waits until process pid (started at start) has exited or
// ctx ends.
func waitExit(ctx context.Context, r record) error {
	for r.alive() {
		if err := ctxsleep.Sleep(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("the fencefs process %d of %s has not exited: %w", r.Pid, r.Target, err)
		}
	}
	return nil
}
