package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The story's application runs in a process of its own (this binary, run
// with -app-hold): the demo itself must hold no descriptor on a mount it
// freezes, because starting B's mount (fork + exec) would close such a
// descriptor in the child and the kernel would send a FUSE flush to the
// frozen process, hanging the exec.

// runApp is the application: it opens path for writing, writes text and
// says "ready"; it keeps the file open (dirty: written, not closed) until
// a line arrives on stdin, then closes it and reports the result of
// close(2) as "close ok" or "close <errno name>: <message>".
func runApp(path, text string) int {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	if _, err := f.WriteString(text); err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	if err := f.Close(); err != nil {
		var errno syscall.Errno
		name := "EIO"
		if errors.As(err, &errno) {
			name = unix.ErrnoName(errno)
		}
		fmt.Printf("close %s: %v\n", name, err)
		return 0
	}
	fmt.Println("close ok")
	return 0
}

// app is a running application process.
type app struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	done  chan struct{}
}

// startApp starts the application on path and waits until it has written
// text and holds the file open.
func startApp(path, text string) (*app, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-app-hold", path, "-app-text", text)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	// Its own process group, like the mounts: a terminal Ctrl-C reaches only
	// the demo, which ends the application in order (after thawing A).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	a := &app{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), done: make(chan struct{})}
	line, err := a.line(30 * time.Second)
	if err != nil || line != "ready" {
		a.kill()
		return nil, fmt.Errorf("the application did not start: %q %v", line, err)
	}
	return a, nil
}

// line reads one line of the application's output, within timeout.
func (a *app) line(timeout time.Duration) (string, error) {
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := a.out.ReadString('\n')
		ch <- res{strings.TrimSpace(s), err}
	}()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-time.After(timeout):
		return "", errors.New("no answer in time")
	}
}

// close tells the application to close its file and returns what its
// close(2) reported ("ok", or "EROFS: …").
func (a *app) close() (string, error) {
	if _, err := io.WriteString(a.stdin, "close\n"); err != nil {
		return "", err
	}
	line, err := a.line(60 * time.Second)
	if err != nil {
		return "", fmt.Errorf("the application's close did not return: %w", err)
	}
	_ = a.cmd.Wait()
	close(a.done)
	return strings.TrimPrefix(line, "close "), nil
}

// kill ends the application if it is still running.
func (a *app) kill() {
	select {
	case <-a.done:
		return
	default:
	}
	_ = a.cmd.Process.Kill()
	_ = a.cmd.Wait()
	close(a.done)
}
