package s3

import (
	"net"
	"syscall"
	"unsafe"
)

// unsent returns the bytes written to c that the peer has not acknowledged
// yet (the socket's send queue, SIOCOUTQ); ok=false when unknown.
func unsent(c net.Conn) (n int, ok bool) {
	sc, isSC := c.(syscall.Conn)
	if !isSC {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var q int32
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCOUTQ, uintptr(unsafe.Pointer(&q)))
	}); err != nil || errno != 0 {
		return 0, false
	}
	return int(q), true
}
