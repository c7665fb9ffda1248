package fusefs

import "strings"

// fileState is what a regular file's content is beyond its bytes: whether
// the bucket lacks a change, whether the file exists there at all, and how
// the next commit may be made. It is a set of the flags below, each set and
// cleared by the transitions of fileContent named in its comment.
// GUARDED_BY(fileContent.mu).
//
// Invariants (fileContent.checkInvariantsLocked): stOpenChangeOnly implies
// stDirty; stPending implies stDirty or stUnlinked; stDirty is set exactly
// while fileContent.dirtySince is not 0.
type fileState uint8

const (
	// stDirty: local changes (content or metadata) not committed. Set by
	// markDirtyLocked, cleared by setCleanLocked.
	stDirty fileState = 1 << iota
	// stPending: created by this mount and never committed: no object yet
	// (created); cleared by the first commit that stores it.
	stPending
	// stUnlinked: the name is gone (unlinked, renamed over, or a create
	// that found the name taken): commits store nothing, fstat shows
	// nlink 0 (unlink). Never cleared.
	stUnlinked
	// stOpenChangeOnly: the only uncommitted change is what an open made
	// (a new empty file, or an O_TRUNC to 0), with nothing written since.
	// A handle's first FLUSH then commits nothing (see fileHandle.Flush).
	// Cleared by every other change (markDirtyLocked) and by setCleanLocked.
	stOpenChangeOnly
	// stReplacing: the staged content was written from empty (O_TRUNC or a
	// truncate to 0) and uses nothing of the base version, so its commit
	// is a replacement (fencing.Guard.Replace: a refusal because an older
	// epoch changed the object is retried on the current version). Cleared
	// by a commit and by drop.
	stReplacing
	// stNoUpload: an upload while writing was dropped: none starts until
	// the next commit (setCleanLocked clears it).
	stNoUpload
	// stSpent: the staging file had parts released and its content is now
	// committed: it is dropped before anything uses it again
	// (dropSpentLocked, file_content_body.go).
	stSpent
)

// has reports whether every flag of f is set.
func (s fileState) has(f fileState) bool { return s&f == f }

// any reports whether one of the flags of f is set.
func (s fileState) any(f fileState) bool { return s&f != 0 }

// set sets (on) or clears the flags of f.
func (s *fileState) set(f fileState, on bool) {
	if on {
		*s |= f
	} else {
		*s &^= f
	}
}

// String names the flags set, for invariant failures and debugging.
func (s fileState) String() string {
	names := []string{"dirty", "pending", "unlinked", "open-change-only", "replacing", "no-upload", "spent"}
	var out []string
	for i, name := range names {
		if s.has(1 << i) {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return "clean"
	}
	return strings.Join(out, "|")
}
