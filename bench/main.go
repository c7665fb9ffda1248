// Command bench measures fencefs against its peers on one machine and one
// local S3 server, and prints (and saves) a markdown table. It is what
// `make bench` runs:
//
//	go run ./bench -bin bin/fencefs -gateway bin/versitygw
//
// One run starts one Versity S3 gateway on 127.0.0.1 and measures, on a fresh
// bucket per target and per run:
//
//   - raw: a minio-go client talking to the gateway directly, the upper bound
//     (signed multipart PUT and a single-stream GET of the large object, serial
//     signed PUTs of the small ones …);
//   - fencefs-strict, fencefs-fast, fencefs-off: the fencefs binary in each
//     fence mode;
//   - s3fs: s3fs-fuse from Debian, foreground, default options;
//   - rclone-off and rclone-writes: `rclone mount` with --vfs-cache-mode off
//     and writes;
//   - geesefs, only when -geesefs names its binary (a benchmark-only
//     dependency, built from its public source): foreground, with
//     --fsync-on-close (which uploads in FUSE RELEASE, after close(2)
//     returned: it is not durable at close).
//
// The workloads run as plain system calls from this process on the kernel
// mounts (each mount is a separate process): sequential write and read of a
// large file, create+write+close / stat / readdir / read / unlink of many
// small files, renames of files and of a directory, the time to mount, and
// the peak RSS of each mount process. A write counts when the object is in
// the bucket when close(2) returns: the benchmark checks that with its own S3
// client and marks targets where it is not so as "not durable at close".
//
// The workloads of legacy programs run the programs themselves on each
// mount: a bash loop of `echo "payload $i" > d/f$i` (500 files) and
// one of `>>` appends to them, a bash loop of `mv d/f$i d2/f$i` over 100
// of them, rm -rf of d (each of these two rated until the program
// returned and until its changes were in the bucket: after fsync of the
// directories and syncfs, the benchmark's S3 client lists the bucket
// until they are; what was not there when the program returned is
// reported next to the rate), tar x of the Go distribution's net/http
// (-tar-dir), 8 shells running the redirect loop at once, and, on a second
// mount of a bucket the raw client filled once in parallel, ls -l of a
// 20,000-object directory cold and warm and find -type f over 100,000
// objects in 4 directories, with the mount's peak RSS. Each gets its S3
// requests per operation (fencefs's metrics; "–" for the peers) and a
// bound: the fewest round trips the protocol needs × the raw client's
// measured round trip + the FUSE floor, measured by running the same
// workloads on go-fuse's loopback example ("fuse-floor", see bench/floor);
// the report gives each target's efficiency against it. -workloads selects
// workloads by name or group (basic, legacy, all), e.g.
// `-workloads redirect,mv,rmrf,tar,lsl`.
//
// Runs are interleaved (run 1 of every target, then run 2 …) so that drift on
// the machine spreads over all targets; the table shows medians, ratios to
// the raw client and to each peer, and whether the performance goals are
// met. -quick is a smoke run that takes well under two minutes.
//
// Everything the benchmark starts (gateway, mounts) is stopped on every path:
// normal exit, error, and SIGINT/SIGTERM; a hung mount is killed and lazily
// unmounted by a per-target watchdog.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
)

