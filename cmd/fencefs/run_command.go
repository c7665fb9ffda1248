package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

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
