package fusefs

// When a FLUSH need not commit.
//
// The kernel sends FLUSH at every close(2) of a descriptor, also when the
// same open file stays open through another descriptor: a shell redirect
// (`echo x > f`, `cmd > f`, `: > f`) and GNU dd open the file, dup2 it onto
// stdout and close the first descriptor before writing anything. Committing
// at that close stores an empty object (one commit more per file, and for
// an O_TRUNC rewrite an emptied object in the bucket until the data
// follows; a crash in between would leave it empty).
//
// So a FLUSH commits nothing when (1) the file's only uncommitted change is
// the open's own — a new empty file, or an O_TRUNC — with no byte written
// since, and (2) the process closing the descriptor still has another
// descriptor open on the same file of this mount (read from
// /proc/PID/fdinfo, which never touches the mount). The change is then
// committed by the next close(2) that is the process's last descriptor on
// the file, by fsync, or when the last descriptor anywhere goes (RELEASE).
// In every other case close(2) commits, so "a file is in the bucket when
// close(2) returns" holds for every close after which the process can no
// longer write to it; an empty new file is in the bucket when the
// process's last descriptor on it is closed. When fdinfo cannot be read
// (another user's process without the right to read it, no /proc), FLUSH
// commits.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"

	"github.com/moby/sys/mountinfo"
)

// mountID returns the kernel's id of the mount at dir (as /proc/PID/fdinfo
// shows it in mnt_id), 0 if unknown.
func mountID(dir string) int {
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
	if err != nil || len(mounts) != 1 {
		return 0
	}
	return mounts[0].ID
}

// stillOpenIn reports whether process pid holds a descriptor on inode ino
// of this mount (the one being closed is already out of its table).
func (fsys *filesystem) stillOpenIn(pid uint32, ino uint64) bool {
	mnt := fsys.mntID.Load()
	if mnt == 0 && fsys.mountDir != "" {
		// The kernel mount serves requests as soon as it exists, before
		// Mount stores its id: a shell or dd started at once must not
		// have its dup2 close commit an emptied file.
		mnt = int64(mountID(fsys.mountDir))
		fsys.mntID.CompareAndSwap(0, mnt)
	}
	if pid == 0 || mnt == 0 {
		return false
	}
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil {
			continue // closed meanwhile
		}
		if gotMnt, gotIno, ok := parseFdinfo(b); ok && gotMnt == int(mnt) && gotIno == ino {
			return true
		}
	}
	return false
}

// parseFdinfo reads the mnt_id and ino lines of a /proc/PID/fdinfo/FD file.
func parseFdinfo(b []byte) (mnt int, ino uint64, ok bool) {
	var haveMnt, haveIno bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, found := bytes.Cut(sc.Bytes(), []byte(":"))
		if !found {
			continue
		}
		v = bytes.TrimSpace(v)
		switch string(k) {
		case "mnt_id":
			n, err := strconv.Atoi(string(v))
			mnt, haveMnt = n, err == nil
		case "ino":
			n, err := strconv.ParseUint(string(v), 10, 64)
			ino, haveIno = n, err == nil
		}
	}
	return mnt, ino, haveMnt && haveIno
}
