package fusefs

import "fmt"

// checkInvariantsLocked panics when the file node's state is one no code
// path may leave (as gcsfuse checks its inodes). It runs only in -race
// builds (the tests: invariantChecks), after every change of the state it
// checks. LOCKS_REQUIRED(n.mu)
func (n *fileNode) checkInvariantsLocked() {
	if !invariantChecks {
		return
	}
	fail := func(format string, args ...any) {
		key, _ := n.key()
		panic(fmt.Sprintf("fusefs: file node %q: %s (dirty=%v pending=%v unlinked=%v open=%d size=%d)",
			key, fmt.Sprintf(format, args...), n.state.has(stDirty), n.pending, n.unlinked, n.openCount, n.size))
	}
	switch {
	case n.openCount < 0:
		fail("negative open count")
	case n.size < 0:
		fail("negative size")
	case n.pending && !n.state.has(stDirty) && !n.unlinked:
		// A file created here and never stored is dirty until its first
		// commit, or unlinked once that cannot happen.
		fail("pending but neither dirty nor unlinked")
	case n.stageErr != nil && !n.state.has(stDirty):
		fail("a failed staging write on a clean node")
	case n.state.has(stOpenChangeOnly) && !n.state.has(stDirty):
		fail("an open-time change on a clean node")
	case n.state.has(stDirty) != (n.dirtySince.Load() != 0):
		fail("dirty and dirtySince disagree")
	}
	if n.state.has(stDirty) {
		n.fsys.nodesMu.Lock()
		_, tracked := n.fsys.staged[n]
		n.fsys.nodesMu.Unlock()
		if !tracked {
			fail("dirty but not tracked for unmount")
		}
	}
}
