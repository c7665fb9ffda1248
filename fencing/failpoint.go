package fencing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fencefs/fencefs/internal/ctxsleep"
)

// Hooks are failpoints: functions Guard calls at the protocol's critical
// points so that tests (and the binary, see FailpointsFromEnv) can pause or
// fail a writer there. A nil field does nothing. They are called without
// any Guard lock held, from the goroutine doing the mutation, and may
// block; they should return when ctx is done.
type Hooks struct {
	// AfterIntent runs after the intent covering key was written and
	// before the validation of the register (strict mode only).
	AfterIntent func(ctx context.Context, key string)
	// AfterValidate runs after a successful validation and before the
	// commit on key.
	AfterValidate func(ctx context.Context, key string)
	// BeforeSweepKey runs before a takeover sweep rewrites key; a non-nil
	// error aborts the sweep (and Bind) with that error, as a crash half-way
	// through a sweep would.
	BeforeSweepKey func(ctx context.Context, key string) error
	// AfterMount is not called by the Guard: the fencefs binary calls it
	// with the mountpoint once the kernel mount exists and before the
	// mount reports ready (the window in which a signal finds a mount that
	// may already be in use).
	AfterMount func(ctx context.Context, mountpoint string)
	// BeforeReleaseCommit is not called by the Guard either: the mount
	// calls it with the key in a file's last release, between deciding
	// that it is the last and committing what is left (the window in which
	// another open of the file may begin).
	BeforeReleaseCommit func(ctx context.Context, key string)
}

// EnvFailpoints is the environment variable FailpointsFromEnv reads.
const EnvFailpoints = "FENCEFS_FAILPOINTS"

// FailpointsFromEnv builds Hooks from $FENCEFS_FAILPOINTS, so that
// integration tests can pause the real binary at a protocol point. Only a
// binary built with the build tag "failpoints" (the fault-injection tests
// build one) honours the variable; a production build refuses to run with
// it set, rather than silently ignoring a test setting. The value is a list
// of point=action separated by ';' or ',':
//
//	points:  after-intent, after-validate, before-sweep-key, after-mount,
//	         before-release-commit
//	actions: pause-file:PATH   wait while PATH exists (polled every 10 ms);
//	                           a paused writer first appends the key and a
//	                           newline to PATH.reached, so a test knows who
//	                           is paused
//	         sleep:DURATION    sleep (Go duration, e.g. 250ms)
//	         fail:MESSAGE      before-sweep-key only: abort the sweep
//
// An optional key filter follows the point after '@': the action then
// applies only to keys containing that text, e.g.
// "after-validate@data/f1=pause-file:/tmp/p". An empty or unset variable
// gives zero Hooks. A malformed value is an error naming the bad item.
func FailpointsFromEnv() (Hooks, error) {
	spec := os.Getenv(EnvFailpoints)
	if spec != "" && !FailpointsEnabled {
		return Hooks{}, errors.New("this binary was built without failpoints (build tag \"failpoints\"); unset the variable")
	}
	return ParseFailpoints(spec)
}

// ParseFailpoints parses a FENCEFS_FAILPOINTS value; see FailpointsFromEnv.
func ParseFailpoints(spec string) (Hooks, error) {
	var h Hooks
	items := strings.FieldsFunc(spec, func(r rune) bool { return r == ';' || r == ',' })
	for _, item := range items {
		item = strings.TrimSpace(item)
		point, action, ok := strings.Cut(item, "=")
		if !ok {
			return Hooks{}, fmt.Errorf("failpoint %q: want point=action", item)
		}
		point, filter, _ := strings.Cut(point, "@")
		kind, arg, _ := strings.Cut(action, ":")
		var wait func(ctx context.Context, key string) error
		switch kind {
		case "pause-file":
			if arg == "" {
				return Hooks{}, fmt.Errorf("failpoint %q: pause-file needs a path", item)
			}
			path := arg
			wait = func(ctx context.Context, key string) error { return pauseWhileExists(ctx, path, key) }
		case "sleep":
			d, err := time.ParseDuration(arg)
			if err != nil {
				return Hooks{}, fmt.Errorf("failpoint %q: %v", item, err)
			}
			wait = func(ctx context.Context, _ string) error { return ctxsleep.Sleep(ctx, d) }
		case "fail":
			if point != "before-sweep-key" {
				return Hooks{}, fmt.Errorf("failpoint %q: fail applies to before-sweep-key only", item)
			}
			msg := arg
			wait = func(context.Context, string) error { return errors.New("failpoint: " + msg) }
		default:
			return Hooks{}, fmt.Errorf("failpoint %q: unknown action %q (pause-file, sleep, fail)", item, kind)
		}
		match := func(key string) bool { return filter == "" || strings.Contains(key, filter) }
		hook := func(ctx context.Context, key string) {
			if match(key) {
				_ = wait(ctx, key)
			}
		}
		switch point {
		case "after-intent":
			h.AfterIntent = hook
		case "after-validate":
			h.AfterValidate = hook
		case "after-mount":
			h.AfterMount = hook
		case "before-release-commit":
			h.BeforeReleaseCommit = hook
		case "before-sweep-key":
			h.BeforeSweepKey = func(ctx context.Context, key string) error {
				if !match(key) {
					return nil
				}
				return wait(ctx, key)
			}
		default:
			return Hooks{}, fmt.Errorf("failpoint %q: unknown point %q (after-intent, after-validate, before-sweep-key, after-mount, before-release-commit)", item, point)
		}
	}
	return h, nil
}

func pauseWhileExists(ctx context.Context, path, key string) error {
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	if f, err := os.OpenFile(path+".reached", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		_, _ = f.WriteString(key + "\n")
		_ = f.Close()
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := os.Stat(path); err != nil {
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
