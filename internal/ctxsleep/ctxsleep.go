// Package ctxsleep is the one way fencefs waits for a while: a sleep that
// ends early when its context is done.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits for d, or until ctx is done, whichever comes first. It
// returns nil after a full sleep and ctx.Err() when ctx ended it (also when
// ctx was already done on entry, whatever d). A d of zero or less returns
// at once (nil, unless ctx is done).
func Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
