package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/internal/mounts"
)

// target is one thing being measured: a filesystem mount of a bucket, or the
// raw S3 client.
type target interface {
	// Name is the target's name in tables and in -only.
	Name() string
	// DurableAtClose reports whether the target promises that a file's
	// object is in the bucket when close(2) returns. The benchmark checks
	// it either way; a target promising it and failing the check is
	// reported as such.
	DurableAtClose() bool
	// Namespace says what the target promises of the renames and deletes
	// a program makes (namespace.go).
	Namespace() nsContract
	// Start makes the target ready on bucket (mounts it) using scratch as
	// its private directory, and returns a running instance. The caller
	// must call Stop on the instance, also when ctx is cancelled.
	Start(ctx context.Context, env *benchEnv, bucket, scratch string) (*instance, error)
}

// instance is a started target.
type instance struct {
	driver driver
	// pid of the mount process whose memory is measured; 0 when there is
	// none (the raw client runs inside the benchmark process).
	pid int
	// logPath is where the mount process's output goes ("" if none).
	logPath string
	// cacheDir is the mount's local staging directory ("" if none).
	cacheDir string
	// metricsAddr is the host:port of the target's Prometheus endpoint
	// ("" if none); the benchmark counts S3 requests per operation there.
	metricsAddr string
	// stop stops the target: unmounts and waits for the process. It is
	// idempotent.
	stop func() error
	// kill stops it forcibly (SIGKILL and a lazy unmount), unblocking any
	// system call stuck on the mount. Safe to call concurrently with
	// anything, and more than once.
	kill func()
}

// Stop stops the instance; see instance.stop.
func (in *instance) Stop() error { return in.stop() }

// targetNames lists every target of cfg in the order they are measured.
func targetNames(cfg config) []string {
	var names []string
	for _, t := range allTargets(cfg) {
		names = append(names, t.Name())
	}
	return names
}

// allTargets returns every known target, raw client first, the FUSE floor
// (legacy.go) last; geesefs only when cfg has its binary.
func allTargets(cfg config) []target {
	fencefs := func(mode string) target {
		return &mountTarget{
			name:      "fencefs-" + mode,
			durable:   true,
			namespace: nsContract{durable: nsAtSync},
			metrics:   true,
			command: func(s mountSpec) (string, []string, []string, error) {
				args := []string{"mount", s.bucket, s.mountpoint, "--foreground",
					"--endpoint", s.env.gw.Endpoint, "--cache-dir", s.cacheDir, "--fence-mode", mode}
				if mode != "off" {
					args = append(args, "--token", "auto")
				}
				if s.metricsAddr != "" {
					args = append(args, "--metrics-addr", s.metricsAddr)
				}
				args = append(args, cfg.FencefsArgs...)
				return cfg.FencefsBin, args, s.env.gw.Env(), nil
			},
		}
	}
	rclone := func(cacheMode string) target {
		// With cache mode off a rename is a server-side copy and a
		// delete, a remove a delete, each before the call returns; with
		// "writes" a file not yet uploaded is renamed in the cache.
		ns := nsContract{}
		if cacheMode == "off" {
			ns.durable = nsAtReturn
		}
		return &mountTarget{
			name: "rclone-" + cacheMode,
			// With cache mode off rclone streams the upload during the
			// writes and completes it in close; with "writes" it uploads
			// from its cache after close (--vfs-write-back, 5 s).
			durable:   cacheMode == "off",
			namespace: ns,
			command: func(s mountSpec) (string, []string, []string, error) {
				conf := filepath.Join(s.scratch, "rclone.conf")
				if err := os.WriteFile(conf, nil, 0o600); err != nil {
					return "", nil, nil, err
				}
				// The remote is defined in the environment, so no secret
				// is on the command line or on disk.
				env := []string{
					"RCLONE_CONFIG_BENCHS3_TYPE=s3",
					"RCLONE_CONFIG_BENCHS3_PROVIDER=Other",
					"RCLONE_CONFIG_BENCHS3_ACCESS_KEY_ID=" + s.env.gw.AccessKey,
					"RCLONE_CONFIG_BENCHS3_SECRET_ACCESS_KEY=" + s.env.gw.SecretKey,
					"RCLONE_CONFIG_BENCHS3_ENDPOINT=" + s.env.gw.Endpoint,
					"RCLONE_CONFIG_BENCHS3_REGION=" + s.env.gw.Region,
					"RCLONE_CONFIG_BENCHS3_FORCE_PATH_STYLE=true",
				}
				args := []string{"mount", "benchs3:" + s.bucket, s.mountpoint,
					"--config", conf, "--cache-dir", s.cacheDir, "--vfs-cache-mode", cacheMode}
				return "rclone", args, env, nil
			},
		}
	}
	ts := []target{rawTarget{}, fencefs("strict"), fencefs("fast"), fencefs("off"), s3fsTarget()}
	if cfg.GeesefsBin != "" {
		ts = append(ts, geesefsTarget(cfg.GeesefsBin))
	}
	return append(ts, rclone("off"), rclone("writes"), floorTarget{})
}

