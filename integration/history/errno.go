package history

import (
	"errors"
	"syscall"
)

func asErrno(err error, e *syscall.Errno) bool { return errors.As(err, e) }
