package fusefs

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/fencefs/fencefs/fencing"
)

// Control attributes on the mount root.
//
//	user.fencefs.token         the bound token ("0" when unbound); setting it
//	                           to N (or "auto") binds a new token
//	user.fencefs.epoch         the newest epoch seen in the bucket's register
//	user.fencefs.state         unbound|sweeping|active|fenced|off
//	user.fencefs.holder        this mount's holder id
//	user.fencefs.epoch_holder  the holder of that epoch
//	user.fencefs.reason        why the mount is fenced ("" otherwise)
//	user.fencefs.dirty_files   files with changes not yet stored (what an
//	                           unmount or kill now would have to commit or lose)
//	user.fencefs.staging_bytes bytes held in staging files in the cache directory
//
// All but the token are read-only (EPERM).
const (
	ctlToken       = xattrControlPrefix + "token"
	ctlEpoch       = xattrControlPrefix + "epoch"
	ctlState       = xattrControlPrefix + "state"
	ctlHolder      = xattrControlPrefix + "holder"
	ctlEpochHolder = xattrControlPrefix + "epoch_holder"
	ctlReason      = xattrControlPrefix + "reason"
	ctlDirty       = xattrControlPrefix + "dirty_files"
	ctlStaging     = xattrControlPrefix + "staging_bytes"
)

var controlNames = []string{ctlToken, ctlEpoch, ctlState, ctlHolder, ctlEpochHolder, ctlReason, ctlDirty, ctlStaging}

// status returns the Guard's status (a read-only mount without a Guard is
// unbound).
func (fsys *filesystem) status() fencing.Status {
	if fsys.guard == nil {
		return fencing.Status{State: fencing.StateUnbound}
	}
	return fsys.guard.Status()
}

// controlGet returns the value of a control attribute. ok is false for a
// name that is not one.
func (fsys *filesystem) controlGet(name string) (val []byte, ok bool, err error) {
	if !strings.HasPrefix(name, xattrControlPrefix) {
		return nil, false, nil
	}
	st := fsys.status()
	switch name {
	case ctlToken:
		return formatUint(st.Token), true, nil
	case ctlEpoch:
		return formatUint(st.Epoch), true, nil
	case ctlState:
		return []byte(st.State), true, nil
	case ctlHolder:
		return []byte(st.Holder), true, nil
	case ctlEpochHolder:
		return []byte(st.EpochHolder), true, nil
	case ctlReason:
		return []byte(st.Reason), true, nil
	case ctlDirty:
		return formatUint(uint64(max(fsys.dirtyFiles.Load(), 0))), true, nil
	case ctlStaging:
		return formatUint(uint64(max(fsys.stagingBytes.Load(), 0))), true, nil
	}
	return nil, true, fmt.Errorf("%w: %s", errNoAttr, name)
}

// parseToken reads a value written to user.fencefs.token: a positive decimal
// number, or "auto" (the register issues the next epoch). Surrounding blanks
// and a trailing newline are ignored.
func parseToken(v []byte) (uint64, error) {
	s := strings.TrimSpace(string(v))
	if s == "auto" {
		return 0, nil
	}
	t, err := strconv.ParseUint(s, 10, 64)
	if err != nil || t == 0 {
		return 0, fmt.Errorf("%w: token %q is not a positive number or \"auto\"", fencing.ErrBadToken, s)
	}
	return t, nil
}

// controlSet handles setxattr on a control attribute. Binding failures are
// logged with the reason (by the caller's errno) and answered EINVAL (a
// token that can never bind) or EROFS (a newer epoch holds the bucket).
func (fsys *filesystem) controlSet(ctx context.Context, name string, value []byte) error {
	if name != ctlToken {
		if _, _, err := fsys.controlGet(name); err != nil {
			return fmt.Errorf("%w: %s is not a control attribute", errPerm, name)
		}
		return fmt.Errorf("%w: %s is read-only", errPerm, name)
	}
	if fsys.opts.ReadOnly || fsys.guard == nil {
		return fmt.Errorf("%w: mounted read-only, cannot bind a token", fencing.ErrReadOnly)
	}
	tok, err := parseToken(value)
	if err != nil {
		return err
	}
	got, err := fsys.guard.Bind(ctx, tok)
	if err != nil {
		return fmt.Errorf("bind token %s: %w", strings.TrimSpace(string(value)), err)
	}
	fsys.log.Info("fencing token bound", "token", got)
	fsys.noteStatus(fsys.guard.Status())
	return nil
}
