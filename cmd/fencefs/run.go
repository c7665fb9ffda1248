package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/fusefs"
	"github.com/fencefs/fencefs/lease"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// Exit statuses of `fencefs run` besides the command's own.
const (
	// exitLeaseLost: the lease was lost while the command ran
	// (EX_TEMPFAIL: try again later).
	exitLeaseLost = 75
	// exitCannotExec and exitNotFound follow the shells' convention.
	exitCannotExec = 126
	exitNotFound   = 127
)

// runOptions are the flags of `fencefs run` beyond the configuration.
type runOptions struct {
	lease      string
	mount      string
	bucket     string
	ttl        time.Duration
	grace      time.Duration
	foreground bool
}

func newRunCmd() *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run [--etcd URL[,URL...]] --lease NAME --mount MOUNTPOINT [flags] -- COMMAND [ARGS...]",
		Short: "Run a command while holding a lease, fenced by the lease's token",
		Long: `Wait for the lease NAME on the bucket of the fencefs mount at MOUNTPOINT,
bind the next fencing token on that mount (as "setfattr -n user.fencefs.token
-v auto" would), then run COMMAND with FENCEFS_TOKEN, FENCEFS_LEASE and
FENCEFS_MOUNT set, renewing the lease while it runs.

If the lease is lost (it could not be renewed within --ttl, or another holder
took it over) COMMAND is sent SIGTERM, then SIGKILL after --grace, and fencefs
run exits 75. Whatever this process does in time, a newer holder binds a newer
token, after which the storage refuses every write through this mount (EROFS):
a frozen old holder cannot corrupt the bucket when it wakes up.

The lease is released when COMMAND exits, so a waiting "fencefs run" takes
over at once; fencefs run then exits with COMMAND's status (128+N if it was
killed by signal N). SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are
forwarded to COMMAND; before COMMAND starts they abandon the wait.

COMMAND runs in its own process group, which receives the signals, so that
its children are stopped too (as timeout(1) does); --foreground runs it in
fencefs run's group instead, so that it can read from the terminal, and
signals only COMMAND itself.

The bucket (and prefix) are read from the mount (its source in
/proc/self/mountinfo); endpoint and credentials come from the usual places
(flags, environment, config file). The lease object lives at
<domain>.fencefs/leases/NAME, next to the epoch register whose tokens it
hands out. Tokens are per fence domain: binding one fences every other writer
of the domain, so use one lease name per fence domain.

With --etcd (or etcd.endpoints set in the environment or the config file)
the leader is elected in etcd instead: fencefs run campaigns in the election
NAME (under --etcd-prefix, in a session whose lease has the TTL), and once it
wins, binds the leader key's create revision as the token. The leadership is
lost when the session ends (keepalives unanswered for the TTL: etcd
unreachable, the lease expired) or the key is deleted; COMMAND is then
stopped the same way, and fencefs run exits 75. It resigns when COMMAND
exits. A fence domain takes its tokens from one source: a revision not above
the bucket's epoch is refused (see docs/ETCD.md).

Exit status: COMMAND's; 75 if the lease was lost; 126/127 if COMMAND cannot be
run; 2 for usage errors; 1 for other failures; 130/143 if interrupted while
waiting.`,
		Example: `  fencefs run --lease primary --mount /mnt/data -- /usr/local/bin/ingest --spool /mnt/data/spool`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRun(cmd, o, args)
		},
	}
	f := cmd.Flags()
	// Flags stop at COMMAND, so that its own flags need no "--".
	f.SetInterspersed(false)
	f.StringVar(&o.lease, "lease", "", "name of the lease (required)")
	f.StringVar(&o.mount, "mount", "", "mountpoint of a fencefs mount of the bucket (required)")
	f.StringVar(&o.bucket, "bucket", "", "BUCKET[/PREFIX] of the mount, when its mountinfo source does not tell")
	f.DurationVar(&o.ttl, "ttl", lease.DefaultTTL, "lease TTL: renewed every TTL/3, lost without a renewal for 4/5 of it")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL when the lease is lost")
	f.BoolVar(&o.foreground, "foreground", false, "run COMMAND in this process group (it can read the terminal; its children are not signalled)")
	addAdminFlags(cmd, config.GroupMetrics|config.GroupEtcd)
	f.String("fence-domain", config.DomainBucket, "fence domain of the mount: bucket or prefix")
	return cmd
}

