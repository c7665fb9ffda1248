package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/fencing"
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
		Use:   "run [--etcd URL[,URL...] | --zookeeper HOST:PORT[,...] | --kubernetes-lease [NAMESPACE/]NAME] --lease NAME --mount MOUNTPOINT [flags] -- COMMAND [ARGS...]",
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

With --zookeeper (or zookeeper.servers set in the environment or the config
file) the leader is elected in a ZooKeeper ensemble instead: fencefs run
creates an ephemeral sequential znode under --zookeeper-prefix/NAME in a
session whose timeout is the TTL, and once its znode is the lowest, binds the
znode's creation zxid as the token. The leadership is lost when the session
expires, no server answers for the session timeout, or the znode is deleted;
fencefs run then exits 75 as above. It deletes its znode when COMMAND exits
(see docs/ZOOKEEPER.md).

With --kubernetes-lease [NAMESPACE/]NAME (or kubernetes.lease set in the
environment or the config file) the leader is elected by that Kubernetes
Lease, with client-go's leader election (--kubeconfig, KUBECONFIG,
~/.kube/config, else the pod's in-cluster config): once fencefs run holds
it, it binds the Lease's resourceVersion after the write that made it the
holder as the token (--lease may be left out: it is NAME). The leadership
is lost when no renewal lands within 4/5 of --ttl, another holder takes the
Lease, or it is deleted; fencefs run then exits 75 as above. It writes the
Lease free when COMMAND exits (see docs/CLI.md).

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
	addAdminFlags(cmd, config.GroupMetrics|config.GroupEtcd|config.GroupZooKeeper|config.GroupKubernetes)
	f.String("fence-domain", config.DomainBucket, "fence domain of the mount: bucket or prefix")
	return cmd
}

// runRun is the body of `fencefs run`: check the flags and the mount, wait
// for the leadership (a signal abandons the wait), then run COMMAND under
// it and exit with its status.
func runRun(cmd *cobra.Command, o runOptions, argv []string) error {
	co, mp, target, err := checkRun(cmd, &o)
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	w := watchWait(sigs)
	defer w.close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	env, err := openAdmin(w.ctx, cmd, target, reg)
	if err != nil {
		return interruptedOr(w.end(), o, err)
	}
	defer env.close()
	setSecrets(append(env.cfg.Secrets(), append(co.etcd.Secrets(), co.zk.Secrets()...)...))
	var held atomic.Pointer[lease.Leader] // for /healthz, once acquired
	stopMetrics, err := serveRunMetrics(env, reg, o.lease, &held)
	if err != nil {
		return interruptedOr(w.end(), o, err)
	}
	defer stopMetrics()
	l, closeElect, err := acquireLeader(w.ctx, co, env, o, mp, reg)
	if err != nil {
		return interruptedOr(w.end(), o, err)
	}
	defer closeElect()
	held.Store(&l)

	release := func() { releaseLeader(l, o, env) }
	if sig := w.end(); sig != nil {
		// Interrupted just as the lease came.
		release()
		return interruptedOr(sig, o, nil)
	}
	if l.Err() != nil {
		release()
		return exitError{code: exitLeaseLost, msg: fmt.Sprintf("fencefs: run: lease %s lost before %s started: %v", o.lease, argv[0], l.Err())}
	}
	c, err := startCommand(o, argv, l.Token(), mp)
	if err != nil {
		release()
		return err
	}
	waitErr, lostErr := superviseCommand(env, o, c, l, sigs)
	if lostErr == nil {
		lostErr = resolveLeadership(env, o, l, mp)
	}
	release()
	return runExit(o, argv[0], c.ProcessState, waitErr, lostErr)
}

// coordinators are the settings of the coordinators fencefs run may elect
// in (at most one enabled; none: the S3 lease).
type coordinators struct {
	etcd *config.Etcd
	zk   *config.ZooKeeper
	kube *config.Kubernetes
}

// checkRun checks the flags of `fencefs run` and the mount at o.mount, and
// returns the coordinators' settings, the absolute mountpoint and the
// BUCKET[/PREFIX] to configure (see runTarget). A Kubernetes Lease names
// o.lease when --lease is not given.
func checkRun(cmd *cobra.Command, o *runOptions) (co coordinators, mp, target string, err error) {
	if co, err = loadCoordinators(cmd, *o); err != nil {
		return co, "", "", err
	}
	if co.kube.Enabled() {
		if o.lease == "" {
			o.lease = co.kube.Name
		} else if o.lease != co.kube.Name {
			return co, "", "", usageErrorf("--lease %s and --kubernetes-lease %s name different leases (give --kubernetes-lease alone: --lease is its NAME)", o.lease, co.kube.Name)
		}
	}
	switch {
	case o.lease == "":
		return co, "", "", usageErrorf("--lease NAME is required")
	case o.mount == "":
		return co, "", "", usageErrorf("--mount MOUNTPOINT is required")
	case o.ttl < lease.MinTTL:
		return co, "", "", usageErrorf("--ttl %v is below the minimum %v", o.ttl, lease.MinTTL)
	case o.grace < 0:
		return co, "", "", usageErrorf("--grace %v is negative", o.grace)
	}
	if err := lease.ValidName(o.lease); err != nil {
		return co, "", "", usageErrorf("--lease: %v", err)
	}
	mp, err = filepath.Abs(o.mount)
	if err != nil {
		return co, "", "", usageErrorf("--mount: %v", err)
	}
	target, err = runTarget(mp, o.bucket)
	if err != nil {
		return co, "", "", err
	}
	if st, err := readStatus(mp); err != nil {
		return co, "", "", err
	} else if st["state"] == "off" {
		return co, "", "", usageErrorf("the mount at %s has fencing off (fence.mode=off): fencefs run needs a fenced mount", mp)
	}
	return co, mp, target, nil
}

