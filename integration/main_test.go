// Package integration holds fencefs's end-to-end tests: the real fencefs
// binary, real FUSE mounts and a real S3 server (the Versity gateway), driven
// by plain syscalls and checked with a plain S3 client.
package integration

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/fencefs/fencefs/integration/harness"
	"github.com/fencefs/fencefs/integration/zkserver"
)

const holderEnv = "FENCEFS_TEST_HOLDER"

func TestMain(m *testing.M) {
	if files := os.Getenv(holderEnv); files != "" {
		os.Exit(runHolder(strings.Split(files, "\n")))
	}
	if path := os.Getenv(churnWriterEnv); path != "" {
		os.Exit(runChurnWriter(path))
	}
	code := harness.Main(m)
	zkserver.StopShared() // the ZooKeeper tests share
	os.Exit(code)
}

// runHolder is the body of a holder process (see startHolder): it opens each
// file, writes "A's stale <name>" and reports "ready"; on a line on stdin it
// closes them all at once and reports each close's result as "<i> <errno>"
// (0 = ok), in the order they return.
func runHolder(paths []string) int {
	var files []*os.File
	for _, p := range paths {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		if _, err := f.WriteString("A's stale " + filepath.Base(p)); err != nil {
			fmt.Println("error", err)
			return 1
		}
		files = append(files, f)
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	// All at once, as the processes of an application exit: the commits
	// are in flight together.
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var errno syscall.Errno
			if err := f.Close(); err != nil && !errors.As(err, &errno) {
				errno = syscall.EIO
			}
			mu.Lock()
			fmt.Println(i, int(errno))
			mu.Unlock()
		}()
	}
	wg.Wait()
	return 0
}

// holder is a separate process keeping dirty handles open on a mount. Tests
// that freeze a mount use one, because a frozen mount hangs any exec of the
// test process that would close the test's own descriptors on it.
type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startHolder starts a holder for paths and waits until every file is open
// and written (dirty).
func startHolder(t *testing.T, paths []string) *holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+strings.Join(paths, "\n"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	h := &holder{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	if line, err := h.out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("holder: %q, %v", line, err)
	}
	return h
}

// closeAll closes the holder's files and returns each close's errno (0 = ok).
func (h *holder) closeAll(t *testing.T, n int) []syscall.Errno {
	t.Helper()
	if _, err := h.stdin.Write([]byte("close\n")); err != nil {
		t.Fatal(err)
	}
	res := make([]syscall.Errno, n)
	for i := 0; i < n; i++ {
		line, err := h.out.ReadString('\n')
		if err != nil {
			t.Fatalf("holder: %v", err)
		}
		f := strings.Fields(line)
		idx, _ := strconv.Atoi(f[0])
		e, _ := strconv.Atoi(f[1])
		res[idx] = syscall.Errno(e)
	}
	_ = h.cmd.Wait()
	return res
}
