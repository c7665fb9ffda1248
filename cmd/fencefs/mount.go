package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/s3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
)

// Timeouts of the mount lifecycle.
const (
	// startTimeout bounds connecting, checking the bucket, binding the
	// token (with its takeover sweep) and mounting.
	startTimeout = 2 * time.Minute
	// checkTimeout bounds the first request to the bucket, so that an
	// unreachable endpoint fails the mount promptly.
	checkTimeout = 30 * time.Second
	// stopTimeout bounds flushing dirty files and unmounting after a signal.
	stopTimeout = 2 * time.Minute
)

func addMountFlags(cmd *cobra.Command) {
	config.RegisterFlags(cmd.Flags(), config.GroupAll)
	cmd.Flags().BoolP("foreground", "f", false, "stay in the foreground (default: return once the mount is ready and serve in the background)")
}

func newMountCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mount BUCKET[/PREFIX] MOUNTPOINT",
		Short: "Mount a bucket (or a prefix of it)",
		Long: `Mount BUCKET (or only the keys under PREFIX) at MOUNTPOINT.

With a fencing token (--token N, --token auto, --token-file PATH, or later
"setfattr -n user.fencefs.token -v N MOUNTPOINT") the mount binds the token
before it accepts writes; if the token cannot bind (a newer epoch exists, or
another holder has it) the mount fails. Without a token the mount is
read-only until a token is set. --read-only never binds a token.

By default fencefs returns once the mount is ready and keeps serving in the
background; --foreground keeps it attached. SIGTERM or SIGINT flush dirty
files, unmount and exit 0. With NOTIFY_SOCKET set (systemd Type=notify) it
reports READY=1 when the mount is serving.`,
		Example: `  # A leader's mount with epoch 7 (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY set):
  fencefs mount logs /srv/logs --endpoint https://s3.example.net --token 7

  # The next leader: the register's newest epoch + 1; the old leader is fenced.
  fencefs mount logs /srv/logs --endpoint https://s3.example.net --token auto

  # Only the keys under app/, read-only, logging to a file:
  fencefs mount logs/app /mnt/app --read-only --log-file /tmp/fencefs.log

  # In the foreground, for systemd (Type=notify) or a terminal:
  fencefs mount logs /srv/logs --foreground --token-file /run/leader/epoch

  # Stop (commits every change first):
  fusermount3 -u /srv/logs`,
		Args: cobra.ExactArgs(2),
		RunE: runMountCmd,
	}
	addMountFlags(cmd)
	return cmd
}

// runMountCmd is the mount command and the helper form of the root command.
func runMountCmd(cmd *cobra.Command, args []string) error {
	cfg, err := config.Load(config.Source{Flags: cmd.Flags(), Target: args[0], Mountpoint: args[1]}, true)
	if err != nil {
		return usageError{err}
	}
	setSecrets(cfg.Secrets())
	foreground, _ := cmd.Flags().GetBool("foreground")
	if !foreground && !isDaemonChild() {
		// Check what can be checked cheaply before forking, so that common
		// mistakes are reported by the process the user started.
		if err := checkMountpoint(cfg.Mount.Mountpoint, cfg.Mount.Nonempty); err != nil {
			return err
		}
		summary, err := daemonize()
		if err == nil && cmd.Name() == "mount" {
			// Not in the helper form: mount(8) prints what a helper says.
			fmt.Fprintln(cmd.OutOrStdout(), summary)
		}
		return err
	}
	rd := newReadiness()
	err = serveMount(cfg, rd)
	if err != nil {
		code := exitFailure
		var ue usageError
		if errors.As(err, &ue) {
			code = exitUsage
		}
		rd.Fail(code, "fencefs: mount: "+redact(err.Error()))
	}
	return err
}

