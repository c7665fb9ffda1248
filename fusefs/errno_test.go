package fusefs

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
)

func TestToErrnoMapsEveryErrorClassToOneErrno(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("commit a/b: %w", err) }
	tests := []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"nil is success", nil, 0},
		{"fenced is EROFS", wrap(fencing.ErrFenced), syscall.EROFS},
		{"no token is EROFS", wrap(fencing.ErrReadOnly), syscall.EROFS},
		{"stale is ESTALE", wrap(fencing.ErrStale), syscall.ESTALE},
		{"unverifiable epoch is EIO", wrap(fencing.ErrUnverified), syscall.EIO},
		{"bad token is EINVAL", wrap(fencing.ErrBadToken), syscall.EINVAL},
		{"a spent token space is EOVERFLOW", wrap(fencing.ErrTokensSpent), syscall.EOVERFLOW},
		{"not found is ENOENT", wrap(objstore.ErrNotFound), syscall.ENOENT},
		{"failed precondition is ESTALE", wrap(objstore.ErrPrecondition), syscall.ESTALE},
		{"create over an existing name is EEXIST", wrap(errExist), syscall.EEXIST},
		{"conflict is EBUSY", wrap(objstore.ErrConflict), syscall.EBUSY},
		{"wrong credentials are EACCES", wrap(objstore.ErrAuth), syscall.EACCES},
		{"unavailable storage is EIO", wrap(objstore.ErrUnavailable), syscall.EIO},
		{"missing bucket is EIO", wrap(objstore.ErrNoBucket), syscall.EIO},
		{"invalid request is EINVAL", wrap(objstore.ErrInvalid), syscall.EINVAL},
		{"interrupted call is EINTR", wrap(context.Canceled), syscall.EINTR},
		{"deadline is EIO", wrap(context.DeadlineExceeded), syscall.EIO},
		{"non-empty directory is ENOTEMPTY", wrap(errNotEmpty), syscall.ENOTEMPTY},
		{"too large directory rename is EXDEV", wrap(errCrossDevice), syscall.EXDEV},
		{"hard link is ENOTSUP", wrap(errNotSupported), syscall.ENOTSUP},
		{"missing xattr is ENODATA", wrap(errNoAttr), syscall.ENODATA},
		{"oversized xattr is E2BIG", wrap(errTooBig), syscall.E2BIG},
		{"read-only control attribute is EPERM", wrap(errPerm), syscall.EPERM},
		{"an access to a released part of a streamed file is ESPIPE", wrap(errNotSequential), syscall.ESPIPE},
		{"a rename whose copy landed and whose delete was refused is EIO, not EROFS", wrap(fmt.Errorf("%w: %w", errHalfDone, fencing.ErrFenced)), syscall.EIO},
		{"a streamed upload that cannot be published is EIO", wrap(fmt.Errorf("%w: %w", errUploadLost, objstore.ErrUnavailable)), syscall.EIO},
		{"a plain errno passes through", wrap(syscall.ERANGE), syscall.ERANGE},
		{"an unknown error is EIO", errors.New("boom"), syscall.EIO},
		// A domain error wins over the storage error it wraps.
		{"stale wrapping a precondition is ESTALE", fmt.Errorf("%w: %w", fencing.ErrStale, objstore.ErrPrecondition), syscall.ESTALE},
		{"fenced wrapping not-found is EROFS", fmt.Errorf("%w: %w", fencing.ErrFenced, objstore.ErrNotFound), syscall.EROFS},
		{"unverified wrapping unavailable is EIO", fmt.Errorf("%w: %w", fencing.ErrUnverified, objstore.ErrUnavailable), syscall.EIO},
		{"stale wrapping exists is ESTALE", fmt.Errorf("%w: %w", fencing.ErrStale, errExist), syscall.ESTALE},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := toErrno(tt.err); got != tt.want {
				t.Fatalf("toErrno(%v) = %v (%d), want %v (%d)", tt.err, got, int(got), tt.want, int(tt.want))
			}
		})
	}
}