// config is everything a benchmark run is parameterised by; see the flags
// in parseFlags for the meaning of each field.
type config struct {
	FencefsBin    string
	GatewayBin    string
	GeesefsBin    string       // the geesefs binary; "" = no geesefs target
	Server        gateway.Kind // the S3 server: gateway.Versity or gateway.MinIO
	LargeSize     int64        // bytes of the sequential write/read file
	SmallCount    int          // number of small files
	SmallSize     int          // bytes per small file
	RenameFiles   int          // files renamed one by one
	DirFiles      int          // files in the renamed directory
	Runs          int
	Only          []string // target names; empty = all
	Quick         bool
	Out           string // results file; "" = the default path, "-" = none
	WorkDir       string
	Keep          bool
	CheckEvery    int   // durability check of every Nth small file (1 = all)
	PartSize      int64 // raw client's multipart part size
	RawThreads    int   // raw client's parallel part uploads
	WriteChunk    int   // bytes per write(2)/read(2) on the large file
	TargetTimeout time.Duration
	FencefsArgs   []string      // extra arguments for every fencefs mount
	PerfDir       string        // record `perf` profiles of fencefs mounts here; "" = off
	CountRequests bool          // count fencefs's S3 requests per operation (its metrics endpoint)
	QuietIdle     float64       // wait before each target run until the CPU is this idle (0 = don't)
	QuietWait     time.Duration // … for at most this long
	FailOnError   bool          // exit 1 when a target run failed or broke its durability promise
	Verbose       bool
	Workloads     []string // workloads to run, in order (see select.go)
	ShellFiles    int      // files per bash redirect/append loop
	MvFiles       int      // of those, files moved one by one with mv
	// SyncWait is how long after the directories' fsync the bucket is
	// watched for the changes of mv and rm -rf (namespace.go)
	SyncWait  time.Duration
	Shells    int    // parallel shells running the redirect loop
	TarDir    string // directory tree archived and extracted with tar x
	ListFiles int    // objects in the directory listed with ls -l
	FindFiles int    // objects in the 4 directories find walks
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	level := slog.LevelInfo
	if cfg.Verbose {
		level = slog.LevelDebug
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// parseFlags parses the command line into a config and applies -quick.
func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var c config
	var r rawFlags
	defineFlags(fs, &c, &r)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.Quick {
		quickDefaults(&c, &r.size, set)
	}
	err := r.apply(&c)
	return c, err
}

// rawFlags are the flags that apply turns into config fields: sizes with
// units and comma- or space-separated lists.
type rawFlags struct {
	size, smallSize, partSize, chunk, only, fencefsArgs, workloads, server string
}

// defineFlags defines the flags of the benchmark on fs, into c and r.
func defineFlags(fs *flag.FlagSet, c *config, r *rawFlags) {
	fs.StringVar(&c.FencefsBin, "bin", "bin/fencefs", "fencefs binary")
	fs.StringVar(&c.GatewayBin, "gateway", "", "versitygw binary (default: $FENCEFS_VERSITYGW, <repo>/bin/versitygw, $PATH)")
	fs.StringVar(&c.GeesefsBin, "geesefs", "", "geesefs binary: adds the target geesefs, run with --fsync-on-close (default: no geesefs target)")
	fs.StringVar(&r.server, "server", string(gateway.Versity), "the S3 server every target uses: versitygw, or minio (a single drive; binary: $FENCEFS_MINIO, <repo>/bin/minio, $PATH)")
	fs.StringVar(&r.size, "size", "1GiB", "size of the sequentially written and read file")
	fs.IntVar(&c.SmallCount, "small", 1000, "number of small files")
	fs.StringVar(&r.smallSize, "small-size", "4KiB", "size of each small file")
	fs.IntVar(&c.RenameFiles, "rename-files", 100, "number of files renamed one by one")
	fs.IntVar(&c.DirFiles, "dir-files", 100, "number of files in the renamed directory")
	fs.IntVar(&c.Runs, "runs", 3, "runs per target (the table shows medians)")
	fs.StringVar(&r.only, "only", "", "comma-separated targets to run (default all): "+strings.Join(targetNames(config{GeesefsBin: "geesefs"}), ",")+
		" (geesefs only with -geesefs)")
	fs.BoolVar(&c.Quick, "quick", false, "smoke run: small sizes, one run, no results file unless -out is given")
	fs.StringVar(&c.Out, "out", "", `results file (default bench/results/<date>-<host>.md; "-" = none)`)
	fs.StringVar(&c.WorkDir, "workdir", "", "directory for the gateway data, mountpoints, caches and logs (default: a new directory in /dev/shm when memory allows, else /var/tmp)")
	fs.BoolVar(&c.Keep, "keep", false, "keep the work directory (logs) afterwards")
	fs.IntVar(&c.CheckEvery, "check-every", 10, "check durability at close of every Nth small file (1 = every file)")
	fs.StringVar(&r.partSize, "part-size", "16MiB", "raw client's multipart part size (minio-go's default)")
	fs.IntVar(&c.RawThreads, "raw-threads", 4, "raw client's parallel part uploads (minio-go's default)")
	fs.StringVar(&r.chunk, "chunk", "1MiB", "bytes per write(2)/read(2) call on the large file")
	fs.DurationVar(&c.TargetTimeout, "target-timeout", 20*time.Minute, "watchdog: a target run taking longer is killed")
	fs.StringVar(&r.fencefsArgs, "fencefs-args", "", "extra space-separated arguments for every fencefs mount")
	fs.StringVar(&c.PerfDir, "perf", "", "record a `perf` CPU profile of every fencefs mount (and the gateway) per workload into this directory")
	fs.BoolVar(&c.CountRequests, "requests", true, "count fencefs's S3 requests per operation through its metrics endpoint")
	fs.Float64Var(&c.QuietIdle, "quiet", 0.8, "before each target run, wait until the machine's CPUs are this idle over 2s (0 = don't wait); the idle fraction is reported")
	fs.DurationVar(&c.QuietWait, "quiet-wait", 3*time.Minute, "longest wait for -quiet before measuring anyway")
	fs.BoolVar(&c.FailOnError, "fail-on-error", false, "exit with status 1 when a target run fails or a target that promises durability at close breaks it (for smoke tests)")
	fs.BoolVar(&c.Verbose, "v", false, "log every step")
	fs.StringVar(&r.workloads, "workloads", "all", "comma-separated workloads to run (what they need is added): "+
		strings.Join(workloadGroups["all"], ",")+"; or the groups basic (file and directory operations), legacy (bash, mv, rm, tar, ls, find), all")
	fs.IntVar(&c.ShellFiles, "shell-files", 500, "files written by each bash redirect loop (and appended to)")
	fs.IntVar(&c.MvFiles, "mv-files", 100, "of the redirect loop's files, how many mv moves one by one (rm -rf removes the rest)")
	fs.DurationVar(&c.SyncWait, "sync-wait", time.Minute, "after mv and rm -rf and the fsync of their directories, how long to wait for their changes to be in the bucket")
	fs.IntVar(&c.Shells, "shells", 8, "parallel shells running the redirect loop")
	fs.StringVar(&c.TarDir, "tar-dir", "", "directory tree archived, then extracted with tar x (default $(go env GOROOT)/src/net/http)")
	fs.IntVar(&c.ListFiles, "ls-files", 20000, "objects in the directory listed with ls -l (written by the raw client)")
	fs.IntVar(&c.FindFiles, "find-files", 100000, "objects in the 4 directories find -type f walks (written by the raw client)")
}

// apply parses r into c and checks c's counts and sizes.
func (r rawFlags) apply(c *config) error {
	if err := sizeFlag("size", r.size, &c.LargeSize); err != nil {
		return err
	}
	if err := sizeFlag("small-size", r.smallSize, &c.SmallSize); err != nil {
		return err
	}
	if err := sizeFlag("part-size", r.partSize, &c.PartSize); err != nil {
		return err
	}
	if err := sizeFlag("chunk", r.chunk, &c.WriteChunk); err != nil {
		return err
	}
	if c.Runs < 1 || c.SmallCount < 1 || c.SmallSize < 1 || c.RenameFiles < 1 || c.DirFiles < 1 ||
		c.CheckEvery < 1 || c.RawThreads < 1 || c.WriteChunk < 1 || c.LargeSize < 1 ||
		c.ShellFiles < 1 || c.MvFiles < 1 || c.Shells < 1 || c.ListFiles < 1 || c.FindFiles < 1 || c.SyncWait <= 0 {
		return errors.New("counts and sizes must be positive")
	}
	if c.FindFiles < 4 {
		return errors.New("-find-files: at least 4 (one per directory)")
	}
	switch c.Server = gateway.Kind(r.server); c.Server {
	case gateway.Versity, gateway.MinIO:
	default:
		return fmt.Errorf("-server: %q is neither %s nor %s", r.server, gateway.Versity, gateway.MinIO)
	}
	if err := checkGeesefs(c); err != nil {
		return err
	}
	if r.only != "" {
		for _, name := range strings.Split(r.only, ",") {
			name = strings.TrimSpace(name)
			if !slices.Contains(targetNames(*c), name) {
				return fmt.Errorf("-only: unknown target %q (known: %s)", name, strings.Join(targetNames(*c), ","))
			}
			c.Only = append(c.Only, name)
		}
	}
	var err error
	if c.Workloads, err = parseWorkloads(r.workloads); err != nil {
		return fmt.Errorf("-workloads: %w", err)
	}
	if c.selected(wMv) && c.MvFiles >= c.ShellFiles {
		return fmt.Errorf("-mv-files %d: fewer than -shell-files %d (rm -rf removes the rest)", c.MvFiles, c.ShellFiles)
	}
	c.FencefsArgs = strings.Fields(r.fencefsArgs)
	return nil
}

// quickDefaults applies -quick's small sizes to the flags not given
// explicitly (set holds the names of those given).
func quickDefaults(c *config, size *string, set map[string]bool) {
	for _, d := range []struct {
		flag  string
		p     *int
		quick int
	}{
		{"small", &c.SmallCount, 100}, {"rename-files", &c.RenameFiles, 20}, {"dir-files", &c.DirFiles, 20},
		{"runs", &c.Runs, 1}, {"shell-files", &c.ShellFiles, 50}, {"mv-files", &c.MvFiles, 10}, {"ls-files", &c.ListFiles, 2000},
		{"find-files", &c.FindFiles, 4000},
	} {
		if !set[d.flag] {
			*d.p = d.quick
		}
	}
	if !set["size"] {
		*size = "32MiB"
	}
	if !set["out"] {
		c.Out = "-"
	}
	if !set["quiet"] {
		c.QuietIdle = 0
	}
}

// run is the whole benchmark: start the gateway, measure every selected
// target Runs times, print and save the report. It returns after everything
// it started has been stopped.
func run(ctx context.Context, cfg config) (err error) {
	if err = prepareWorkDir(&cfg); err != nil {
		return err
	}
	defer func() {
		switch {
		case cfg.Keep:
			fmt.Fprintf(os.Stderr, "work directory kept at %s\n", cfg.WorkDir)
		case err != nil:
			// Keep the logs for the post-mortem, not the bulk (the work
			// directory may be on tmpfs, i.e. in memory).
			removeBulk(cfg.WorkDir)
			fmt.Fprintf(os.Stderr, "logs kept in %s\n", cfg.WorkDir)
		default:
			os.RemoveAll(cfg.WorkDir)
		}
	}()
	if cfg.PerfDir != "" {
		if cfg.PerfDir, err = filepath.Abs(cfg.PerfDir); err != nil {
			return err
		}
		if err = os.MkdirAll(cfg.PerfDir, 0o755); err != nil {
			return err
		}
	}

	gw, err := startServer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("starting the %s server: %w", cfg.Server, err)
	}
	defer func() {
		if serr := gw.Stop(); serr != nil {
			slog.Warn("stopping the server", "err", serr)
		}
	}()
	slog.Info("server started", "kind", cfg.Server, "endpoint", gw.Endpoint, "dir", gw.Dir)

	env, err := newBenchEnv(ctx, cfg, gw)
	if err != nil {
		return err
	}
	defer env.close()
	res, err := measureAll(ctx, cfg, env)
	if err != nil {
		return err
	}
	if err := saveReport(cfg, res.markdown()); err != nil {
		return err
	}
	if cfg.FailOnError {
		if problems := res.problems(); len(problems) > 0 {
			return fmt.Errorf("-fail-on-error: %s", strings.Join(problems, "; "))
		}
	}
	return nil
}