// checkMountpoint verifies that mp is an existing directory, and, unless
// nonempty, an empty one that is not a mount already: mounting over files
// hides them, and mounting over a fencefs mount hides that mount (still
// running, fenced by nothing, unreachable).
func checkMountpoint(mp string, nonempty bool) error {
	if err := checkMountDir(mp); err != nil || nonempty {
		return err
	}
	if m, ok, err := mountAt(mp); err == nil && ok {
		what := "a " + m.FSType + " mount"
		if m.FSType == fencefsType {
			what = "a fencefs mount of " + m.Source
		}
		return fmt.Errorf("mountpoint %s is %s already: unmount it first (fusermount3 -u %s), or give --nonempty (-o nonempty) to mount over it", mp, what, mp)
	}
	d, err := os.Open(mp)
	if err != nil {
		return fmt.Errorf("mountpoint %s: %v", mp, unwrapPath(err))
	}
	defer d.Close()
	if names, _ := d.Readdirnames(1); len(names) > 0 {
		return fmt.Errorf("mountpoint %s is not empty (it holds %s): the mount would hide its files; use an empty directory, or give --nonempty (-o nonempty)", mp, names[0])
	}
	return nil
}

// checkMountDir verifies that mp is an existing directory.
func checkMountDir(mp string) error {
	fi, err := os.Stat(mp)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("mountpoint %s does not exist", mp)
	case err != nil:
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("mountpoint %s: %v (is a dead mount still there? try fusermount3 -u %s)", mp, err, mp)
	case !fi.IsDir():
		return fmt.Errorf("mountpoint %s is not a directory", mp)
	}
	return nil
}

// mountRun is one running mount and what it needs at shutdown.
type mountRun struct {
	cfg         *config.Config
	log         *slog.Logger
	store       objstore.Store
	guard       *fencing.Guard
	fs          fsMount
	metrics     *metricsServer
	watcher     *tokenWatcher
	stopRefresh func() // stops the periodic register refresh; nil when none

	mu      sync.Mutex
	mounted bool // GUARDED_BY(mu): the kernel mount is up
}

// Mounted reports whether the kernel mount is up (for /healthz).
func (m *mountRun) Mounted() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mounted
}

func (m *mountRun) setMounted(v bool) {
	m.mu.Lock()
	m.mounted = v
	m.mu.Unlock()
}

// serveMount mounts according to cfg and serves until a signal or an
// external unmount. It reports readiness through rd. The returned error is
// the one line to print.
func serveMount(cfg *config.Config, rd *readiness) error {
	logger, closeLog, err := newLogger(cfg.Log, isDaemonChild())
	if err != nil {
		return usageError{fmt.Errorf("log.file: cannot open %s: %v", cfg.Log.File, unwrapPath(err))}
	}
	defer closeLog()

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	startCtx, cancelStart := context.WithTimeout(context.Background(), startTimeout)
	startErr := make(chan error, 1)
	run := &mountRun{cfg: cfg, log: logger}
	go func() { startErr <- run.start(startCtx) }()
	select {
	case err = <-startErr:
	case sig := <-sigs:
		logger.Info("signal during startup; giving up", "signal", sig.String())
		cancelStart()
		if err := <-startErr; err != nil {
			run.stop()
			return fmt.Errorf("interrupted by %v: %w", sig, err)
		}
		// The mount was completed just as the signal came (it may already
		// be in use): stop it the normal way, as if the signal had come
		// a moment later.
		waitDone := make(chan struct{})
		go func() { run.fs.Wait(); close(waitDone) }()
		return run.shutdown(waitDone)
	}
	cancelStart()
	if err != nil {
		run.stop()
		return err
	}
	st := run.guard.Status()
	logger.Info("mounted", "mountpoint", cfg.Mount.Mountpoint, "bucket", cfg.S3.Bucket, "prefix", cfg.S3.Prefix,
		"endpoint", cfg.EndpointURL(), "state", st.State, "token", st.Token, "epoch", st.Epoch, "holder", st.Holder)
	rd.Ready(fmt.Sprintf("mounted %s at %s (%s)", cfg.S3.Bucket, cfg.Mount.Mountpoint, st.State), mountSummary(cfg, st, os.Getpid()))

	waitDone := make(chan struct{})
	go func() { run.fs.Wait(); close(waitDone) }()
	select {
	case sig := <-sigs:
		logger.Info("signal received: flushing and unmounting", "signal", sig.String())
		_ = sdNotify("STOPPING=1")
		go func() {
			// A second signal while stopping: log it; the bounded stop
			// timeout ends the wait.
			for s := range sigs {
				logger.Warn("still flushing and unmounting; signal ignored", "signal", s.String())
			}
		}()
		return run.shutdown(waitDone)
	case <-waitDone:
		logger.Info("unmounted externally; exiting")
		run.setMounted(false)
		_ = sdNotify("STOPPING=1")
		run.stop()
		return nil
	}
}

