package fusefs

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Ownership and mode rules of chown, chmod and utimens, as Linux applies
// them (inode_change_ok / setattr_prepare). With default_permissions (always
// on with allow_other) the kernel checks them before fencefs is asked; a
// mount without it gets the same answers from checkSetattr, which decides
// from the stored owner, group and mode and the caller's credentials.

// caller is who asked for a change: the FUSE request's uid and gid, and
// the supplementary groups of the calling process (read from /proc only
// when a rule needs them).
type caller struct {
	uid, gid uint32
	pid      uint32
	known    bool // false: no FUSE caller in the context (internal calls)
}

func callerOf(ctx context.Context) caller {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return caller{}
	}
	return caller{uid: c.Uid, gid: c.Gid, pid: c.Pid, known: true}
}

// privileged reports whether the caller may bypass the ownership rules:
// root, or an internal call that has no FUSE caller.
func (c caller) privileged() bool { return !c.known || c.uid == 0 }

// inGroup reports whether gid is the caller's group or one of the calling
// process's supplementary groups.
func (c caller) inGroup(gid uint32) bool {
	if c.gid == gid {
		return true
	}
	groups, err := procGroups(c.pid)
	if err != nil {
		return false
	}
	for _, g := range groups {
		if g == gid {
			return true
		}
	}
	return false
}

// procGroups reads the supplementary groups of process pid from
// /proc/PID/status ("Groups:" line).
func procGroups(pid uint32) ([]uint32, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Groups:")
		if !ok {
			continue
		}
		var out []uint32
		for _, field := range strings.Fields(rest) {
			if v, err := strconv.ParseUint(field, 10, 32); err == nil {
				out = append(out, uint32(v))
			}
		}
		return out, nil
	}
	return nil, sc.Err()
}

// setattrChange is the metadata part of one SETATTR request.
type setattrChange struct {
	mode, uid, gid uint32
	set            setattrFields // what the call changes
}

// setattrFields is the set of attributes one SETATTR changes.
type setattrFields uint8

const (
	chMode setattrFields = 1 << iota
	chUID
	chGID
	chMtime
	chAtime
	chMtimeNow // UTIME_NOW (the kernel sends the flag, go-fuse the time)
	chAtimeNow
)

// has reports whether one of the fields of f is set.
func (s setattrFields) has(f setattrFields) bool { return s&f != 0 }

func changeOf(in *fuse.SetAttrIn) setattrChange {
	var ch setattrChange
	mark := func(f setattrFields, ok bool) {
		if ok {
			ch.set |= f
		}
	}
	var ok bool
	ch.mode, ok = in.GetMode()
	mark(chMode, ok)
	ch.uid, ok = in.GetUID()
	mark(chUID, ok)
	ch.gid, ok = in.GetGID()
	mark(chGID, ok)
	_, ok = in.GetMTime()
	mark(chMtime, ok)
	_, ok = in.GetATime()
	mark(chAtime, ok)
	mark(chMtimeNow, in.Valid&fuse.FATTR_MTIME_NOW != 0)
	mark(chAtimeNow, in.Valid&fuse.FATTR_ATIME_NOW != 0)
	return ch
}

// checkSetattr applies Linux's rules to a change of a (the node's current
// attributes) asked for by c, and returns the mode to store (the requested
// one, with S_ISGID dropped where Linux drops it) or EPERM / EACCES:
//
//   - only root changes the owner (the owner may "change" it to itself);
//   - the group changes only by root, or by the owner to a group it is in;
//   - only the owner or root changes the mode (anyone may clear S_ISUID
//     and S_ISGID, as the kernel does on write); a non-root caller outside
//     the file's group cannot set S_ISGID (it is silently cleared);
//   - explicit times are set by the owner or root; "now" also by anyone
//     with write permission.
func checkSetattr(c caller, ch setattrChange, a posixAttr) (uint32, error) {
	mode := a.Mode&syscall.S_IFMT | ch.mode&0o7777
	if c.privileged() {
		return mode, nil
	}
	owner := c.uid == a.UID
	if ch.set.has(chUID) && !(owner && ch.uid == a.UID) {
		return 0, fmt.Errorf("%w: only root changes the owner", errPerm)
	}
	if ch.set.has(chGID) && !(owner && (ch.gid == a.GID || c.inGroup(ch.gid))) {
		return 0, fmt.Errorf("%w: the group changes only to a group the owner is in", errPerm)
	}
	if ch.set.has(chMode) {
		if !owner && !onlyDropsPriv(a.Mode, mode) {
			return 0, fmt.Errorf("%w: only the owner changes the mode", errPerm)
		}
		gid := a.GID
		if ch.set.has(chGID) {
			gid = ch.gid
		}
		if mode&syscall.S_ISGID != 0 && !c.inGroup(gid) {
			mode &^= syscall.S_ISGID
		}
	}
	if (ch.set.has(chMtime) || ch.set.has(chAtime)) && !owner {
		explicit := (ch.set.has(chMtime) && !ch.set.has(chMtimeNow)) || (ch.set.has(chAtime) && !ch.set.has(chAtimeNow))
		if explicit {
			return 0, fmt.Errorf("%w: only the owner sets explicit times", errPerm)
		}
		if !c.mayWrite(a) {
			return 0, fmt.Errorf("%w: setting the times to now needs write permission", syscall.EACCES)
		}
	}
	return mode, nil
}

// onlyDropsPriv reports whether the mode change from old to new only
// clears S_ISUID or S_ISGID: what the kernel asks for when a writer or a
// chown removes them (fuse_setattr, without FUSE_HANDLE_KILLPRIV), for any
// caller allowed to write.
func onlyDropsPriv(old, new uint32) bool {
	const priv = syscall.S_ISUID | syscall.S_ISGID
	return new&^priv == old&^priv && new&priv&^old == 0
}

// mayWrite reports whether the mode bits of a grant c write permission.
func (c caller) mayWrite(a posixAttr) bool {
	switch {
	case c.uid == a.UID:
		return a.Mode&0o200 != 0
	case c.inGroup(a.GID):
		return a.Mode&0o020 != 0
	}
	return a.Mode&0o002 != 0
}

// killPrivOnChown clears S_ISUID, and S_ISGID when group-executable, of a
// non-directory whose owner or group changes without a new mode in the
// same request, as Linux does for every caller (root included).
func killPrivOnChown(ch setattrChange, a *posixAttr) {
	if ch.set.has(chMode) || !(ch.set.has(chUID) || ch.set.has(chGID)) || a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return
	}
	a.Mode &^= syscall.S_ISUID
	if a.Mode&0o010 != 0 {
		a.Mode &^= syscall.S_ISGID
	}
}

// Directory times. Adding or removing an entry sets the directory's mtime
// and ctime, as on ext4 — in the mount's memory only (dirNode.changed): a
// stored update would be one more conditional write of the directory's
// marker per create or unlink, which parallel creates in one directory
// would serialise on (and an implicit directory has no marker to update).
// Other mounts, and this one after a remount, see the stored times; the
// next chmod, chown or utimens of the directory stores the newer mtime.

// withEntryChange returns a with the mtime and ctime moved up to changed.
func withEntryChange(a posixAttr, changed time.Time) posixAttr {
	if changed.After(a.Mtime) {
		a.Mtime = changed
	}
	if changed.After(a.Ctime) {
		a.Ctime = changed
	}
	return a
}
