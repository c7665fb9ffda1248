// Command fencefs-pjdfstest is what `make pjdfstest PJDFSTEST=<path>` runs:
// the POSIX conformance suite pjdfstest (github.com/pjd/pjdfstest, built
// by the caller) on real fencefs mounts. For each mount kind (--modes:
// "allow-other" mounts with --allow-other, which turns on the kernel's
// default_permissions; "default" mounts without it) it starts a Versity S3
// gateway on a free port of 127.0.0.1, creates a fresh bucket, mounts it
// with the real binary, runs `prove -r <pjdfstest>/tests` as root from a
// directory on the mount, unmounts, stops the gateway, and prints the
// failing subtests per group (the table docs/POSIX.md keeps). prove's full
// output is written to <state>/<mode>.log.
//
// It does not steer the suite: the filesystem type is what the mount
// reports, and every test file runs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/moby/sys/mountinfo"
)

// options are the command's flags, with absolute paths.
type options struct {
	suite, bin, gateway, state string
	modes, groups              []string
	verbose                    bool
	exec                       string
}

func main() {
	var o options
	var modes, groups string
	flag.StringVar(&o.suite, "pjdfstest", "", "pjdfstest source tree with the pjdfstest binary built in it (required)")
	flag.StringVar(&o.bin, "bin", "bin/fencefs", "fencefs binary")
	flag.StringVar(&o.gateway, "gateway", "bin/versitygw", "versitygw binary")
	flag.StringVar(&o.state, "state", ".run/pjdfstest", "directory for the gateway's data, the mountpoint, caches and logs")
	flag.StringVar(&modes, "modes", "allow-other,default", "mount kinds to run, comma-separated: allow-other, default")
	flag.StringVar(&groups, "groups", "", "only these test groups (comma-separated directories under tests/), default all")
	flag.BoolVar(&o.verbose, "v", false, "prove -v: every subtest's result in the log")
	flag.StringVar(&o.exec, "exec", "", "run this shell command in the mount's work directory instead of the suite (to reproduce one case)")
	flag.Parse()
	if flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected argument %q (flags only; see -h)", flag.Arg(0)))
	}
	o.modes = splitList(modes)
	o.groups = splitList(groups)
	if err := check(&o); err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	results := map[string]summary{}
	for _, mode := range o.modes {
		s, err := runMode(ctx, o, mode)
		if err != nil {
			fail(fmt.Errorf("%s mount: %w", mode, err))
		}
		results[mode] = s
	}
	if o.exec == "" {
		printTable(os.Stdout, o.modes, results)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fencefs-pjdfstest:", err)
	os.Exit(1)
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// check validates the options and makes their paths absolute.
func check(o *options) error {
	if o.suite == "" {
		return errors.New("PJDFSTEST is not set: build pjdfstest (autoreconf -ifs && ./configure && make pjdfstest) and pass its directory")
	}
	for _, p := range []*string{&o.suite, &o.bin, &o.gateway, &o.state} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	if st, err := os.Stat(filepath.Join(o.suite, "pjdfstest")); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("%s has no pjdfstest binary: run `autoreconf -ifs && ./configure && make pjdfstest` there", o.suite)
	}
	if _, err := os.Stat(filepath.Join(o.suite, "tests", "misc.sh")); err != nil {
		return fmt.Errorf("%s has no tests/misc.sh: PJDFSTEST must be pjdfstest's source tree", o.suite)
	}
	for _, p := range []string{o.bin, o.gateway} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%v (run `make build bin/versitygw` first)", err)
		}
	}
	if _, err := exec.LookPath("prove"); err != nil {
		return errors.New("prove (perl's test harness) is not on PATH: install perl")
	}
	if os.Geteuid() != 0 {
		return errors.New("pjdfstest must run as root (it changes owners and runs as other users)")
	}
	for _, m := range o.modes {
		if m != "allow-other" && m != "default" {
			return fmt.Errorf("unknown mode %q (allow-other or default)", m)
		}
	}
	for _, g := range o.groups {
		if _, err := os.Stat(filepath.Join(o.suite, "tests", g)); err != nil {
			return fmt.Errorf("no test group %q under %s/tests", g, o.suite)
		}
	}
	return nil
}