// start connects, checks the bucket, binds the token and mounts.
func (m *mountRun) start(ctx context.Context) error {
	cfg := m.cfg
	if err := checkMountpoint(cfg.Mount.Mountpoint, cfg.Mount.Nonempty); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.Mount.CacheDir, 0o700); err != nil {
		return fmt.Errorf("mount.cache_dir: cannot create %s: %v", cfg.Mount.CacheDir, unwrapPath(err))
	}
	if cfg.Fence.TokenFile != "" && cfg.Fence.Mode != config.ModeOff && !cfg.Mount.ReadOnly {
		// A local mistake is reported before any network error could hide
		// it. The file is read again just before binding: it may change
		// while we connect, and the watcher only sees later changes.
		if _, err := readTokenFile(cfg.Fence.TokenFile); err != nil {
			return err
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(), mountUp(m))
	if cfg.Metrics.Addr != "" {
		ms, err := listenMetrics(cfg.Metrics.Addr, reg, func() (int, string) { return healthz(m) })
		if err != nil {
			return err
		}
		m.metrics = ms
	}

	store, err := openStore(ctx, cfg, m.log, reg)
	if err != nil {
		return explainStoreErr(cfg, err)
	}
	m.store = store
	if s, ok := store.(interface{ CredentialsSource() string }); ok && cfg.S3.CredentialsSource == "" {
		cfg.S3.CredentialsSource = s.CredentialsSource()
	}
	creds := cfg.S3.CredentialsSource
	if creds == "" {
		creds = "none (anonymous access)"
	}
	m.log.Info("connected to the bucket", "bucket", cfg.S3.Bucket, "endpoint", cfg.EndpointURL(), "credentials", creds)
	if err := checkBucket(ctx, cfg, store); err != nil {
		return err
	}

	var caps *objstore.Capabilities
	if cfg.Fence.Mode != config.ModeOff && !cfg.Mount.ReadOnly {
		c, err := probeForMount(ctx, cfg, store, reg)
		if err != nil {
			return err
		}
		caps = c
		m.log.Info("storage probe passed", "mode", cfg.Fence.Mode, "tombstone_deletes", fencing.TombstoneDeletes(*caps),
			"plain_put_limit", objstore.SizingOf(store).PlainLimit, "took", caps.Duration)
	}
	guard, err := newGuard(cfg, store, caps, m.log, reg)
	if err != nil {
		return err
	}
	m.guard = guard

	if err := m.bindConfiguredToken(ctx); err != nil {
		return err
	}

	fs, err := mountFS(ctx, cfg, store, guard, caps, m.log, reg)
	if err != nil {
		return explainMountErr(cfg, err)
	}
	m.fs = fs
	m.setMounted(true)
	if hooks, _ := fencing.FailpointsFromEnv(); hooks.AfterMount != nil {
		hooks.AfterMount(ctx, cfg.Mount.Mountpoint) // newGuard refused a bad value
	}
	if cfg.Fence.Mode != config.ModeOff && cfg.Fence.RefreshInterval > 0 {
		m.stopRefresh = refreshLoop(guard, cfg.Fence.RefreshInterval, m.log)
	}
	if m.metrics != nil {
		m.metrics.serve(m.log)
	}
	return nil
}

