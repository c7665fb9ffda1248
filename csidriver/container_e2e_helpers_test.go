package csidriver_test

// A container, as far as its processes go: the test binary re-executed as
// the container's init (containerInit), which runs the main process and
// is the child subreaper of everything below it — a process that forks
// and exits, or starts a session of its own (as `fencefs mount` does),
// stays in the container, as it stays in a container's cgroup. When the
// main process exits, the init kills every process left in the container
// and exits with it, as a container runtime stops a container whose main
// process ended. So a crash of the driver as its container's main process
// takes down whatever the driver started, whatever its session.

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// containerInitEnv, set, makes the test binary the init of a container
// whose main process is its arguments.
const containerInitEnv = "FENCEFS_TEST_CONTAINER_INIT"

// containerInit runs os.Args[1:] as the main process of a container and
// returns its exit status once every process of the container is gone.
func containerInit() int {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "container init: %v\n", err)
		return 125
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, crashSignal)
	env := slices.DeleteFunc(os.Environ(), func(e string) bool { return e == containerInitEnv+"=1" })
	main, err := os.StartProcess(os.Args[1], os.Args[1:], &os.ProcAttr{Env: env, Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "container init: %v\n", err)
		return 126
	}
	go func() {
		for s := range sigs {
			if s == crashSignal {
				s = syscall.SIGKILL
			}
			_ = main.Signal(s) // as a runtime's stop: to the main process
		}
	}()
	code := -1
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil { // ECHILD: the container is empty
			return code
		}
		if pid != main.Pid {
			continue
		}
		code = ws.ExitStatus()
		if ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		// The main process ended: the container stops, every process
		// of it with it.
		for {
			rest := descendants(os.Getpid())
			if len(rest) == 0 {
				break
			}
			for _, p := range rest {
				_ = unix.Kill(p, unix.SIGKILL)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// crashSignal asks a container's init to SIGKILL its main process.
const crashSignal = syscall.SIGUSR1

// descendants lists the live (not zombie) processes below pid.
func descendants(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], p)
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// container is a container started by a test: its init and, below it,
// its main process and whatever that started.
type container struct {
	init *exec.Cmd
	done chan struct{}
}

// startContainer starts argv as the main process of a new container, with
// env and its output to out; the container is stopped in t.Cleanup (if
// the test has not ended it).
func startContainer(t *testing.T, out io.Writer, env []string, argv ...string) *container {
	t.Helper()
	c := &container{init: exec.Command(os.Args[0], argv...), done: make(chan struct{})}
	c.init.Env = append(env, containerInitEnv+"=1")
	c.init.Stdout, c.init.Stderr = out, out
	if err := c.init.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.init.Wait(); close(c.done) }()
	t.Cleanup(func() { c.stop(t) })
	return c
}

// exited reports whether the container has stopped.
func (c *container) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// processes lists the container's live processes but its init.
func (c *container) processes() []int { return descendants(c.init.Process.Pid) }

// stop ends the container as its runtime would on a stop: SIGTERM to its
// main process, and once that exited, SIGKILL to what is left.
func (c *container) stop(t *testing.T) {
	t.Helper()
	if c.exited() {
		return
	}
	_ = c.init.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		t.Errorf("container of %q did not stop on SIGTERM: killing it", c.init.Args[1:])
		c.crash(t)
	}
}

// crash kills the container's main process, as a crash or an OOM kill
// would, and waits until the container stopped: every process of it is
// gone.
func (c *container) crash(t *testing.T) {
	t.Helper()
	_ = c.init.Process.Signal(crashSignal)
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("container of %q did not stop once its main process was killed", c.init.Args[1:])
	}
}
