package fusefs

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fencefs/fencefs/fencing"
)

// Control attributes on the mount root: the names `fencefs status` and
// `fencefs run` read and write.
//
// All but XattrToken are read-only (EPERM).
const (
	// XattrPrefix starts every control attribute's name.
	XattrPrefix = xattrControlPrefix
	// XattrToken is the bound token ("0" when unbound); setting it to N
	// (or "auto") binds a new token.
	XattrToken = XattrPrefix + "token"
	// XattrEpoch is the newest epoch seen in the bucket's register.
	XattrEpoch = XattrPrefix + "epoch"
	// XattrState is unbound, sweeping, active, fenced or off.
	XattrState = XattrPrefix + "state"
	// XattrHolder is this mount's holder id.
	XattrHolder = XattrPrefix + "holder"
	// XattrEpochHolder is the holder of that epoch.
	XattrEpochHolder = XattrPrefix + "epoch_holder"
	// XattrReason is why the mount is fenced ("" otherwise).
	XattrReason = XattrPrefix + "reason"
	// XattrBindError is why the last bind through XattrToken was refused,
	// with its time ("" after a bind that succeeded): the setxattr itself
	// can only answer an errno.
	XattrBindError = XattrPrefix + "bind_error"
	// XattrDirtyFiles counts files with changes not yet stored (what an
	// unmount or kill now would have to commit or lose).
	XattrDirtyFiles = XattrPrefix + "dirty_files"
	// XattrStagingBytes is the bytes held in staging files in the cache
	// directory.
	XattrStagingBytes = XattrPrefix + "staging_bytes"
	// XattrTombstones tells the tombstones (deleted keys other S3 clients
	// still list) the mount knows of, when the first goes, and how they
	// are removed (fencing.TombstoneStatus).
	XattrTombstones = XattrPrefix + "tombstones"
)

// ControlXattrs returns the name of every control attribute, state first.
func ControlXattrs() []string {
	return []string{XattrState, XattrToken, XattrEpoch, XattrHolder, XattrEpochHolder, XattrReason, XattrBindError, XattrDirtyFiles, XattrStagingBytes, XattrTombstones}
}

var controlNames = ControlXattrs()

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
	case XattrToken:
		return formatUint(st.Token), true, nil
	case XattrEpoch:
		return formatUint(st.Epoch), true, nil
	case XattrState:
		return []byte(st.State), true, nil
	case XattrHolder:
		return []byte(st.Holder), true, nil
	case XattrEpochHolder:
		return []byte(st.EpochHolder), true, nil
	case XattrReason:
		return []byte(st.Reason), true, nil
	case XattrBindError:
		if e := fsys.bindErr.Load(); e != nil {
			return []byte(*e), true, nil
		}
		return nil, true, nil
	case XattrDirtyFiles:
		return formatUint(uint64(max(fsys.dirtyFiles.Load(), 0))), true, nil
	case XattrStagingBytes:
		return formatUint(uint64(max(fsys.stagingBytes.Load(), 0))), true, nil
	case XattrTombstones:
		return []byte(fsys.tombstones()), true, nil
	}
	return nil, true, fmt.Errorf("%w: %s", errNoAttr, name)
}

// tombstones is the text of XattrTombstones: "N; the first goes at T;
// removed by …" ("" without a Guard).
func (fsys *filesystem) tombstones() string {
	if fsys.guard == nil {
		return ""
	}
	ts := fsys.guard.Tombstones()
	next := "none due"
	if !ts.NextRemoval.IsZero() {
		next = "the first goes at " + ts.NextRemoval.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%d; %s; removed by %s", ts.Known, next, ts.Removal)
}

// controlSet handles setxattr on a control attribute. Binding failures are
// logged with the reason (by the caller's errno) and answered EINVAL (a
// token that can never bind) or EROFS (a newer epoch holds the bucket).
func (fsys *filesystem) controlSet(ctx context.Context, name string, value []byte) error {
	if name != XattrToken {
		if _, _, err := fsys.controlGet(name); err != nil {
			return fmt.Errorf("%w: %s is not a control attribute", errPerm, name)
		}
		return fmt.Errorf("%w: %s is read-only", errPerm, name)
	}
	if fsys.opts.Access.ReadOnly || fsys.guard == nil {
		return fmt.Errorf("%w: mounted read-only, cannot bind a token", fencing.ErrReadOnly)
	}
	tok, err := fencing.ParseToken(string(value))
	if err == nil {
		tok, err = fsys.guard.Bind(ctx, tok)
	}
	if err != nil {
		err = fmt.Errorf("bind token %s: %w", strings.TrimSpace(string(value)), err)
		why := time.Now().UTC().Format(time.RFC3339) + ": " + err.Error()
		fsys.bindErr.Store(&why)
		return err
	}
	fsys.bindErr.Store(nil)
	fsys.log.Info("fencing token bound", "token", tok)
	fsys.noteStatus(fsys.guard.Status())
	return nil
}