// bindConfiguredToken binds the token of fence.token_file (and watches the
// file) or fence.token on m.guard; without one, or with fencing off or a
// read-only mount, nothing is bound.
func (m *mountRun) bindConfiguredToken(ctx context.Context) error {
	cfg := m.cfg
	if cfg.Fence.Mode == config.ModeOff && (cfg.Fence.Token != "" || cfg.Fence.TokenFile != "") {
		m.log.Warn("fence.mode is off: the fencing token is ignored and writes are not fenced")
	}
	if !cfg.Mount.ReadOnly && cfg.Fence.Mode != config.ModeOff {
		switch {
		case cfg.Fence.TokenFile != "":
			tok, err := readTokenFile(cfg.Fence.TokenFile)
			if err != nil {
				return err
			}
			if err := bindToken(ctx, cfg, m.guard, tok, "fence.token_file "+cfg.Fence.TokenFile); err != nil {
				return err
			}
			w, err := watchTokenFile(cfg.Fence.TokenFile, tok, cfg, m.guard, m.log)
			if err != nil {
				return err
			}
			m.watcher = w
		case cfg.Fence.Token != "":
			if err := bindToken(ctx, cfg, m.guard, cfg.Fence.Token, "fence.token"); err != nil {
				return err
			}
		default:
			m.log.Info("no fencing token: the mount is read-only until one is set (setfattr -n user.fencefs.token -v N MOUNTPOINT)")
		}
	}
	return nil
}

// shutdown flushes dirty files and unmounts after a signal, then releases
// everything. If the mount stays busy (a process keeps files open) after
// the dirty files were flushed, it is detached lazily so that nothing stays
// mounted; open files then fail with ENOTCONN once this process exits.
func (m *mountRun) shutdown(waitDone <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	var errs []error
	lazy, err := unmountRetry(ctx, m.fs, m.cfg.Mount.Mountpoint, m.log)
	if err != nil {
		errs = append(errs, err)
	}
	wait := stopTimeout
	if lazy || err != nil {
		// The kernel keeps a lazily detached mount's connection until its
		// last file is closed; don't wait for that.
		wait = 2 * time.Second
	}
	select {
	case <-waitDone:
	case <-time.After(wait):
		if !lazy && err == nil {
			errs = append(errs, fmt.Errorf("the filesystem server did not stop within %v", wait))
		}
	}
	m.setMounted(false)
	m.stop()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	m.log.Info("unmounted", "lazy", lazy)
	return nil
}

// unmountRetry asks the filesystem to commit its dirty files and unmount
// (fusefs itself retries EBUSY for a few seconds); if the mountpoint is still
// busy, it detaches the mount lazily (lazy is then true). A commit failure is
// returned even when the unmount succeeded: changes were lost.
func unmountRetry(ctx context.Context, fs fsMount, mp string, log *slog.Logger) (lazy bool, err error) {
	err = fs.Unmount(ctx)
	if err == nil {
		return false, nil
	}
	if _, ok, merr := mountAt(mp); merr == nil && !ok {
		// The mount is gone (unmounted by fusefs despite a commit failure,
		// or by someone else meanwhile): report only lost changes.
		return false, commitErrors(err)
	}
	if ctx.Err() != nil {
		return false, fmt.Errorf("could not unmount %s: %w", mp, err)
	}
	log.Warn("mountpoint still busy; detaching it lazily", "mountpoint", mp, "err", err)
	if lerr := lazyUnmount(mp); lerr != nil {
		return false, fmt.Errorf("could not unmount %s: %v (lazy unmount: %v)", mp, err, lerr)
	}
	return true, commitErrors(err)
}

