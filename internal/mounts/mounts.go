// Package mounts checks and removes FUSE mounts from outside the process
// serving them: the one unmount-with-retries of the benchmarks, the
// integration harness and the fusefs kernel tests. It reads
// /proc/self/mountinfo and runs fusermount3; it never touches the mounted
// directory itself, which could hang on a frozen mount.
package mounts

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/fencefs/fencefs/internal/ctxsleep"
	"github.com/moby/sys/mountinfo"
)

// Attempts and Pause bound Unmount: fusermount3 -u is tried up to Attempts
// times, Pause apart, while the kernel reports the mount busy (EBUSY while
// it drains requests).
const (
	Attempts = 20
	Pause    = 100 * time.Millisecond
)

// IsMounted reports whether dir is a mountpoint, from /proc/self/mountinfo
// only.
func IsMounted(dir string) (bool, error) {
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(filepath.Clean(dir)))
	return len(ms) > 0, err
}

// Unmount makes sure dir is not a mountpoint: nothing to do when it is not
// one, else fusermount3 -u, retried while busy (Attempts, Pause), then a
// lazy unmount (Lazy). Having to fall back on the lazy unmount is an error,
// as is ctx ending first; an error names dir and, for fusermount3, its
// output, on one line.
func Unmount(ctx context.Context, dir string) error {
	for i := 0; i < Attempts; i++ {
		ok, err := IsMounted(dir)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if exec.CommandContext(ctx, "fusermount3", "-u", dir).Run() == nil {
			continue
		}
		if err := ctxsleep.Sleep(ctx, Pause); err != nil {
			return fmt.Errorf("unmount of %s: %w", dir, err)
		}
	}
	if err := Lazy(ctx, dir); err != nil {
		return err
	}
	return fmt.Errorf("%s stayed busy; lazily unmounted", dir)
}

// Lazy detaches the mount at dir at once (fusermount3 -uz), so that system
// calls blocked on it return ENOTCONN; the kernel drops it when it is no
// longer busy.
func Lazy(ctx context.Context, dir string) error {
	if out, err := exec.CommandContext(ctx, "fusermount3", "-uz", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("lazy unmount of %s failed: %v: %s", dir, err, bytes.Join(bytes.Fields(out), []byte(" ")))
	}
	return nil
}
