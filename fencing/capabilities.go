package fencing

import (
	"github.com/fencefs/fencefs/objstore"
)

// ProbeDir returns the directory under prefix where fencefs runs the
// storage capability probe (objstore.Probe): inside the protocol directory,
// so that filesystems hide its scratch keys.
func ProbeDir(prefix string) string { return prefix + ProtocolDir + "/probe/" }

// fastRequires is what fast fencing depends on: every conditional write.
// Conditional DELETE is not among them: without it deletes become
// tombstones (TombstoneDeletes).
var fastRequires = []objstore.Capability{
	objstore.CheckIfNoneMatchCreate, objstore.CheckIfMatchCAS, objstore.CheckIfMatchMissingRefused,
	objstore.CheckConditionalComplete, objstore.CheckConditionalCopyDest,
	objstore.CheckParallelCreateOneWinner,
}

// Requires returns the storage capabilities mode depends on: fast needs
// every conditional write, strict also read-after-write listings (its
// intent journals), off nothing. The empty mode is strict, as in Config.
func Requires(mode Mode) []objstore.Capability {
	switch mode {
	case ModeOff:
		return nil
	case ModeFast:
		return append([]objstore.Capability(nil), fastRequires...)
	}
	return append(append([]objstore.Capability(nil), fastRequires...), objstore.CheckStrongListAfterWrite)
}

// CheckStorage returns nil if a store with caps can run mode, else an error
// naming each missing capability and why its check failed (or why the
// probe did not complete).
func CheckStorage(mode Mode, caps objstore.Capabilities) error {
	return caps.Require(Requires(mode)...)
}

// TombstoneDeletes reports whether, on a store with caps, deletes must be
// written as tombstones (Config.TombstoneDeletes) because DELETE ignores
// its condition.
func TombstoneDeletes(caps objstore.Capabilities) bool {
	return !caps.Has(objstore.CheckConditionalDelete)
}