// runRun is the body of `fencefs run`.
func runRun(cmd *cobra.Command, o runOptions, argv []string) error {
	switch {
	case o.lease == "":
		return usageErrorf("--lease NAME is required")
	case o.mount == "":
		return usageErrorf("--mount MOUNTPOINT is required")
	case o.ttl < lease.MinTTL:
		return usageErrorf("--ttl %v is below the minimum %v", o.ttl, lease.MinTTL)
	case o.grace < 0:
		return usageErrorf("--grace %v is negative", o.grace)
	}
	if err := lease.ValidName(o.lease); err != nil {
		return usageErrorf("--lease: %v", err)
	}
	ec, err := config.LoadEtcd(config.Source{Flags: cmd.Flags()})
	if err != nil {
		return usageError{err}
	}
	if ec.Enabled() {
		if err := checkEtcdTTL(o.ttl); err != nil {
			return err
		}
	}
	mp, err := filepath.Abs(o.mount)
	if err != nil {
		return usageErrorf("--mount: %v", err)
	}
	target, err := runTarget(mp, o.bucket)
	if err != nil {
		return err
	}
	if st, err := readStatus(mp); err != nil {
		return err
	} else if st["state"] == "off" {
		return usageErrorf("the mount at %s has fencing off (fence.mode=off): fencefs run needs a fenced mount", mp)
	}

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)

	// Waiting: a signal abandons it.
	waitCtx, cancelWait := context.WithCancel(context.Background())
	defer cancelWait()
	var (
		interrupted os.Signal // written by the goroutine; read after endWait
		stopWait    = make(chan struct{})
		waitExited  = make(chan struct{})
		endOnce     sync.Once
	)
	go func() {
		defer close(waitExited)
		select {
		case sig := <-sigs:
			interrupted = sig
			cancelWait()
		case <-stopWait:
		}
	}()
	// endWait stops the wait-phase signal handler and returns the signal
	// that interrupted the wait, if any.
	endWait := func() os.Signal {
		endOnce.Do(func() { close(stopWait) })
		<-waitExited
		return interrupted
	}
	defer endWait()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	env, err := openAdmin(waitCtx, cmd, target, reg)
	if err != nil {
		return interruptedOr(endWait(), o, err)
	}
	defer env.close()
	setSecrets(append(env.cfg.Secrets(), ec.Secrets()...))
	var held atomic.Pointer[lease.Leader] // for /healthz, once acquired
	if addr := env.cfg.Metrics.Addr; addr != "" {
		ms, err := listenMetrics(addr, reg, func() (int, string) {
			if p := held.Load(); p != nil {
				return leaseHealth(o.lease, *p)
			}
			return leaseHealth(o.lease, nil)
		})
		if err != nil {
			return interruptedOr(endWait(), o, err)
		}
		ms.serve(env.log)
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			ms.close(ctx)
		}()
	}
	var (
		l          lease.Leader
		closeElect = func() {}
	)
	if ec.Enabled() {
		l, closeElect, err = campaignEtcd(waitCtx, ec, env, o, mp, reg)
	} else {
		l, err = acquireS3Lease(waitCtx, env, o, mp, reg)
	}
	if err != nil {
		return interruptedOr(endWait(), o, err)
	}
	defer closeElect()
	held.Store(&l)

	releaseLease := func() {
		ctx, cancel := context.WithTimeout(context.Background(), o.ttl)
		defer cancel()
		if err := l.Release(ctx); err != nil && !errors.Is(err, lease.ErrLost) {
			env.log.Warn("could not release the lease; it expires after its TTL", "lease", o.lease, "err", err)
		}
	}
	if sig := endWait(); sig != nil {
		// Interrupted just as the lease came.
		releaseLease()
		return interruptedOr(sig, o, nil)
	}
	if l.Err() != nil {
		releaseLease()
		return exitError{code: exitLeaseLost, msg: fmt.Sprintf("fencefs: run: lease %s lost before %s started: %v", o.lease, argv[0], l.Err())}
	}

	c := exec.Command(argv[0], argv[1:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.Env = append(os.Environ(),
		"FENCEFS_TOKEN="+strconv.FormatUint(l.Token(), 10),
		"FENCEFS_LEASE="+o.lease,
		"FENCEFS_MOUNT="+mp,
	)
	// The command must not outlive an unsupervised lease: if this process
	// dies, the kernel sends it SIGTERM.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: !o.foreground, Pdeathsig: syscall.SIGTERM}
	if err := c.Start(); err != nil {
		releaseLease()
		code := exitCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		return exitError{code: code, msg: fmt.Sprintf("fencefs: run: cannot run %s: %v", argv[0], unwrapPath(err))}
	}
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
		waitErr  error
		lostErr  error
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
	releaseLease()

	status, how := exitStatus(c.ProcessState, waitErr)
	if lostErr != nil {
		reason := strings.TrimPrefix(lostErr.Error(), lease.ErrLost.Error()+": ")
		return exitError{code: exitLeaseLost, msg: fmt.Sprintf("fencefs: run: lease %s lost: %s; %s %s", o.lease, reason, argv[0], how)}
	}
	if status != 0 {
		return exitError{code: status}
	}
	return nil
}

// acquireS3Lease waits for the lease o.lease on the bucket and binds the
// register's next epoch on the mount at mp.
func acquireS3Lease(ctx context.Context, env *adminEnv, o runOptions, mp string, reg prometheus.Registerer) (lease.Leader, error) {
	domain := env.cfg.DomainKeyPrefix()
	env.log.Info("waiting for the lease", "lease", o.lease, "bucket", env.cfg.S3.Bucket, "domain", domain, "mount", mp)
	l, err := lease.Acquire(ctx, env.store, o.lease, lease.Options{
		TTL:        o.ttl,
		Domain:     domain,
		Bind:       mountBinder(mp, config.TokenAuto),
		Logger:     env.log,
		Registerer: reg,
	})
	if err != nil {
		return nil, explainStoreErr(env.cfg, err)
	}
	return l, nil
}

// interruptedOr reports an interruption by sig while waiting (exit
// 128+sig), or err when sig is nil.
func interruptedOr(sig os.Signal, o runOptions, err error) error {
	if sig == nil {
		return err
	}
	code := 130
	if s, ok := sig.(syscall.Signal); ok {
		code = 128 + int(s)
	}
	return exitError{code: code, msg: fmt.Sprintf("fencefs: run: interrupted by %v while waiting for lease %s", sig, o.lease)}
}

// exitStatus turns a finished command into fencefs run's exit status and a
// description ("exited with status 3", "was killed by SIGTERM").
func exitStatus(ps *os.ProcessState, waitErr error) (int, string) {
	if ps == nil {
		return exitFailure, fmt.Sprintf("failed: %v", waitErr)
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), "was stopped by " + unix.SignalName(ws.Signal())
	}
	return ps.ExitCode(), fmt.Sprintf("exited with status %d", ps.ExitCode())
}

