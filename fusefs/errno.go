package fusefs

import (
	"context"
	"errors"
	"log/slog"
	"syscall"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
)

// toErrno is the one place that maps errors to errno values. Every FUSE
// method returns toErrno of its Go error (through filesystem.errno, which
// also logs the original error once). The mapping:
//
//	nil                                   0
//	fencing.ErrFenced, ErrReadOnly        EROFS   (a newer epoch exists / no token)
//	fencing.ErrStale                      ESTALE  (someone else changed the object)
//	fencing.ErrUnverified                 EIO     (the epoch register could not be read)
//	fencing.ErrTokensSpent                EOVERFLOW (auto found the register at MaxToken)
//	fencing.ErrBadToken                   EINVAL
//	objstore.ErrNotFound                  ENOENT
//	objstore.ErrPrecondition              ESTALE  (creates report errExist → EEXIST)
//	objstore.ErrConflict                  EBUSY
//	objstore.ErrAuth                      EACCES
//	objstore.ErrUnavailable, ErrNoBucket  EIO
//	objstore.ErrInvalid                   EINVAL
//	errNotSequential                      ESPIPE  (a released part of a file uploaded while written; file_content_upload.go)
//	context.Canceled                      EINTR   (the caller was interrupted)
//	context.DeadlineExceeded              EIO
//	a syscall.Errno                       itself
//	anything else                         EIO
//
// Order matters where an error wraps several sentinels: fencing's domain
// errors win over the storage error they may wrap.
func toErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	switch {
	case errors.Is(err, errHalfDone): // before the refusal it wraps: part of it landed
		return syscall.EIO
	case errors.Is(err, fencing.ErrFenced), errors.Is(err, fencing.ErrReadOnly):
		return syscall.EROFS
	case errors.Is(err, fencing.ErrStale):
		return syscall.ESTALE
	case errors.Is(err, fencing.ErrUnverified):
		return syscall.EIO
	case errors.Is(err, fencing.ErrTokensSpent):
		return syscall.EOVERFLOW
	case errors.Is(err, fencing.ErrBadToken):
		return syscall.EINVAL
	case errors.Is(err, errExist):
		return syscall.EEXIST
	case errors.Is(err, errNotEmpty):
		return syscall.ENOTEMPTY
	case errors.Is(err, errNotDir):
		return syscall.ENOTDIR
	case errors.Is(err, errIsDir):
		return syscall.EISDIR
	case errors.Is(err, errCrossDevice):
		return syscall.EXDEV
	case errors.Is(err, errNotSupported):
		return syscall.ENOTSUP
	case errors.Is(err, errInvalid):
		return syscall.EINVAL
	case errors.Is(err, errPerm):
		return syscall.EPERM
	case errors.Is(err, errNoAttr):
		return syscall.ENODATA
	case errors.Is(err, errTooBig):
		return syscall.E2BIG
	case errors.Is(err, errNameTooLong):
		return syscall.ENAMETOOLONG
	case errors.Is(err, errNotSequential):
		return syscall.ESPIPE
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, context.DeadlineExceeded):
		return syscall.EIO
	case errors.Is(err, objstore.ErrNotFound):
		return syscall.ENOENT
	case errors.Is(err, objstore.ErrPrecondition):
		return syscall.ESTALE
	case errors.Is(err, objstore.ErrConflict):
		return syscall.EBUSY
	case errors.Is(err, objstore.ErrAuth):
		return syscall.EACCES
	case errors.Is(err, objstore.ErrInvalid):
		return syscall.EINVAL
	case errors.Is(err, objstore.ErrUnavailable), errors.Is(err, objstore.ErrNoBucket):
		return syscall.EIO
	case errors.As(err, &errno):
		return errno
	}
	return syscall.EIO
}

// mutationErrno is errno for the failure of a call that changes the file
// system (open for writing, write, flush, fsync, setattr, create, mkdir,
// unlink, rename, setxattr …). A stale answer (ESTALE) there is first put to
// the Guard (fencing.Guard.Stale): when a newer epoch holds the bucket the
// call was a stale leader's, and its answer is EROFS like every other
// mutation of a stale leader (the Guard latches fenced); otherwise ESTALE
// stays. Reads never ask: they are never fenced.
func (fsys *filesystem) mutationErrno(ctx context.Context, op, key string, err error) syscall.Errno {
	if fsys.guard != nil && toErrno(err) == syscall.ESTALE {
		err = fsys.guard.Stale(ctx, op, key, err)
	}
	return fsys.errno(op, key, err)
}

// errno converts err with toErrno and logs the original error once: at debug
// level for the expected outcomes (ENOENT, ENODATA, EEXIST, ENOTSUP, …), at
// warning level for everything else, so that an EROFS or ESTALE a user sees
// always has a log line saying why. It counts the errno and does nothing
// else: a fenced refusal drops the caches through the Guard's change
// notification (watchGuard), not here.
func (fsys *filesystem) errno(op, key string, err error) syscall.Errno {
	e := toErrno(err)
	if e == 0 {
		return 0
	}
	fsys.metrics.errors(e)
	level := slog.LevelWarn
	switch e {
	case syscall.ENOENT, syscall.ENODATA, syscall.EEXIST, syscall.ENOTEMPTY,
		syscall.EINTR, syscall.ENOTDIR, syscall.EISDIR, syscall.ERANGE, syscall.ENOTSUP:
		level = slog.LevelDebug
	}
	fsys.log.Log(context.Background(), level, "fuse operation failed",
		"op", op, "key", key, "errno", e.Error(), "err", err)
	return e
}