// s3fsTarget is s3fs-fuse in the foreground, path-style, SigV4, staging
// in its cache directory.
func s3fsTarget() target {
	return &mountTarget{
		name:    "s3fs",
		durable: true,
		// a rename is a copy and a delete, a remove a delete, each
		// before the call returns
		namespace: nsContract{durable: nsAtReturn},
		command: func(s mountSpec) (string, []string, []string, error) {
			passwd := filepath.Join(s.scratch, "passwd-s3fs")
			if err := os.WriteFile(passwd, []byte(s.env.gw.AccessKey+":"+s.env.gw.SecretKey+"\n"), 0o600); err != nil {
				return "", nil, nil, err
			}
			// tmpdir: s3fs stages writes there, like fencefs and rclone
			// in their cache directories.
			opts := "passwd_file=" + passwd + ",url=" + s.env.gw.Endpoint +
				",use_path_request_style,sigv4,endpoint=" + s.env.gw.Region + ",tmpdir=" + s.cacheDir
			return "s3fs", []string{s.bucket, s.mountpoint, "-f", "-o", opts}, nil, nil
		},
	}
}

// geesefsName is the name of the geesefs target.
const geesefsName = "geesefs"

// geesefsTarget is geesefs (github.com/yandex-cloud/geesefs, a
// benchmark-only dependency given with -geesefs) in the foreground with
// --fsync-on-close. That flag uploads the file when the kernel releases
// it (FUSE RELEASE), which the kernel sends after close(2) has returned:
// the benchmark's check right after close finds no object for most files
// (v0.43.8), so it is not counted durable at close. Its renames and
// deletes are asynchronous too: they reach the bucket after the call
// returns (fsync of a directory waits for them). Path-style requests and
// plain HTTP are its defaults for an http:// endpoint; defaults otherwise
// (its write buffers are in memory).
func geesefsTarget(bin string) target {
	return &mountTarget{
		name:    geesefsName,
		durable: false,
		// fsync of a directory flushes everything below it
		namespace: nsContract{durable: nsAtSync, async: true},
		command: func(s mountSpec) (string, []string, []string, error) {
			// The credentials are in the environment (aws-sdk-go's first
			// source), so no secret is on the command line or on disk.
			env := []string{
				"AWS_ACCESS_KEY_ID=" + s.env.gw.AccessKey,
				"AWS_SECRET_ACCESS_KEY=" + s.env.gw.SecretKey,
			}
			args := []string{"-f", "--fsync-on-close", "--endpoint", s.env.gw.Endpoint, "--region", s.env.gw.Region,
				s.bucket, s.mountpoint}
			return bin, args, env, nil
		},
	}
}