// startServer starts the S3 server of cfg.Server on 127.0.0.1 with its data
// in the work directory. The gateway keeps connections alive, as real S3
// servers (and MinIO) do.
func startServer(ctx context.Context, cfg config) (*gateway.Gateway, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	dir := filepath.Join(cfg.WorkDir, string(cfg.Server))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if cfg.Server == gateway.MinIO {
		return gateway.StartMinIO(ctx, gateway.MinIOOptions{Dir: dir})
	}
	return gateway.Start(ctx, gateway.Options{Bin: cfg.GatewayBin, Dir: dir, KeepAlive: true})
}

// prepareWorkDir makes cfg's binary path absolute and creates the work
// directory (a new one when -workdir is not given), also made absolute.
func prepareWorkDir(cfg *config) (err error) {
	if cfg.FencefsBin, err = filepath.Abs(cfg.FencefsBin); err != nil {
		return err
	}
	if cfg.WorkDir == "" {
		if cfg.WorkDir, err = os.MkdirTemp(defaultWorkParent(*cfg), "fencefs-bench-"); err != nil {
			return err
		}
	} else if err = os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return err
	}
	cfg.WorkDir, err = filepath.Abs(cfg.WorkDir)
	return err
}

// measureAll measures every selected target cfg.Runs times, each round in
// a rotated order, and returns the results; it stops when ctx ends.
func measureAll(ctx context.Context, cfg config, env *benchEnv) (*results, error) {
	targets := selectTargets(cfg)
	res := newResults(cfg, targets)
	res.Machine = describeMachine(cfg)
	res.cal, res.tree = env.legacy.cal, env.legacy.tree
	start := time.Now()
	for r := 1; r <= cfg.Runs; r++ {
		for _, t := range rotate(targets, r-1) {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			idle := waitQuiet(ctx, cfg)
			slog.Info("measuring", "target", t.Name(), "run", r, "of", cfg.Runs, "cpu_idle", fmt.Sprintf("%.0f%%", 100*idle))
			m, rerr := env.measure(ctx, t, r)
			m.idle = idle
			if rerr != nil {
				slog.Error("target run failed", "target", t.Name(), "run", r, "err", rerr)
				res.addError(t.Name(), r, rerr)
			}
			res.add(t.Name(), m)
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// saveReport prints the report and writes it to the results file, if any.
func saveReport(cfg config, report string) error {
	fmt.Println(report)
	out := resultsPath(cfg)
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(out, []byte(report), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "results saved to %s\n", out)
	return nil
}

// rotate returns targets rotated left by k: run r starts with a different
// target, so that no target always runs right after the same one (the
// gateway's state after a large bucket is deleted, for one, would otherwise
// favour or penalise the same target in every run).
func rotate(targets []target, k int) []target {
	if len(targets) == 0 {
		return nil
	}
	k %= len(targets)
	return append(append([]target(nil), targets[k:]...), targets[:k]...)
}

// removeBulk removes the data in a work directory (the gateway's data, the
// large source file, the mounts' caches) and keeps the logs.
func removeBulk(dir string) {
	os.RemoveAll(filepath.Join(dir, "gateway", "root"))
	os.Remove(filepath.Join(dir, "large.bin"))
	caches, _ := filepath.Glob(filepath.Join(dir, "*", "cache"))
	for _, c := range caches {
		os.RemoveAll(c)
	}
}

// waitQuiet waits, up to cfg.QuietWait, until the machine's CPUs were at
// least cfg.QuietIdle idle over two seconds, and returns the last idle
// fraction seen (without -quiet, one sample). Other processes competing for
// the CPUs make a run noisy; the fraction is reported with each run.
func waitQuiet(ctx context.Context, cfg config) float64 {
	deadline := time.Now().Add(cfg.QuietWait)
	logged := false
	for {
		idle, err := cpuIdle(2 * time.Second)
		if err != nil {
			slog.Warn("reading CPU idle time", "err", err)
			return -1
		}
		if cfg.QuietIdle <= 0 || idle >= cfg.QuietIdle || time.Now().After(deadline) || ctx.Err() != nil {
			return idle
		}
		if !logged {
			slog.Info("waiting for the machine to be idle", "idle", fmt.Sprintf("%.0f%%", 100*idle),
				"want", fmt.Sprintf("%.0f%%", 100*cfg.QuietIdle), "at_most", cfg.QuietWait)
			logged = true
		}
	}
}

// defaultWorkParent is where the work directory (gateway data, caches,
// mountpoints) goes by default: the tmpfs /dev/shm when it and the memory
// have room for it, so that the numbers measure the clients and not the
// machine's disk (on a VM disk, write-back makes large writes vary by 2×
// from run to run); else /var/tmp. Never $TMPDIR: the integration test
// harness lazily unmounts every fuse.fencefs mount under $TMPDIR when a test
// binary exits, which would pull the benchmark's mounts away if tests run
// at the same time.
func defaultWorkParent(cfg config) string {
	// At peak: the source object, the read copy, the written object and its
	// multipart parts, a staging file or cache, the local source file.
	need := 7*cfg.LargeSize + int64(cfg.SmallCount)*int64(cfg.SmallSize)*4 + 1<<30
	if free, err := freeBytes("/dev/shm"); err == nil && free >= need && memAvailable() >= need+(2<<30) {
		return "/dev/shm"
	}
	if fi, err := os.Stat("/var/tmp"); err == nil && fi.IsDir() && !strings.HasPrefix("/var/tmp", os.TempDir()) {
		return "/var/tmp"
	}
	return ""
}

// freeBytes is the space available to unprivileged users on the
// filesystem holding dir.
func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// memAvailable is MemAvailable from /proc/meminfo in bytes (0 if unknown).
func memAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(rest), &kb)
			return kb << 10
		}
	}
	return 0
}

// resultsPath is where the report is saved: -out, or for a full run
// bench/results/<date>-<host>.md under the repository root; "" for none.
func resultsPath(cfg config) string {
	if cfg.Out == "-" {
		return ""
	}
	if cfg.Out != "" {
		return cfg.Out
	}
	root, err := gateway.RepoRoot()
	if err != nil {
		root = "."
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "unknown"
	}
	server := ""
	if cfg.Server != gateway.Versity {
		server = "-" + string(cfg.Server)
	}
	return filepath.Join(root, "bench", "results", time.Now().Format("2006-01-02")+"-"+host+server+".md")
}