// runTarget returns BUCKET[/PREFIX] for the configuration: --bucket, else
// the source of the fencefs mount at mp (fencefs mounts show
// "BUCKET[/PREFIX/]" there), else "" (s3.bucket from the environment or the
// config file). It fails if mp is not a fencefs mount.
func runTarget(mp, bucketFlag string) (string, error) {
	fi, err := os.Stat(mp)
	if err != nil {
		return "", usageErrorf("--mount %s: %v", mp, unwrapPath(err))
	}
	if !fi.IsDir() {
		return "", usageErrorf("--mount %s is not a directory", mp)
	}
	source, ok, err := fencefsMountSource(mp)
	if err != nil {
		return "", fmt.Errorf("cannot read the mount table: %v", err)
	}
	if !ok {
		return "", usageErrorf("--mount %s is not a fencefs mount (mount the bucket there first: fencefs mount BUCKET %s)", mp, mp)
	}
	if bucketFlag != "" {
		return bucketFlag, nil
	}
	if b, _, err := config.SplitTarget(source); err == nil && b != "fencefs" {
		return source, nil
	}
	return "", nil
}

// fencefsMountSource returns the source field of the fuse.fencefs mount at
// mp; ok is false when mp is not one.
func fencefsMountSource(mp string) (source string, ok bool, err error) {
	m, ok, err := mountAt(mp)
	if err != nil || !ok || m.FSType != fencefsType {
		return "", false, err
	}
	return m.Source, true, nil
}

