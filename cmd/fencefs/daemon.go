package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// envDaemonFD marks the background child of a mount and names the file
// descriptor of its readiness pipe to the parent.
const envDaemonFD = "FENCEFS_DAEMON_READY_FD"

// Readiness protocol on the pipe: one line, "ready" or "error <message>".
const (
	readyLine       = "ready"
	errorLinePrefix = "error "
)

// isDaemonChild reports whether this process is the background child of a
// mount started without --foreground.
func isDaemonChild() bool { return os.Getenv(envDaemonFD) != "" }

// daemonize re-executes this binary with the same arguments as a background
// child in a new session, and waits until the child reports that the mount is
// ready (exit status 0) or failed (its one-line error and status 1). The
// child's stdio is /dev/null; it logs to --log-file if one is given. The
// string returned is the child's one-line summary of the ready mount.
func daemonize() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("cannot find own executable to start in the background: %w (use --foreground)", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	defer r.Close()
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		w.Close()
		return "", err
	}
	defer devnull.Close()
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Env = append(os.Environ(), envDaemonFD+"=3")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, devnull, devnull
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return "", fmt.Errorf("cannot start the background process: %w", err)
	}
	w.Close()
	// Ctrl-C or SIGTERM while waiting aborts the mount: forward them to the
	// child, which reports "interrupted" on the pipe.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	stopFwd := make(chan struct{})
	defer func() { signal.Stop(sigs); close(stopFwd) }()
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = cmd.Process.Signal(s)
			case <-stopFwd:
				return
			}
		}
	}()
	line, rerr := bufio.NewReader(r).ReadString('\n')
	line = strings.TrimSuffix(line, "\n")
	switch {
	case line == readyLine || strings.HasPrefix(line, readyLine+" "):
		_ = cmd.Process.Release()
		return strings.TrimPrefix(strings.TrimPrefix(line, readyLine), " "), nil
	case strings.HasPrefix(line, errorLinePrefix):
		_ = cmd.Wait()
		code, msg := parseFailLine(strings.TrimPrefix(line, errorLinePrefix))
		return "", exitError{code: code, msg: msg}
	}
	werr := cmd.Wait()
	if rerr == nil {
		rerr = fmt.Errorf("unexpected message %q", line)
	}
	return "", fmt.Errorf("the background process exited before the mount was ready (%v)", errors.Join(werr, ignoreEOF(rerr)))
}

func ignoreEOF(err error) error {
	if err != nil && err.Error() == "EOF" {
		return nil
	}
	return err
}

// readiness reports the outcome of a mount to whoever waits for it: the
// background parent (pipe) and systemd (NOTIFY_SOCKET). Not safe for
// concurrent use; call Ready or Fail once.
type readiness struct {
	pipe *os.File // nil when not a background child
	done bool
}

// newReadiness picks up the pipe of a background child (and removes the
// marker from the environment so that processes started later don't see it).
func newReadiness() *readiness {
	r := &readiness{}
	if fdStr := os.Getenv(envDaemonFD); fdStr != "" {
		os.Unsetenv(envDaemonFD)
		if fd, err := strconv.Atoi(fdStr); err == nil {
			r.pipe = os.NewFile(uintptr(fd), "fencefs-ready")
		}
	}
	return r
}

// Ready tells the parent (with the one line summary it prints) and systemd
// (with status) that the mount is serving.
func (r *readiness) Ready(status, summary string) {
	if r.done {
		return
	}
	r.done = true
	if r.pipe != nil {
		fmt.Fprintln(r.pipe, readyLine+" "+oneLine(summary))
		r.pipe.Close()
	}
	_ = sdNotify(fmt.Sprintf("READY=1\nMAINPID=%d\nSTATUS=%s", os.Getpid(), status))
}

// Fail tells the parent that the mount failed, with the exit status the
// parent must return (exitUsage for configuration mistakes found by the
// child, else exitFailure) and a one-line message.
func (r *readiness) Fail(code int, msg string) {
	if r.done {
		return
	}
	r.done = true
	if r.pipe != nil {
		fmt.Fprintf(r.pipe, "%s%d %s\n", errorLinePrefix, code, oneLine(msg))
		r.pipe.Close()
	}
}

// parseFailLine splits what follows errorLinePrefix into the exit status
// and the message (exitFailure when the status is missing).
func parseFailLine(rest string) (int, string) {
	num, msg, ok := strings.Cut(rest, " ")
	if code, err := strconv.Atoi(num); ok && err == nil && code > 0 && code < 256 {
		return code, msg
	}
	return exitFailure, rest
}

// sdNotify sends state to systemd's notification socket when NOTIFY_SOCKET is
// set (Type=notify services); otherwise it does nothing.
func sdNotify(state string) error {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return nil
	}
	if strings.HasPrefix(name, "@") {
		name = "\x00" + name[1:] // abstract socket
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err
}