// commitErrors drops from an error of fusefs's Unmount the part that only
// says the kernel unmount failed, keeping the commit failures (lost changes).
func commitErrors(err error) error {
	var keep []error
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		if e != nil && !strings.HasPrefix(e.Error(), "fusefs: unmount ") {
			keep = append(keep, e)
		}
	}
	walk(err)
	return errors.Join(keep...)
}

// stop releases what start acquired (idempotent, best effort).
func (m *mountRun) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if m.stopRefresh != nil {
		m.stopRefresh()
		m.stopRefresh = nil
	}
	if m.watcher != nil {
		m.watcher.Close()
		m.watcher = nil
	}
	if m.guard != nil {
		if err := m.guard.Close(ctx); err != nil {
			m.log.Warn("closing the fencing guard", "err", err)
		}
		m.guard = nil
	}
	if m.metrics != nil {
		m.metrics.close(ctx)
		m.metrics = nil
	}
}

// refreshLoop re-reads the epoch register every interval (a conditional
// GET, normally answered 304), so that an idle mount learns that it was
// fenced and shows it in its state, xattrs and metrics. It is a read of
// the bucket, not a poll of the Guard: the filesystem hears of what it
// finds through Guard.Changed. The returned function stops the loop and
// waits for it.
func refreshLoop(guard *fencing.Guard, interval time.Duration, log *slog.Logger) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		var lastErr string
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
			err := guard.Refresh(ctx)
			cancel()
			switch {
			case err == nil, errors.Is(err, fencing.ErrFenced):
				// The Guard logs the change to fenced itself.
				lastErr = ""
			case err.Error() != lastErr:
				lastErr = err.Error()
				log.Warn("cannot refresh the epoch register", "err", err)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// checkBucket makes one request to the bucket so that wrong credentials, a
// missing bucket or an unreachable endpoint fail the mount with a clear
// message before anything else happens.
func checkBucket(ctx context.Context, cfg *config.Config, store objstore.Store) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	_, err := store.Stat(ctx, cfg.DomainKeyPrefix()+fencing.ProtocolDir+"/epoch")
	if err == nil || errors.Is(err, objstore.ErrNotFound) {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		return fmt.Errorf("cannot reach %s: no answer within %v", cfg.EndpointURL(), checkTimeout)
	}
	return explainStoreErr(cfg, err)
}

// probeForMount runs the capability probe and refuses a fencing mode the
// storage cannot support, naming the failed checks.
func probeForMount(ctx context.Context, cfg *config.Config, store objstore.Store, reg prometheus.Registerer) (*objstore.Capabilities, error) {
	caps := objstore.Probe(ctx, store, fencing.ProbeDir(cfg.S3.Prefix))
	registerProbeMetrics(reg, caps)
	if caps.Err != nil {
		return nil, fmt.Errorf("storage probe failed: %w", explainStoreErr(cfg, caps.Err))
	}
	if err := fencing.CheckStorage(fencing.Mode(cfg.Fence.Mode), caps); err != nil {
		return nil, fmt.Errorf("%s fencing is not possible on %s: %v (see fencefs probe; --fence-mode fast or off weaken the guarantee)", cfg.Fence.Mode, cfg.EndpointURL(), err)
	}
	limitPlainPuts(store, caps)
	return &caps, nil
}

// credentialsFrom says where the credentials came from: the static keys'
// origin, else where objstore/s3 found them (for a failed s3.New, as err
// tells); when none were found anywhere, every place that was tried. For
// messages.
func credentialsFrom(cfg *config.Config, err error) string {
	src := cfg.S3.CredentialsSource
	if s, ok := s3.CredentialsSourceOf(err); ok && src == "" {
		src = s
	}
	if src == "" {
		src = "none found; tried " + cfg.StaticKeysTried()
		if tried := s3.CredentialsTriedOf(err); tried != "" {
			src += ", " + tried
		}
	}
	return src
}

