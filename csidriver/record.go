package csidriver

// What the driver remembers of each published volume, on the node's disk
// (--state-dir), so that a restarted driver knows its mounts again: one
// directory per target path holding record.json, the mount's cache
// directory and its log.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// record is one published volume.
type record struct {
	VolumeID string `json:"volume_id"`
	Target   string `json:"target"`
	// Identity is volumeSpec.Identity of the publish, compared with a
	// repeated publish of the target ("" for a mount adopted without a
	// record: no publish is the same as it).
	Identity string `json:"identity"`
	// SingleWriter: the access mode was SINGLE_NODE_SINGLE_WRITER.
	SingleWriter bool `json:"single_writer"`
	ReadOnly     bool `json:"read_only"`
	// Pid and Start identify the fencefs process serving the mount (its
	// start time in clock ticks since boot, /proc/PID/stat field 22, so
	// that a reused pid is not taken for it).
	Pid   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// volumeDir is the directory of the volume published at target under
// stateDir: named by a hash of the path, which may be long.
func volumeDir(stateDir, target string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(target)))
	return filepath.Join(stateDir, "volumes", hex.EncodeToString(sum[:12]))
}

// Files of a volume directory.
const (
	recordFile = "record.json"
	cacheDir   = "cache"
	logFile    = "fencefs.log"
)

// saveRecord writes r into dir atomically (a rename), readable by root
// only.
func saveRecord(dir string, r record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, recordFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, recordFile))
}

// loadRecords reads every record under stateDir; a directory whose record
// is missing or unreadable is returned in bad (a publish that died before
// its record was written).
func loadRecords(stateDir string) (recs []record, bad []string, err error) {
	dirs, err := os.ReadDir(filepath.Join(stateDir, "volumes"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	for _, d := range dirs {
		dir := filepath.Join(stateDir, "volumes", d.Name())
		b, err := os.ReadFile(filepath.Join(dir, recordFile))
		var r record
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		if err != nil || r.Target == "" {
			bad = append(bad, dir)
			continue
		}
		recs = append(recs, r)
	}
	return recs, bad, nil
}

// procStart returns the start time of process pid (/proc/PID/stat field
// 22) and whether it has ended: a zombie, or a process inside exit(2)
// (PF_EXITING in field 9), which has already released its memory or is
// about to close its descriptors — a FUSE server's /dev/fuse among them,
// so that its mount answers ECONNABORTED before it becomes a zombie. ok is
// false when there is no such process.
func procStart(pid int) (start uint64, ended, ok bool) {
	if pid <= 0 {
		return 0, false, false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false, false
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it follow the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3
	if len(f) < 20 {
		return 0, false, false
	}
	start, err = strconv.ParseUint(f[19], 10, 64) // field 22
	if err != nil {
		return 0, false, false
	}
	flags, err := strconv.ParseUint(f[6], 10, 64) // field 9
	if err != nil {
		return 0, false, false
	}
	const pfExiting = 0x4 // PF_EXITING, include/linux/sched.h
	return start, f[0] == "Z" || f[0] == "X" || flags&pfExiting != 0, true
}

// alive reports whether the fencefs process of r still runs.
func (r record) alive() bool {
	start, ended, ok := procStart(r.Pid)
	return ok && !ended && start == r.Start
}

// makeTarget creates the target directory (its parent must exist, as the
// CO ensures), or checks that an existing one is a directory.
func makeTarget(target string) error {
	err := os.Mkdir(target, 0o750)
	if err == nil || !errors.Is(err, os.ErrExist) {
		if err != nil {
			return fmt.Errorf("cannot create target path %s: %v", target, unwrap(err))
		}
		return nil
	}
	var st unix.Stat_t
	if err := unix.Lstat(target, &st); err != nil {
		return fmt.Errorf("target path %s: %v", target, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return errNotDir
	}
	return nil
}

var errNotDir = errors.New("not a directory")

func unwrap(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
