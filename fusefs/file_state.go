package fusefs

// fileState is what a regular file's uncommitted content is, beyond its
// bytes: whether the bucket lacks a change, and how the next commit may be
// made. It is a set of the flags below, each set and cleared by the
// transitions of fileNode named in its comment. GUARDED_BY(fileNode.mu).
//
// Invariants (checkInvariantsLocked): stOpenChangeOnly implies stDirty;
// stDirty is set exactly while fileNode.dirtySince is not 0.
type fileState uint8

const (
	// stDirty: local changes (content or metadata) not committed. Set by
	// markDirtyLocked, cleared by setCleanLocked.
	stDirty fileState = 1 << iota
	// stOpenChangeOnly: the only uncommitted change is what an open made
	// (a new empty file, or an O_TRUNC to 0), with nothing written since.
	// A handle's first FLUSH then commits nothing (see fileHandle.Flush).
	// Cleared by every other change (markDirtyLocked) and by setCleanLocked.
	stOpenChangeOnly
	// stReplacing: the staged content was written from empty (O_TRUNC or a
	// truncate to 0) and uses nothing of the base version, so its commit
	// is a replacement (fencing.Guard.Replace: a refusal because an older
	// epoch changed the object is retried on the current version). Cleared
	// by a commit and by dropStage.
	stReplacing
	// stNoStream: a streamed upload was dropped: none starts until the
	// next commit (setCleanLocked clears it).
	stNoStream
	// stSpent: the staging file had parts released and its content is now
	// committed: it is dropped before anything uses it again
	// (dropSpentStageLocked, commit.go).
	stSpent
)

// has reports whether every flag of f is set.
func (s fileState) has(f fileState) bool { return s&f == f }

// set sets (on) or clears the flags of f.
func (s *fileState) set(f fileState, on bool) {
	if on {
		*s |= f
	} else {
		*s &^= f
	}
}
