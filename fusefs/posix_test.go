package fusefs

import (
	"os"
	"sort"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"
)

// posixExcluded are the go-fuse posixtest cases that do not apply, and why.
var posixExcluded = map[string]string{
	"Link":             "hard links are not supported (ENOTSUP by design)",
	"LinkUnlinkRename": "uses hard links",
	// Extended attributes live in the object's S3 user metadata, 2 KiB in
	// all (meta.go); the case sets one of 8 KiB and expects E2BIG or success.
	"XAttrLarge": "an 8 KiB xattr exceeds the 2 KiB of S3 user metadata (E2BIG by design)",
	"Tmpfile":    "O_TMPFILE is not supported: an unnamed file has no key to be stored under",
	// Locks are the kernel's own (local to the mount, docs/DESIGN.md §3), with
	// POSIX semantics: two descriptors of one process never conflict. The
	// case expects a filesystem that implements locks per descriptor.
	"FcntlFlockLocksFile": "needs filesystem-implemented per-descriptor locks; fencefs leaves locking to the kernel",
	// A thousand rename/symlink flips: tests go-fuse's own open path more
	// than ours, and costs ~4000 conditional writes. Run with FENCEFS_LONG=1.
	"OpenSymlinkRace": "long; set FENCEFS_LONG=1",
}

// TestPosix runs the go-fuse POSIX conformance cases that apply to fencefs,
// each in its own directory of one mount.
func TestPosix(t *testing.T) {
	k := newKT(t, 4*time.Minute)
	m := k.mount(serveConfig{Token: 1})
	// The cases in posixExcluded do not apply to fencefs (not missing
	// prerequisites): they are left out of the run, and listed in the log.
	names := make([]string, 0, len(posixtest.All))
	for name := range posixtest.All {
		if why, ok := posixExcluded[name]; ok && !(name == "OpenSymlinkRace" && os.Getenv("FENCEFS_LONG") != "") {
			t.Logf("not run: %s (%s)", name, why)
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			dir := m.Path("posix-" + name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			posixtest.All[name](t, dir)
		})
	}
}
