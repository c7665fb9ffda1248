package integration

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/fencefs/fencefs/internal/mounts"
)

const (
	tourBegin = "<!-- tour:begin -->"
	tourEnd   = "<!-- tour:end -->"
	tourPort  = "127.0.0.1:7070" // the address the README's tour starts its gateway on
)

// readmeTour returns the shell block of README.md between the tour markers,
// exactly as printed there.
func readmeTour(t *testing.T) string {
	t.Helper()
	root, err := gateway.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	_, rest, ok := strings.Cut(text, tourBegin)
	if !ok {
		t.Fatalf("README.md has no %q", tourBegin)
	}
	block, _, ok := strings.Cut(rest, tourEnd)
	if !ok {
		t.Fatalf("README.md has no %q after %q", tourEnd, tourBegin)
	}
	block = strings.TrimSpace(block)
	body, ok := strings.CutPrefix(block, "```sh\n")
	if !ok || !strings.HasSuffix(body, "```") || strings.Count(body, "```") != 1 {
		t.Fatalf("the tour markers must hold exactly one ```sh block, got:\n%s", block)
	}
	return strings.TrimSuffix(body, "```")
}

// TestReadmeTourRunsAsPrinted runs the README's tour, extracted from
// README.md, with bash -euo pipefail in a directory whose bin/ holds the
// fencefs and gateway binaries under test: it must start its own gateway,
// create the bucket, show the old leader's write refused and its mount
// fenced, and leave nothing mounted, serving or on disk.
func TestReadmeTourRunsAsPrinted(t *testing.T) {
	harness.RequireFUSE(t)
	gwBin, err := gateway.FindBinary()
	if err != nil {
		gateway.SkipOrFail(t, "%v", err)
	}
	bin := harness.Binary(t)
	tour := readmeTour(t)
	if !strings.Contains(tour, tourPort) {
		t.Fatalf("the tour no longer starts its gateway on %s; update tourPort", tourPort)
	}
	if l, err := net.Listen("tcp", tourPort); err != nil {
		t.Fatalf("the tour's address %s is taken: %v", tourPort, err)
	} else {
		l.Close()
	}

	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"fencefs": bin, "versitygw": gwBin} {
		if err := os.Symlink(target, filepath.Join(dir, "bin", name)); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", tour)
	cmd.Dir = dir
	// Its own process group: the gateway it starts in the background is
	// killed with it if the tour fails half-way.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t.Cleanup(func() {
		for _, m := range []string{"mnt-a", "mnt-b"} {
			d := filepath.Join(dir, m)
			if ok, _ := mounts.IsMounted(d); ok {
				t.Errorf("%s is still mounted after the tour", d)
				_ = mounts.Lazy(context.Background(), d)
			}
		}
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	start := time.Now()
	err = cmd.Run()
	t.Logf("tour took %v; its output:\n%s", time.Since(start).Round(time.Millisecond), out.String())
	if err != nil {
		for _, log := range []string{"tour/gateway.log", "tour/a.log", "tour/b.log"} {
			if b, rerr := os.ReadFile(filepath.Join(dir, log)); rerr == nil {
				t.Logf("%s:\n%s", log, b)
			}
		}
		t.Fatalf("the README's tour failed: %v", err)
	}
	text := out.String()
	for _, want := range []string{
		"Read-only file system",             // cp's report of the refused close(2)
		"refused: the old leader is fenced", // the tour's own line after it
		"state          fenced",
		"reason         epoch 18 held by holder",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the tour's output lacks %q", want)
		}
	}
	if entries, err := os.ReadDir(dir); err != nil {
		t.Fatal(err)
	} else if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("the tour left %v behind (only bin/ was there before)", names)
	}
	if c, err := net.Dial("tcp", tourPort); err == nil {
		c.Close()
		t.Errorf("something still serves at %s after the tour", tourPort)
	}
}
