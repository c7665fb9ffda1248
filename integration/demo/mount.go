package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
)

// mountProc is one `fencefs mount --foreground` process of the demo.
type mountProc struct {
	name    string // "A" or "B"
	dir     string // absolute mountpoint
	logPath string
	cmd     *exec.Cmd
	logf    *os.File
	done    chan error // receives the exit status once; re-sent for later readers
	frozen  bool       // SIGSTOPped and not yet continued
}

// startMount starts bin mount BUCKET dir --foreground with args and waits
// until the kernel mount is there (or the process exits, or 30 s pass).
// env is the gateway's environment. The process gets its own process
// group, so that a terminal Ctrl-C reaches only the demo, which stops the
// mounts first and the gateway last; if the demo itself is killed, the
// kernel kills the mount too (the next run clears the dead mount), so that
// no fencefs is left frozen or running.
func startMount(bin, name, dir, logPath string, env []string, args ...string) (*mountProc, error) {
	// A previous run killed hard may have left a dead mount here.
	_ = exec.Command("fusermount3", "-uz", dir).Run()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	argv := append([]string{"mount", bucket, dir, "--foreground"}, args...)
	cmd := exec.Command(bin, argv...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	m := &mountProc{name: name, dir: dir, logPath: logPath, cmd: cmd, logf: logf, done: make(chan error, 1)}
	go func() { m.done <- cmd.Wait() }()
	if err := m.waitMounted(30 * time.Second); err != nil {
		m.stop()
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("mount %s at %s: %w\n--- %s ---\n%s", name, dir, err, logPath, log)
	}
	return m, nil
}

// waitMounted polls /proc/self/mountinfo (which never touches the FUSE
// mount itself) until m.dir is mounted.
func (m *mountProc) waitMounted(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if isMounted(m.dir) {
			return nil
		}
		select {
		case err := <-m.done:
			m.done <- err
			return fmt.Errorf("fencefs exited before the mount was ready: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return errors.New("mount not ready in time")
}

func (m *mountProc) pid() int { return m.cmd.Process.Pid }

// freeze stops the mount process (SIGSTOP), as a GC pause, a VM snapshot
// or a partition would.
func (m *mountProc) freeze() error {
	if err := m.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	m.frozen = true
	return nil
}

// thaw continues a frozen mount process (SIGCONT).
func (m *mountProc) thaw() error {
	if !m.frozen {
		return nil
	}
	if err := m.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	m.frozen = false
	return nil
}

// stop asks fencefs to flush and unmount (SIGTERM), waits up to 30 s (then
// kills it), and makes sure nothing stays mounted. Safe to call once per
// mount; a frozen mount is continued first.
func (m *mountProc) stop() {
	_ = m.thaw()
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-m.done:
		if err != nil {
			fmt.Fprintf(os.Stderr, "fencefs (%s) exited: %v (log: %s)\n", m.name, err, m.logPath)
		}
	case <-time.After(30 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
	if isMounted(m.dir) {
		_ = exec.Command("fusermount3", "-u", m.dir).Run()
	}
	m.logf.Close()
	fmt.Printf("unmounted %s (%s)\n", rel(m.dir), m.name)
}

// isMounted reports whether dir is a mountpoint, from /proc/self/mountinfo
// (never touching the mount itself, which may be frozen or dead).
func isMounted(dir string) bool {
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
	return err == nil && len(mounts) > 0
}
