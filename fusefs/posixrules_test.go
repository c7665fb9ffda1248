package fusefs

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// TestSetattrFollowsLinuxOwnershipRules checks the rules a mount without
// default_permissions applies itself (the kernel applies the same ones with
// it): who may change the owner, the group, the mode and the times, and
// when S_ISUID/S_ISGID are dropped.
func TestSetattrFollowsLinuxOwnershipRules(t *testing.T) {
	const owner, other, grp, othergrp = 1000, 2000, 100, 200
	file := posixAttr{Mode: syscall.S_IFREG | 0o644, UID: owner, GID: grp}
	suid := posixAttr{Mode: syscall.S_IFREG | 0o6755, UID: owner, GID: grp}
	dir := posixAttr{Mode: syscall.S_IFDIR | 0o6755, UID: owner, GID: grp}
	worldWritable := posixAttr{Mode: syscall.S_IFREG | 0o666, UID: owner, GID: grp}
	root := caller{uid: 0, gid: 0, known: true}
	own := caller{uid: owner, gid: grp, known: true}
	// pid 0 has no /proc entry: no supplementary groups.
	stranger := caller{uid: other, gid: othergrp, known: true}
	ownOutsideGroup := caller{uid: owner, gid: othergrp, known: true}

	mode := func(m uint32) setattrChange { return setattrChange{mode: m, set: chMode} }
	chown := func(u uint32) setattrChange { return setattrChange{uid: u, set: chUID} }
	chgrp := func(g uint32) setattrChange { return setattrChange{gid: g, set: chGID} }
	explicitTimes := setattrChange{set: chMtime | chAtime}
	nowTimes := setattrChange{set: chMtime | chAtime | chMtimeNow | chAtimeNow}

	cases := []struct {
		name     string
		c        caller
		ch       setattrChange
		a        posixAttr
		wantErr  error
		wantMode uint32 // checked when ch.set.has(chMode) and no error
	}{
		{"root gives a file away", root, chown(other), file, nil, 0},
		{"the owner cannot give a file away", own, chown(other), file, errPerm, 0},
		{"the owner may chown to itself", own, chown(owner), file, nil, 0},
		{"a stranger cannot chown to the owner", stranger, chown(owner), file, errPerm, 0},
		{"the owner keeps the group", own, chgrp(grp), file, nil, 0},
		{"the owner cannot chgrp to a group it is not in", own, chgrp(othergrp), file, errPerm, 0},
		{"a stranger cannot chgrp to its own group", stranger, chgrp(othergrp), file, errPerm, 0},
		{"root chgrps anywhere", root, chgrp(othergrp), file, nil, 0},
		{"the owner chmods", own, mode(0o600), file, nil, syscall.S_IFREG | 0o600},
		{"a stranger cannot chmod", stranger, mode(0o777), file, errPerm, 0},
		{"anyone may drop suid and sgid (kill-priv on write)", stranger, mode(0o755), suid, nil, syscall.S_IFREG | 0o755},
		{"dropping suid does not let a stranger add bits", stranger, mode(0o757), suid, errPerm, 0},
		{"sgid outside the file's group is cleared", ownOutsideGroup, mode(0o2755), file, nil, syscall.S_IFREG | 0o755},
		{"sgid inside the file's group is kept", own, mode(0o2755), file, nil, syscall.S_IFREG | 0o2755},
		{"root sets sgid anywhere", root, mode(0o2755), file, nil, syscall.S_IFREG | 0o2755},
		{"a directory keeps its type bits", own, mode(0o700), dir, nil, syscall.S_IFDIR | 0o700},
		{"the owner sets explicit times", own, explicitTimes, file, nil, 0},
		{"a stranger cannot set explicit times", stranger, explicitTimes, worldWritable, errPerm, 0},
		{"a stranger with write permission sets the times to now", stranger, nowTimes, worldWritable, nil, 0},
		{"a stranger without write permission cannot touch", stranger, nowTimes, file, syscall.EACCES, 0},
		{"internal calls have no caller and pass", caller{}, chown(other), file, nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := checkSetattr(tc.c, tc.ch, tc.a)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err == nil && tc.ch.set.has(chMode) && got != tc.wantMode {
				t.Fatalf("mode = %#o, want %#o", got, tc.wantMode)
			}
		})
	}
}

// TestChownDropsSetIDBitsOfNonDirectories checks killPrivOnChown: a chown
// without a mode clears S_ISUID and (when group-executable) S_ISGID of
// files, for every caller, and leaves directories and chmods alone.
func TestChownDropsSetIDBitsOfNonDirectories(t *testing.T) {
	cases := []struct {
		name string
		ch   setattrChange
		mode uint32
		want uint32
	}{
		{"chown clears suid and sgid of an executable", setattrChange{set: chUID}, syscall.S_IFREG | 0o6755, syscall.S_IFREG | 0o755},
		{"chgrp clears them too", setattrChange{set: chGID}, syscall.S_IFREG | 0o6755, syscall.S_IFREG | 0o755},
		{"sgid without group exec is mandatory locking: kept", setattrChange{set: chUID}, syscall.S_IFREG | 0o6745, syscall.S_IFREG | 0o2745},
		{"directories keep them", setattrChange{set: chUID}, syscall.S_IFDIR | 0o6755, syscall.S_IFDIR | 0o6755},
		{"a chown with a mode sets that mode instead", setattrChange{set: chUID | chMode}, syscall.S_IFREG | 0o6755, syscall.S_IFREG | 0o6755},
		{"times alone change nothing", setattrChange{set: chMtime}, syscall.S_IFREG | 0o6755, syscall.S_IFREG | 0o6755},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := posixAttr{Mode: tc.mode}
			killPrivOnChown(tc.ch, &a)
			if a.Mode != tc.want {
				t.Fatalf("mode = %#o, want %#o", a.Mode, tc.want)
			}
		})
	}
}

// TestCallerGroupsComeFromProc checks that supplementary groups are read
// from /proc/PID/status (this process's own groups).
func TestCallerGroupsComeFromProc(t *testing.T) {
	groups, err := os.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	got, err := procGroups(uint32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(groups) {
		t.Fatalf("groups from /proc = %v, want %v", got, groups)
	}
	for i, g := range groups {
		if got[i] != uint32(g) {
			t.Fatalf("groups from /proc = %v, want %v", got, groups)
		}
	}
	c := caller{uid: 1, gid: 1 << 30, pid: uint32(os.Getpid()), known: true}
	for _, g := range groups {
		if !c.inGroup(uint32(g)) {
			t.Fatalf("inGroup(%d) = false for a supplementary group", g)
		}
	}
}

// TestSetattrMutationReadsUtimeNow checks that UTIME_NOW reaches the rules
// as "now" (a writer may touch), not as an explicit time.
func TestSetattrMutationReadsUtimeNow(t *testing.T) {
	in := &fuse.SetAttrIn{}
	in.Valid = fuse.FATTR_MTIME | fuse.FATTR_MTIME_NOW | fuse.FATTR_ATIME
	in.Atime = uint64(time.Unix(5, 0).Unix())
	ch := changeOf(in)
	if !ch.set.has(chMtime) || !ch.set.has(chMtimeNow) || !ch.set.has(chAtime) || ch.set.has(chAtimeNow) {
		t.Fatalf("change = %+v, want mtime now and an explicit atime", ch)
	}
}
