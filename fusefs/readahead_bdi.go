package fusefs

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// kernelReadaheadKB is the kernel readahead set on the mount's backing
// device. The kernel starts every FUSE mount at 128 KiB (the INIT reply can
// only lower it), which splits a sequential read into 128 KiB READ requests
// served one or two at a time; a larger window lets the kernel send maxIO
// requests several at a time.
const kernelReadaheadKB = 1024

// bdiDir is where the kernel's backing-device settings live (a variable
// for tests).
var bdiDir = "/sys/class/bdi"

// raiseKernelReadahead sets the readahead of the mount at mountpoint to
// kb KiB unless it is larger already. It needs root (or a writable sysfs);
// when that is not allowed it logs and leaves the kernel's default. It
// stats the mountpoint, which this process serves: the mount must be up.
func raiseKernelReadahead(mountpoint string, kb int, log *slog.Logger) {
	path, err := bdiReadaheadPath(mountpoint)
	if err == nil {
		err = raiseReadaheadFile(path, kb)
	}
	switch {
	case err == nil:
		log.Debug("kernel readahead set", "path", path, "kb", kb)
	case errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EROFS):
		log.Info("cannot raise the kernel readahead of the mount (needs root); sequential reads are slower", "path", path, "err", err)
	default:
		log.Warn("cannot raise the kernel readahead of the mount; sequential reads are slower", "path", path, "err", err)
	}
}

// fuseSuperMagic is statfs's f_type of a FUSE mount.
const fuseSuperMagic = 0x65735546

// bdiReadaheadPath is the read_ahead_kb file of the device of the FUSE
// mount at mountpoint. It fails when mountpoint is not a FUSE mount (then
// the device would be the one of the filesystem below).
func bdiReadaheadPath(mountpoint string) (string, error) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(mountpoint, &sfs); err != nil {
		return "", fmt.Errorf("statfs %s: %w", mountpoint, err)
	}
	if sfs.Type != fuseSuperMagic {
		return "", fmt.Errorf("%s is not a FUSE mount (filesystem type %#x)", mountpoint, sfs.Type)
	}
	var st unix.Stat_t
	if err := unix.Stat(mountpoint, &st); err != nil {
		return "", fmt.Errorf("stat %s: %w", mountpoint, err)
	}
	return fmt.Sprintf("%s/%d:%d/read_ahead_kb", bdiDir, unix.Major(st.Dev), unix.Minor(st.Dev)), nil
}

// raiseReadaheadFile writes kb to a read_ahead_kb file unless it holds a
// value at least as large.
func raiseReadaheadFile(path string, kb int) error {
	cur, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(strings.TrimSpace(string(cur))); err == nil && n >= kb {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(strconv.Itoa(kb))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}