// explainStoreErr turns a storage error into the one line a user needs.
func explainStoreErr(cfg *config.Config, err error) error {
	ep := cfg.EndpointURL()
	var credErr *s3.CredentialsError
	switch {
	case errors.Is(err, objstore.ErrNoBucket):
		return fmt.Errorf("bucket %q does not exist at %s", cfg.S3.Bucket, ep)
	case errors.As(err, &credErr):
		// A named credentials file or profile that cannot be used is a
		// configuration mistake (exit 2), found before any request.
		return usageError{cfg.SettingError(credErr.Key, credErr.Msg)}
	case errors.Is(err, objstore.ErrAuth):
		return fmt.Errorf("access denied to bucket %q at %s (check the access key and secret; credentials from %s)", cfg.S3.Bucket, ep, credentialsFrom(cfg, err))
	case errors.Is(err, objstore.ErrUnavailable):
		var dns *net.DNSError
		var op *net.OpError
		switch {
		case errors.As(err, &dns):
			return fmt.Errorf("cannot reach %s: %v", ep, dns)
		case errors.As(err, &op) && op.Err != nil:
			return fmt.Errorf("cannot reach %s: %v", ep, op.Err)
		}
		msg := err.Error()
		for _, cause := range []string{"connection refused", "no such host", "i/o timeout", "connection reset by peer", "network is unreachable", "no route to host", "certificate", "tls:", "EOF"} {
			if strings.Contains(msg, cause) {
				return fmt.Errorf("cannot reach %s: %s", ep, cause)
			}
		}
		return fmt.Errorf("cannot reach %s: %v", ep, err)
	}
	return err
}

// explainMountErr adds what to do to FUSE mount failures.
func explainMountErr(cfg *config.Config, err error) error {
	if _, serr := os.Stat("/dev/fuse"); serr != nil {
		return fmt.Errorf("cannot mount at %s: /dev/fuse is missing (load the fuse module or give the container /dev/fuse): %v", cfg.Mount.Mountpoint, err)
	}
	return fmt.Errorf("cannot mount at %s: %v", cfg.Mount.Mountpoint, err)
}

// bindToken binds the token text tok ("auto" or a number) and explains a
// refusal.
func bindToken(ctx context.Context, cfg *config.Config, guard *fencing.Guard, tok, source string) error {
	if strings.TrimSpace(tok) == "" {
		return nil
	}
	n, err := fencing.ParseToken(tok)
	if err != nil {
		return usageError{fmt.Errorf("%s: %v", source, err)}
	}
	got, err := guard.Bind(ctx, n)
	if err != nil {
		what := tok
		if n == 0 {
			what = "auto"
		}
		return fmt.Errorf("cannot bind token %s on bucket %q: %w", what, cfg.S3.Bucket, explainStoreErr(cfg, err))
	}
	_ = got
	return nil
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// metricsServer serves /metrics and /healthz.
type metricsServer struct {
	ln  net.Listener
	srv *http.Server
}

// mountSummary is the line a background mount prints once it is ready:
// what is mounted where, its fencing state, how to stop it and where its
// log goes.
func mountSummary(cfg *config.Config, st fencing.Status, pid int) string {
	source := cfg.S3.Bucket
	if cfg.S3.Prefix != "" {
		source += "/" + strings.TrimSuffix(cfg.S3.Prefix, "/")
	}
	state := string(st.State)
	switch {
	case cfg.Mount.ReadOnly:
		state = "read-only"
	case st.Token > 0:
		state = fmt.Sprintf("token %d, %s", st.Token, st.State)
	case st.State == fencing.StateUnbound:
		state = "no token: writes fail with EROFS until one is bound"
	}
	log := "log: " + cfg.Log.File
	if cfg.Log.File == "" {
		log = "no log (give --log-file to keep one)"
	}
	return fmt.Sprintf("mounted %s at %s (%s; pid %d); stop with: fusermount3 -u %s; %s",
		source, cfg.Mount.Mountpoint, state, pid, cfg.Mount.Mountpoint, log)
}