// mountBinder binds token (a number, or "auto": the register's next epoch)
// on the mount at mp through its root xattr and returns the token bound.
// The setxattr blocks for the bind and its takeover sweep; if ctx ends
// first the call is abandoned (the syscall cannot be interrupted) and ctx's
// error returned.
func mountBinder(mp, token string) func(ctx context.Context) (uint64, error) {
	return func(ctx context.Context) (uint64, error) {
		type res struct {
			tok uint64
			err error
		}
		ch := make(chan res, 1)
		go func() {
			if err := unix.Setxattr(mp, fusefs.XattrToken, []byte(token), 0); err != nil {
				ch <- res{err: explainBindErrno(mp, err)}
				return
			}
			buf := make([]byte, 64)
			n, err := unix.Getxattr(mp, fusefs.XattrToken, buf)
			if err != nil {
				ch <- res{err: fmt.Errorf("reading back %s of %s: %v", fusefs.XattrToken, mp, err)}
				return
			}
			tok, err := strconv.ParseUint(strings.TrimSpace(string(buf[:n])), 10, 64)
			if err != nil || tok == 0 {
				ch <- res{err: fmt.Errorf("%s shows token %q after binding", mp, buf[:n])}
				return
			}
			ch <- res{tok: tok}
		}()
		select {
		case r := <-ch:
			return r.tok, r.err
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// explainBindErrno describes a failed setxattr of the token.
func explainBindErrno(mp string, err error) error {
	switch {
	case errors.Is(err, unix.EROFS):
		return fmt.Errorf("the mount at %s refused the token (EROFS): it is read-only (--read-only) or its fencing is off, or a newer epoch appeared meanwhile", mp)
	case errors.Is(err, unix.EIO):
		return fmt.Errorf("the mount at %s could not bind a token (EIO): the epoch register could not be read or written; see the mount's log", mp)
	case errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.EPERM):
		return fmt.Errorf("the mount at %s does not accept %s (%v): is it a fencefs mount?", mp, fusefs.XattrToken, err)
	}
	return fmt.Errorf("binding a token on %s: %v", mp, err)
}

// leaseHealth is fencefs run's /healthz: 200 while the lease (or the etcd
// leadership) is held (the command runs), 503 while waiting for it (l nil)
// and after it was lost or released. The body says which.
func leaseHealth(name string, l lease.Leader) (int, string) {
	switch {
	case l == nil:
		return http.StatusServiceUnavailable, fmt.Sprintf("waiting for lease %s", name)
	case l.Held():
		return http.StatusOK, fmt.Sprintf("ok lease=%s token=%d", name, l.Token())
	case l.Err() != nil:
		return http.StatusServiceUnavailable, fmt.Sprintf("lease %s ended: %v", name, l.Err())
	}
	return http.StatusServiceUnavailable, fmt.Sprintf("lease %s not renewed in time", name)
}
