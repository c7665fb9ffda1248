package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/fusefs"
	"github.com/fencefs/fencefs/lease"
)

// `fencefs run`'s COMMAND: started once the lease is held, supervised while
// it runs (signals forwarded, stopped when the lease is lost), and its exit
// turned into fencefs run's.

// startCommand starts argv with the token, the lease and the mount in its
// environment; a failure is fencefs run's exit 126 or 127.
func startCommand(o runOptions, argv []string, token uint64, mp string) (*exec.Cmd, error) {
	c := exec.Command(argv[0], argv[1:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.Env = append(os.Environ(),
		"FENCEFS_TOKEN="+strconv.FormatUint(token, 10),
		"FENCEFS_LEASE="+o.lease,
		"FENCEFS_MOUNT="+mp,
	)
	// The command must not outlive an unsupervised lease: if this process
	// dies, the kernel sends it SIGTERM.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: !o.foreground, Pdeathsig: syscall.SIGTERM}
	if err := c.Start(); err != nil {
		code := exitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return nil, exitError{code: code, msg: fmt.Sprintf("fencefs: run: cannot run %s: %v", argv[0], unwrapPath(err))}
	}
	return c, nil
}

// superviseCommand waits for the started command c, forwarding sigs to it;
// if l is lost meanwhile it sends SIGTERM, then SIGKILL after o.grace. It
// returns c's Wait error and, if the lease was lost, why.
func superviseCommand(env *adminEnv, o runOptions, c *exec.Cmd, l lease.Leader, sigs <-chan os.Signal) (waitErr, lostErr error) {
	signalCmd := func(sig syscall.Signal) {
		if o.foreground {
			_ = c.Process.Signal(sig)
			return
		}
		_ = syscall.Kill(-c.Process.Pid, sig)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()

	var (
		stopping bool
		killT    <-chan time.Time
		lost     = l.Lost()
	)
loop:
	for {
		select {
		case waitErr = <-exited:
			break loop
		case sig := <-sigs:
			if s, ok := sig.(syscall.Signal); ok {
				env.log.Info("forwarding signal", "signal", sig.String())
				signalCmd(s)
			}
		case <-lost:
			lost = nil
			lostErr = l.Err()
			stopping = true
			env.log.Warn("lease lost; stopping the command", "lease", o.lease, "reason", lostErr,
				"pid", c.Process.Pid, "grace", o.grace)
			signalCmd(syscall.SIGTERM)
			killT = time.After(o.grace)
		case <-killT:
			killT = nil
			env.log.Warn("the command did not stop within the grace period; killing it", "pid", c.Process.Pid)
			signalCmd(syscall.SIGKILL)
		}
	}
	if !o.foreground && stopping {
		// Children of the command that outlived it.
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	}
	return waitErr, lostErr
}

// resolveLeadership decides, once the command has ended while l still
// looked held, whether this process still led: a command that failed
// because a newer leader took over (a frozen process thawed, say) must
// make fencefs run exit 75 like a loss seen while it ran, not with the
// command's status. The mount at mp fenced is a loss (a newer epoch holds
// the bucket); otherwise l.Confirm asks the coordinator, again until it
// answers, l is lost, or l's own deadline passes (Held turns false within
// the TTL); a coordinator silent beyond twice the TTL counts as a loss
// too. It returns nil when the leadership was confirmed, else why it was
// lost (wrapping lease.ErrLost), and logs which.
func resolveLeadership(env *adminEnv, o runOptions, l lease.Leader, mp string) error {
	giveUp := time.Now().Add(2*o.ttl + 5*time.Second)
	for attempt := 0; ; attempt++ {
		if st, err := readStatus(mp); err == nil && st[statusKey(fusefs.XattrState)] == "fenced" {
			lost := fmt.Errorf("%w: the mount at %s is fenced: %s", lease.ErrLost, mp, st[statusKey(fusefs.XattrReason)])
			env.log.Warn("the command ended after the leadership was lost", "lease", o.lease, "reason", lost)
			return lost
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(o.ttl/3, time.Second))
		err := l.Confirm(ctx)
		cancel()
		switch {
		case err == nil:
			env.log.Info("the command ended; the leadership is confirmed", "lease", o.lease, "token", l.Token())
			return nil
		case errors.Is(err, lease.ErrLost):
			env.log.Warn("the command ended after the leadership was lost", "lease", o.lease, "reason", err)
			return err
		case !l.Held() || time.Now().After(giveUp):
			lost := fmt.Errorf("%w: it could not be confirmed after the command ended (%v)", lease.ErrLost, err)
			env.log.Warn("the command ended; the leadership could not be confirmed: counted as lost", "lease", o.lease, "err", err)
			return lost
		}
		if attempt == 0 {
			env.log.Warn("the command ended; confirming the leadership", "lease", o.lease, "err", err)
		}
		select {
		case <-l.Lost():
			return l.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// runExit is fencefs run's result once the command name has finished (ps,
// waitErr): exit 75 if the lease was lost (lostErr), else the command's
// status.
func runExit(o runOptions, name string, ps *os.ProcessState, waitErr, lostErr error) error {
	status, how := exitStatus(ps, waitErr)
	if lostErr != nil {
		reason := strings.TrimPrefix(lostErr.Error(), lease.ErrLost.Error()+": ")
		return exitError{code: exitLeaseLost, msg: fmt.Sprintf("fencefs: run: lease %s lost: %s; %s %s", o.lease, reason, name, how)}
	}
	if status != 0 {
		return exitError{code: status}
	}
	return nil
}