// runMode runs the suite on one fresh mount and returns its summary.
func runMode(ctx context.Context, o options, mode string) (summary, error) {
	dir := filepath.Join(o.state, mode)
	_ = exec.Command("fusermount3", "-uz", filepath.Join(dir, "mnt")).Run() // a dead mount of a killed run
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	gw, err := gateway.Start(gctx, gateway.Options{Bin: o.gateway, Dir: filepath.Join(dir, "gw")})
	cancel()
	if err != nil {
		return nil, err
	}
	defer gw.Stop()
	const bucket = "pjdfstest"
	if err := gw.CreateBucket(ctx, bucket); err != nil {
		return nil, fmt.Errorf("create bucket: %w", err)
	}
	args := []string{"--token", "1", "--cache-dir", filepath.Join(dir, "cache")}
	if mode == "allow-other" {
		args = append(args, "--allow-other")
	}
	m, err := startMount(o.bin, bucket, filepath.Join(dir, "mnt"), filepath.Join(dir, "fencefs.log"), gw.Env(), args...)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	work := filepath.Join(m.dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(o.state, mode+".log")
	fmt.Fprintf(os.Stderr, "running pjdfstest on a %s mount (%s); prove's output: %s\n", mode, m.dir, logPath)
	out, err := prove(ctx, o, work, logPath)
	if err != nil {
		return nil, err
	}
	s := parseProve(out)
	if s[totalKey] == 0 && o.exec == "" {
		return nil, fmt.Errorf("prove ran no subtests (its output: %s)", logPath)
	}
	return s, nil
}

// prove runs `prove -r` on the selected groups with work as the current
// directory, writes its output to logPath and returns it. prove exits
// non-zero when subtests fail; that is the expected outcome, not an error.
func prove(ctx context.Context, o options, work, logPath string) (string, error) {
	targets := []string{filepath.Join(o.suite, "tests")}
	if len(o.groups) > 0 {
		targets = targets[:0]
		for _, g := range o.groups {
			targets = append(targets, filepath.Join(o.suite, "tests", g))
		}
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return "", err
	}
	defer logf.Close()
	var out strings.Builder
	if o.exec != "" {
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", o.exec)
		cmd.Dir, cmd.Stdout, cmd.Stderr = work, os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), "PJDFSTEST="+o.suite)
		return "", cmd.Run()
	}
	args := []string{"-r"}
	if o.verbose {
		args = append(args, "-v")
	}
	cmd := exec.CommandContext(ctx, "prove", append(args, targets...)...)
	cmd.Dir = work
	cmd.Stdout = io.MultiWriter(logf, &out)
	cmd.Stderr = cmd.Stdout
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return "", fmt.Errorf("prove: %w", err)
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	return out.String(), nil
}

// mountProc is one `fencefs mount --foreground` process.
type mountProc struct {
	dir, logPath string
	cmd          *exec.Cmd
	logf         *os.File
	done         chan error
}

// startMount starts bin mount BUCKET dir --foreground with args and waits
// until the kernel mount is there (or the process exits, or 30 s pass).
func startMount(bin, bucket, dir, logPath string, env []string, args ...string) (*mountProc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"mount", bucket, dir, "--foreground"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	m := &mountProc{dir: dir, logPath: logPath, cmd: cmd, logf: logf, done: make(chan error, 1)}
	go func() { m.done <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for !isMounted(dir) {
		select {
		case err := <-m.done:
			m.done <- err
			m.stop()
			log, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("fencefs exited before the mount was ready (%v): %s", err, strings.TrimSpace(string(log)))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			m.stop()
			return nil, fmt.Errorf("mount at %s not ready in 30 s (log: %s)", dir, logPath)
		}
	}
	return m, nil
}

// stop asks fencefs to flush and unmount (SIGTERM), waits up to 30 s (then
// kills it), and makes sure nothing stays mounted.
func (m *mountProc) stop() {
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-m.done:
		if err != nil {
			fmt.Fprintf(os.Stderr, "fencefs exited: %v (log: %s)\n", err, m.logPath)
		}
	case <-time.After(30 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
	}
	if isMounted(m.dir) {
		_ = exec.Command("fusermount3", "-uz", m.dir).Run()
	}
	m.logf.Close()
}

// isMounted reports whether dir is a mountpoint, from /proc/self/mountinfo
// (never touching the mount itself).
func isMounted(dir string) bool {
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
	return err == nil && len(mounts) > 0
}
