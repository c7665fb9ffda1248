package fusefs

// What the mount holds, and under which binding (docs/DESIGN.md, the
// section of that name): every change this mount acknowledged but has not
// stored yet carries the fencing binding it was made under, and is stored
// only under it or a binding that followed it directly (fencing.Under: the
// Guard admits or refuses it, once, at its door). The kinds, each stored by
// its own queue but all through this rule:
//
//   - a file's staged content and truncation, its streamed upload and a
//     commit whose outcome stayed unknown (fileContent.bind): stored by
//     close, fsync, the last release or unmount;
//   - an attribute change (nodeBase.attrBind, attrwb.go): stored a moment
//     later, or by fsync, close, rename or unmount;
//   - an acknowledged delete (pendingDelete.bind, deletewb.go): sent at
//     once in the background; the directory's fsync or rmdir reports it;
//   - a synchronous mutation (a rename's copies and deletes, a create,
//     mkdir): bound to the binding current when the FUSE request began
//     (mutctx).
//
// A change whose binding another holder's epoch superseded is refused with
// EROFS (fencing.ErrSuperseded) when it would be stored, dropped, and the
// file shows its stored version again; a change made after the new bind
// starts from that stored version.

import (
	"context"
	"errors"

	"github.com/fencefs/fencefs/fencing"
)

// binding returns the binding a change made now is made under (the zero
// Binding without a Guard, or in mode off).
func (fsys *filesystem) binding() fencing.Binding {
	if fsys.guard == nil {
		return fencing.Binding{}
	}
	return fsys.guard.Binding()
}

// superseded reports whether a change held under b can no longer be stored:
// the mount is bound to another line of bindings now.
func (fsys *filesystem) superseded(b fencing.Binding) bool {
	if b.IsZero() {
		return false
	}
	cur := fsys.binding()
	return !cur.IsZero() && !cur.Same(b)
}

// heldCtx returns ctx for storing a change held under b.
func heldCtx(ctx context.Context, b fencing.Binding) context.Context {
	return fencing.Under(ctx, b)
}

// isFencedRefusal reports a refusal because the change's binding is no
// longer the mount's (fenced, or superseded by another holder's epoch):
// the change is dropped, never tried again.
func isFencedRefusal(err error) bool {
	return errors.Is(err, fencing.ErrFenced)
}