// checkGeesefs makes c's -geesefs path absolute and checks that it is an
// executable file.
func checkGeesefs(c *config) error {
	if c.GeesefsBin == "" {
		return nil
	}
	p, err := filepath.Abs(c.GeesefsBin)
	if err != nil {
		return fmt.Errorf("-geesefs: %w", err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("-geesefs: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("-geesefs %s: not an executable file", p)
	}
	c.GeesefsBin = p
	return nil
}

// selectTargets returns the targets chosen with -only (all by default),
// and the FUSE floor when a legacy workload is selected.
func selectTargets(cfg config) []target {
	var out []target
	for _, t := range allTargets(cfg) {
		if isFloor(t) {
			// The floor runs only the legacy workloads, and always with
			// them: their bounds need it.
			if cfg.selectedAny(legacyWorkloads) {
				out = append(out, t)
			}
			continue
		}
		if len(cfg.Only) == 0 || slices.Contains(cfg.Only, t.Name()) {
			out = append(out, t)
		}
	}
	return out
}

// rawTarget is the minio-go client used directly: the upper bound.
type rawTarget struct{}

// Name implements target.
func (rawTarget) Name() string { return "raw" }

// DurableAtClose implements target: every call returns after the server
// answered.
func (rawTarget) DurableAtClose() bool { return true }

// Namespace implements target, as DurableAtClose.
func (rawTarget) Namespace() nsContract { return nsContract{durable: nsAtReturn} }

// Start implements target.
func (rawTarget) Start(_ context.Context, env *benchEnv, bucket, _ string) (*instance, error) {
	return &instance{
		driver: &s3Driver{env: env, bucket: bucket},
		stop:   func() error { return nil },
		kill:   func() {},
	}, nil
}

// mountSpec is what a mount command is built from.
type mountSpec struct {
	env        *benchEnv
	bucket     string
	mountpoint string
	cacheDir   string
	scratch    string // private directory for config files
	// metricsAddr is where to serve Prometheus metrics ("" = nowhere); set
	// only for targets with metrics.
	metricsAddr string
}

// mountTarget is a FUSE filesystem started as a foreground process; the
// targets differ only in their command line.
type mountTarget struct {
	name      string
	durable   bool
	namespace nsContract
	metrics   bool // serves fencefs's Prometheus metrics when given an address
	// command returns the program, its arguments and extra environment
	// variables to mount s.bucket at s.mountpoint in the foreground.
	command func(s mountSpec) (prog string, args, env []string, err error)
}

// Name implements target.
func (t *mountTarget) Name() string { return t.name }

// DurableAtClose implements target.
func (t *mountTarget) DurableAtClose() bool { return t.durable }

// Namespace implements target.
func (t *mountTarget) Namespace() nsContract { return t.namespace }

// mountReadyTimeout bounds the wait for a mount to appear.
const mountReadyTimeout = 60 * time.Second

// Start implements target: it runs the mount command in its own process
// group (so a terminal's Ctrl-C reaches only the benchmark, which unmounts
// in order) and waits until the mountpoint appears in /proc/self/mountinfo.
func (t *mountTarget) Start(ctx context.Context, env *benchEnv, bucket, scratch string) (*instance, error) {
	spec := mountSpec{
		env:        env,
		bucket:     bucket,
		mountpoint: filepath.Join(scratch, "mnt"),
		cacheDir:   filepath.Join(scratch, "cache"),
		scratch:    scratch,
	}
	if t.metrics && env.cfg.CountRequests {
		port, err := gateway.FreePort()
		if err != nil {
			return nil, err
		}
		spec.metricsAddr = fmt.Sprintf("127.0.0.1:%d", port)
	}
	for _, d := range []string{spec.mountpoint, spec.cacheDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	prog, args, extraEnv, err := t.command(spec)
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(scratch, "mount.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(prog, args...)
	cmd.Env = append(cleanEnv(), extraEnv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig: if the benchmark dies hard, the mount still unmounts.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	slog.Debug("mount", "target", t.name, "cmd", prog, "args", args)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", prog, err)
	}
	p := &mountProc{cmd: cmd, dir: spec.mountpoint, logPath: logPath, done: make(chan struct{})}
	go func() { p.waitErr = cmd.Wait(); close(p.done) }()
	in := &instance{
		driver:      &fsDriver{root: spec.mountpoint, chunk: env.cfg.WriteChunk},
		pid:         cmd.Process.Pid,
		logPath:     logPath,
		cacheDir:    spec.cacheDir,
		metricsAddr: spec.metricsAddr,
		stop:        p.stop,
		kill:        p.kill,
	}
	if err := p.waitMounted(ctx, mountReadyTimeout); err != nil {
		_ = p.stop()
		return nil, err
	}
	return in, nil
}

// cleanEnv is the benchmark's environment without AWS_*, RCLONE_* and FENCEFS_*
// variables, so that every target sees only the settings its command line
// gives it (a stray AWS_CA_BUNDLE, for one, makes rclone refuse to start).
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "RCLONE_") && !strings.HasPrefix(kv, "FENCEFS_") {
			env = append(env, kv)
		}
	}
	return env
}

// mountProc is a running mount process.
type mountProc struct {
	cmd     *exec.Cmd
	dir     string
	logPath string
	done    chan struct{} // closed when the process has exited
	waitErr error         // valid after done is closed

	stopOnce sync.Once
	stopErr  error
}

// waitMounted waits until p.dir is a mountpoint, the process exits, ctx is
// done or timeout passes.
func (p *mountProc) waitMounted(ctx context.Context, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if ok, err := mounts.IsMounted(p.dir); err != nil {
			return err
		} else if ok {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("mount process exited before mounting (%v); log:\n%s", p.waitErr, tail(p.logPath))
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("%s not mounted after %v; log:\n%s", p.dir, timeout, tail(p.logPath))
		case <-tick.C:
		}
	}
}

