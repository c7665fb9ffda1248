package main

import (
	"path/filepath"

	"github.com/moby/sys/mountinfo"
)

// mountAt returns the visible mount at mp (the last of several stacked on
// it), from /proc/self/mountinfo only: it never touches mp itself, which
// could hang on a frozen FUSE mount. ok is false when mp is not a
// mountpoint.
func mountAt(mp string) (m *mountinfo.Info, ok bool, err error) {
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(filepath.Clean(mp)))
	if err != nil || len(mounts) == 0 {
		return nil, false, err
	}
	return mounts[len(mounts)-1], true, nil
}

// fencefsType is the filesystem type fencefs mounts show in mountinfo.
const fencefsType = "fuse.fencefs"