// loadCoordinators reads the etcd and ZooKeeper settings and refuses both
// at once (each is a token source of its own).
func loadCoordinators(cmd *cobra.Command, o runOptions) (co coordinators, err error) {
	src := config.Source{Flags: cmd.Flags()}
	if co.etcd, err = config.LoadEtcd(src); err != nil {
		return co, usageError{err}
	}
	if co.zk, err = config.LoadZooKeeper(src); err != nil {
		return co, usageError{err}
	}
	if co.kube, err = config.LoadKubernetes(src); err != nil {
		return co, usageError{err}
	}
	switch {
	case co.kube.Enabled() && (co.etcd.Enabled() || co.zk.Enabled()):
		return co, usageErrorf("the Kubernetes Lease %s and etcd or ZooKeeper are both set: a fence domain takes its tokens from one source; keep one of kubernetes.lease, etcd.endpoints and zookeeper.servers", co.kube.Name)
	case co.kube.Enabled():
		return co, checkKubeTTL(o.ttl)
	case co.etcd.Enabled() && co.zk.Enabled():
		return co, usageErrorf("etcd (%s) and ZooKeeper (%s) are both set: a fence domain takes its tokens from one source; keep one of etcd.endpoints and zookeeper.servers",
			strings.Join(co.etcd.Endpoints, ","), strings.Join(co.zk.Servers, ","))
	case co.etcd.Enabled():
		return co, checkEtcdTTL(o.ttl)
	}
	return co, nil
}

// waitPhase is the signal handling while fencefs run waits for the lease: a
// signal cancels ctx, and end reports it.
type waitPhase struct {
	ctx         context.Context
	cancel      context.CancelFunc
	interrupted os.Signal // written by the goroutine; read after end
	stop        chan struct{}
	exited      chan struct{}
	endOnce     sync.Once
}

// watchWait starts the wait phase's handler of sigs.
func watchWait(sigs <-chan os.Signal) *waitPhase {
	w := &waitPhase{stop: make(chan struct{}), exited: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	go func() {
		defer close(w.exited)
		select {
		case sig := <-sigs:
			w.interrupted = sig
			w.cancel()
		case <-w.stop:
		}
	}()
	return w
}

// end stops the wait-phase signal handler (it may be called again) and
// returns the signal that interrupted the wait, if any.
func (w *waitPhase) end() os.Signal {
	w.endOnce.Do(func() { close(w.stop) })
	<-w.exited
	return w.interrupted
}

// close ends the wait phase and cancels its context.
func (w *waitPhase) close() {
	w.end()
	w.cancel()
}

// serveRunMetrics serves the metrics of reg and /healthz (leaseHealth of
// the leader held, once stored) when metrics.addr is set. The returned
// function stops the server.
func serveRunMetrics(env *adminEnv, reg *prometheus.Registry, name string, held *atomic.Pointer[lease.Leader]) (func(), error) {
	addr := env.cfg.Metrics.Addr
	if addr == "" {
		return func() {}, nil
	}
	ms, err := listenMetrics(addr, reg, func() (int, string) {
		if p := held.Load(); p != nil {
			return leaseHealth(name, *p)
		}
		return leaseHealth(name, nil)
	})
	if err != nil {
		return nil, err
	}
	ms.serve(env.log)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ms.close(ctx)
	}, nil
}

// acquireLeader waits for the leadership, in etcd, ZooKeeper or a
// Kubernetes Lease when one is enabled, else the S3 lease, and binds its token on the mount at mp. The
// returned function closes what the election needs (after Release).
func acquireLeader(ctx context.Context, co coordinators, env *adminEnv, o runOptions, mp string, reg prometheus.Registerer) (lease.Leader, func(), error) {
	switch {
	case co.etcd.Enabled():
		return campaignEtcd(ctx, co.etcd, env, o, mp, reg)
	case co.zk.Enabled():
		return campaignZooKeeper(ctx, co.zk, env, o, mp, reg)
	case co.kube.Enabled():
		return campaignKubernetes(ctx, co.kube, env, o, mp, reg)
	}
	l, err := acquireS3Lease(ctx, env, o, mp, reg)
	return l, func() {}, err
}

// releaseLeader releases l within the TTL; a failure is only logged (the
// lease expires anyway).
func releaseLeader(l lease.Leader, o runOptions, env *adminEnv) {
	ctx, cancel := context.WithTimeout(context.Background(), o.ttl)
	defer cancel()
	if err := l.Release(ctx); err != nil && !errors.Is(err, lease.ErrLost) {
		env.log.Warn("could not release the lease; it expires after its TTL", "lease", o.lease, "err", err)
	}
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
	case errors.Is(err, unix.EOVERFLOW):
		return fmt.Errorf("the mount at %s could not bind a token (EOVERFLOW): the fence domain's token space is spent (the epoch register is at the largest token, %d); see docs/OPERATIONS.md", mp, fencing.MaxToken)
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