// stop unmounts gracefully: SIGTERM (fencefs, s3fs and rclone all flush,
// unmount and exit on it), then fusermount3 -u, then SIGKILL and a lazy
// unmount. It reports an error if the process did not exit cleanly or the
// mount had to be forced.
func (p *mountProc) stop() error {
	p.stopOnce.Do(func() {
		var errs []error
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			if !exitedCleanly(p.waitErr) {
				errs = append(errs, fmt.Errorf("mount process exited with %v after SIGTERM", p.waitErr))
			}
		case <-time.After(30 * time.Second):
			errs = append(errs, errors.New("mount process did not exit within 30s of SIGTERM"))
			_ = mounts.Unmount(context.Background(), p.dir)
			p.kill()
		}
		if err := mounts.Unmount(context.Background(), p.dir); err != nil {
			errs = append(errs, err)
		}
		p.stopErr = errors.Join(errs...)
		if p.stopErr != nil {
			p.stopErr = fmt.Errorf("%w; log:\n%s", p.stopErr, tail(p.logPath))
		}
	})
	return p.stopErr
}

// exitedCleanly reports whether a mount process's exit after SIGTERM is a
// normal one: status 0, death by the SIGTERM itself, or status 143
// (128+SIGTERM, what rclone exits with after unmounting on SIGTERM).
func exitedCleanly(waitErr error) bool {
	if waitErr == nil {
		return true
	}
	var ee *exec.ExitError
	if !errors.As(waitErr, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok {
		return false
	}
	return (ws.Signaled() && ws.Signal() == syscall.SIGTERM) || (ws.Exited() && ws.ExitStatus() == 128+int(syscall.SIGTERM))
}

// kill sends SIGKILL and lazily unmounts the mountpoint, so that system
// calls blocked on it return (ENOTCONN).
func (p *mountProc) kill() {
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
	_ = mounts.Lazy(context.Background(), p.dir)
}

// tail returns the last lines of a log file, for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}
