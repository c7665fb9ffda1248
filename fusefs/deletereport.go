package fusefs

// Who is told that an acknowledged delete failed (deletewb.go). A failure
// is kept by the key of the directory the name left, never on the
// directory's node: the kernel may forget that inode before anyone fsyncs
// it — the refusal that fenced the mount drops every kernel entry
// (activate.go), and nothing else holds a directory nobody has open — and
// the node it looks up next must report the failure all the same. The
// records follow the directory through a rename (renameDir) and end with
// its rmdir.
//
// A failure goes, as Linux reports a writeback error, to the next fsync or
// rmdir of anyone (rm, then sync) and, until it has, and besides, to the
// next one of the process whose unlink acknowledged it, once each. So a
// process told its unlink succeeded always learns that the delete did not
// land, even when another process's fsync reported it first. A failure
// whose process has exited is owed to nobody in particular: it goes to the
// next fsync of anyone, if none reported it yet, and is then dropped.

import (
	"context"
	"strings"
)

// deleteFailure is an acknowledged delete that failed, the process
// (thread group) whose unlink acknowledged it (0 when it cannot be told),
// and whether an fsync reported it yet.
type deleteFailure struct {
	err  error
	tgid uint32
	seen bool
}

// maxDeleteFailures bounds a directory's unreported failures; past it a
// failure is reported to the next fsync of anyone.
const maxDeleteFailures = 1024

// parentKey is the key of the directory holding key: its prefix up to the
// last "/" ("" for an entry of the bucket's root without a mount prefix),
// as nodeBase.key names a directory.
func parentKey(key string) string {
	return key[:strings.LastIndex(key, "/")+1]
}

// recordFailure keeps f for the next fsync of the directory dirKey.
// LOCKS_REQUIRED(w.mu)
func (w *deleteWriteback) recordFailureLocked(dirKey string, f deleteFailure) {
	fs := w.failures[dirKey]
	if len(fs) >= maxDeleteFailures {
		f.tgid = 0
		fs = fs[:maxDeleteFailures-1]
	}
	w.failures[dirKey] = append(fs, f)
}

// report returns the first failure among the deletes of the directory
// dirKey's entries to report to process me (0: unknown, told everything)
// and forgets those it owes nobody any longer (see above). A nil w (no
// write-back) has none.
func (w *deleteWriteback) report(me uint32, dirKey string) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	fs := w.failures[dirKey]
	var first error
	kept := fs[:0]
	for _, f := range fs {
		mine := f.tgid == 0 || me == 0 || f.tgid == me
		if !mine && tgidOf(f.tgid) != f.tgid { // its process exited
			if f.seen {
				continue // reported, and owed to nobody now
			}
			mine = true
		}
		if f.seen && !mine {
			kept = append(kept, f)
			continue
		}
		if first == nil {
			first = f.err
		}
		if !mine {
			f.seen = true // still owed to its own process
			kept = append(kept, f)
		}
	}
	clear(fs[len(kept):])
	if len(kept) == 0 {
		delete(w.failures, dirKey)
	} else {
		w.failures[dirKey] = kept
	}
	return first
}

// moveFailures makes the failures kept for directories at or below src
// (a prefix ending in "/") those of the same directories below dst: the
// directory was renamed. What dst's tree kept is dropped: it was replaced.
func (w *deleteWriteback) moveFailures(src, dst string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dropFailuresLocked(dst)
	for k, fs := range w.failures {
		if rest, ok := strings.CutPrefix(k, src); ok {
			delete(w.failures, k)
			w.failures[dst+rest] = fs
		}
	}
}

// dropFailures forgets the failures kept for directories at or below
// prefix: the directory is gone.
func (w *deleteWriteback) dropFailures(prefix string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dropFailuresLocked(prefix)
}

// LOCKS_REQUIRED(w.mu)
func (w *deleteWriteback) dropFailuresLocked(prefix string) {
	for k := range w.failures {
		if strings.HasPrefix(k, prefix) {
			delete(w.failures, k)
		}
	}
}

// syncDeletes waits for the acknowledged deletes of the entries of the
// directory dirKey (nodeBase.key) and returns the first failure of one to
// report to the caller (see above).
func (fsys *filesystem) syncDeletes(ctx context.Context, dirKey string) error {
	if err := fsys.deletes.waitDir(ctx, dirKey); ctx.Err() != nil {
		return err
	}
	return fsys.deletes.report(callerTgid(ctx), dirKey)
}
