//go:build !linux

package s3

import "net"

// unsent is unknown outside Linux: a request whose body sits in the send
// buffer for longer than the idle timeout fails there.
func unsent(net.Conn) (int, bool) { return 0, false }
