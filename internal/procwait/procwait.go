// Package procwait waits for a server process a test started to become
// ready: the Versity gateway and etcd of the integration tests poll the same
// way.
package procwait

import (
	"context"
	"errors"
	"os"
	"strings"
	"time"
)

// LogTail returns the last 2000 bytes of the log at path ("" when there is
// none), for the error a failed start reports.
func LogTail(path string) string {
	if path == "" {
		return ""
	}
	b, _ := os.ReadFile(path)
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

// ErrExited is returned when the process exits before it is ready.
var ErrExited = errors.New("exited before becoming ready")

// Ready polls ready every 50 ms until it reports true (nil), done is closed
// (ErrExited: the process is gone) or timeout or ctx ends (the context's
// error). The caller adds the process's name and log to the error and
// stops the process on a timeout.
func Ready(ctx context.Context, timeout time.Duration, done <-chan struct{}, ready func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if ready() {
			return nil
		}
		select {
		case <-done:
			return ErrExited
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
