package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"
)

// Names of the workloads of legacy programs (-workloads).
const (
	wRedirect = "redirect"
	wAppend   = "append"
	wMv       = "mv"
	wRmrf     = "rmrf"
	// wRmrfRenamed: rm -rf of a whole directory the bash loop wrote,
	// some of its files renamed in place first (issue 41 §2)
	wRmrfRenamed = "rmrf_renamed"
	wTar         = "tar"
	wParallel    = "parallel"
	wLsl         = "lsl"
	wFind        = "find"
)

// Metric keys of the legacy workloads; see legacyDefs for titles and units.
const (
	mRedirect = "redirect" // files/s of one bash loop of `echo … > d/f$i`
	mAppend   = "append"   // files/s of one bash loop of `echo … >> d/f$i`
	// files/s of a bash loop of `mv d/f$i d2/f$i` over MvFiles files, and
	// of rm -rf of d (the files left): until the program returned, and
	// until its changes were in the bucket (namespace.go)
	mMv          = "mv"
	mMvDurable   = "mv_durable"
	mRmrf        = "rmrf"
	mRmrfDurable = "rmrf_durable"
	// files/s of rm -rf of a directory of ShellFiles files, MvFiles of
	// them renamed in it first (namespace.go)
	mRmrfRenamed        = "rmrf_renamed"
	mRmrfRenamedDurable = "rmrf_renamed_durable"
	mTar                = "tar"      // seconds of one tar x
	mParallel           = "parallel" // files/s of Shells bash redirect loops at once
	mLslCold            = "lsl_cold" // seconds of the first ls -l of the big directory
	mLslWarm            = "lsl_warm" // seconds of the second
	mFind               = "find"     // seconds of find -type f over FindFiles objects
	mFindLsl            = "find_lsl" // ls -l of find's 4 directories: peak RSS only
	mRSSList            = "rss_list" // peak RSS over ls -l and find (MiB)
)

// payload is what the redirect loop writes into file i, appendLine what the
// append loop adds: exactly what `echo "payload $i"` and `echo "append $i"`
// print.
func payload(i int) string    { return fmt.Sprintf("payload %d\n", i) }
func appendLine(i int) string { return fmt.Sprintf("append %d\n", i) }

// shellDriver performs the legacy workloads on one target: as the programs
// themselves (bash, tar, ls, find) on a mount, as the equivalent S3 calls
// for the raw client. Directories are slash-separated, relative to the
// bucket root; they exist before the call. Safe for concurrent use.
type shellDriver interface {
	// RedirectLoop writes files dir/f0 … dir/f{n-1}, file i holding payload(i).
	RedirectLoop(ctx context.Context, dir string, n int) error
	// AppendLoop appends appendLine(i) to each of them.
	AppendLoop(ctx context.Context, dir string, n int) error
	// ExtractTar extracts the tarball into dir.
	ExtractTar(ctx context.Context, tb *tarball, dir string) error
	// ListLong lists dir with its entries' sizes and times (ls -l) and
	// returns the number of entries.
	ListLong(ctx context.Context, dir string) (int, error)
	// FindFiles returns the number of regular files under dir, at any depth.
	FindFiles(ctx context.Context, dir string) (int, error)
	// MoveLoop renames from/f0 … from/f{n-1} to to/f0 … one by one.
	MoveLoop(ctx context.Context, from, to string, n int) error
	// RenameLoop renames dir/f0 … dir/f{n-1} to dir/r0 … one by one.
	RenameLoop(ctx context.Context, dir string, n int) error
	// RemoveTree removes dir and everything in it.
	RemoveTree(ctx context.Context, dir string) error
	// SyncDirs makes what was done in dirs durable the way a program
	// does: fsync(2) of each directory, then syncfs(2) of the filesystem.
	SyncDirs(ctx context.Context, dirs ...string) error
}

var (
	_ shellDriver = (*fsDriver)(nil)
	_ shellDriver = (*s3Driver)(nil)
)

// shellPhases are the legacy workloads on the target run's own bucket.
func (w *workloads) shellPhases() []phase {
	cfg := w.env.cfg
	n := cfg.ShellFiles
	entries := 0
	if tb := w.env.legacy.tree; tb != nil {
		entries = len(tb.files) + tb.dirs
	}
	return []phase{
		{wRedirect, mRedirect, n, w.redirect},
		{wAppend, mAppend, n, w.appendLoop},
		{wMv, mMv, cfg.MvFiles, w.mv},
		{wRmrf, mRmrf, rmrfFiles(cfg), w.rmrf},
		{wRmrfRenamed, mRmrfRenamed, n, w.rmrfRenamed},
		{wTar, mTar, entries, w.tarX},
		{wParallel, mParallel, n * cfg.Shells, w.parallel},
	}
}

// listingPhases are the legacy workloads on the shared listing bucket,
// whose mount has seen nothing before them.
func (w *workloads) listingPhases() []phase {
	return w.selectPhases([]phase{
		{wLsl, mLslCold, 1, func(ctx context.Context) error { return w.listLong(ctx, mLslCold) }},
		{wLsl, mLslWarm, 1, func(ctx context.Context) error { return w.listLong(ctx, mLslWarm) }},
		{wFind, mFind, 1, w.find},
		{wFind, mFindLsl, 4, w.findListLong},
	})
}

// shell is the target's shellDriver.
func (w *workloads) shell() shellDriver { return w.in.driver.(shellDriver) }

// timed runs fn and returns its duration.
func timed(fn func() error) (time.Duration, error) {
	t0 := time.Now()
	err := fn()
	return time.Since(t0), err
}

// redirect runs the bash redirect loop once into loopDir.
func (w *workloads) redirect(ctx context.Context) error {
	n := w.env.cfg.ShellFiles
	if err := w.in.driver.Mkdir(ctx, loopDir); err != nil {
		return err
	}
	w.markStart(ctx)
	d, err := timed(func() error { return w.shell().RedirectLoop(ctx, loopDir, n) })
	if err != nil {
		return err
	}
	w.m.values[mRedirect] = float64(n) / d.Seconds()
	w.checkLoop(loopDir, n, func(i int) int { return len(payload(i)) })
	return nil
}

// appendLoop runs the bash append loop once over the redirect loop's files.
func (w *workloads) appendLoop(ctx context.Context) error {
	n := w.env.cfg.ShellFiles
	d, err := timed(func() error { return w.shell().AppendLoop(ctx, loopDir, n) })
	if err != nil {
		return err
	}
	w.m.values[mAppend] = float64(n) / d.Seconds()
	w.checkLoop(loopDir, n, func(i int) int { return len(payload(i)) + len(appendLine(i)) })
	return nil
}

// checkLoop checks that the loop's files in dir have their sizes.
func (w *workloads) checkLoop(dir string, n int, size func(int) int) {
	if w.noCheck {
		return
	}
	ctx := context.Background()
	for i := 0; i < n; i++ {
		if w.checked(i, n) {
			w.checkExists(ctx, fmt.Sprintf("%s/f%d", dir, i), int64(size(i)))
		}
	}
}

// tarX extracts the tarball into tar/ once (seconds).
func (w *workloads) tarX(ctx context.Context) error {
	tb := w.env.legacy.tree
	if err := w.in.driver.Mkdir(ctx, "tar"); err != nil {
		return err
	}
	w.markStart(ctx)
	d, err := timed(func() error { return w.shell().ExtractTar(ctx, tb, "tar") })
	if err != nil {
		return err
	}
	w.m.values[mTar] = d.Seconds()
	if !w.noCheck {
		for i, f := range tb.files {
			if w.checked(i, len(tb.files)) {
				w.checkExists(ctx, "tar/"+f.name, f.size)
			}
		}
	}
	return nil
}

// parallel runs Shells redirect loops at the same time, each in its own
// directory (files/s over all of them).
func (w *workloads) parallel(ctx context.Context) error {
	cfg := w.env.cfg
	dir := func(k int) string { return fmt.Sprintf("par/d%d", k) }
	if err := w.in.driver.Mkdir(ctx, "par"); err != nil {
		return err
	}
	for k := 0; k < cfg.Shells; k++ {
		if err := w.in.driver.Mkdir(ctx, dir(k)); err != nil {
			return err
		}
	}
	w.markStart(ctx)
	d, err := timed(func() error {
		g, ctx := errgroup.WithContext(ctx)
		for k := 0; k < cfg.Shells; k++ {
			g.Go(func() error { return w.shell().RedirectLoop(ctx, dir(k), cfg.ShellFiles) })
		}
		return g.Wait()
	})
	if err != nil {
		return err
	}
	w.m.values[mParallel] = float64(cfg.Shells*cfg.ShellFiles) / d.Seconds()
	for k := 0; k < cfg.Shells; k++ {
		w.checkLoop(dir(k), cfg.ShellFiles, func(i int) int { return len(payload(i)) })
	}
	return nil
}

// listLong lists lsl/ with ls -l (seconds, recorded under key).
func (w *workloads) listLong(ctx context.Context, key string) error {
	return w.timedCount(ctx, key, "ls -l listed", w.env.cfg.ListFiles, func() (int, error) {
		return w.shell().ListLong(ctx, "lsl")
	})
}

// find runs find -type f over find/ (seconds).
func (w *workloads) find(ctx context.Context) error {
	return w.timedCount(ctx, mFind, "find found", w.env.cfg.FindFiles, func() (int, error) {
		return w.shell().FindFiles(ctx, "find")
	})
}

// timedCount records the seconds fn takes under key, after checking that
// it counted want entries.
func (w *workloads) timedCount(_ context.Context, key, what string, want int, fn func() (int, error)) error {
	var n int
	d, err := timed(func() (err error) { n, err = fn(); return err })
	if err != nil {
		return err
	}
	if n != want {
		return fmt.Errorf("%s %d entries, want %d", what, n, want)
	}
	w.m.values[key] = d.Seconds()
	return nil
}

// findListLong lists find's 4 directories with ls -l, for the peak RSS
// over every listed object.
func (w *workloads) findListLong(ctx context.Context) error {
	total := 0
	for k := 0; k < 4; k++ {
		n, err := w.shell().ListLong(ctx, fmt.Sprintf("find/d%d", k))
		if err != nil {
			return err
		}
		total += n
	}
	if total != w.env.cfg.FindFiles {
		return fmt.Errorf("ls -l of find's directories listed %d entries, want %d", total, w.env.cfg.FindFiles)
	}
	return nil
}

// sh runs a bash script in the mount's root with args $1 …; its output
// goes to out (nil: discarded). A failure returns one line: what the
// script does, its exit status and its last line of error output.
func (d *fsDriver) sh(ctx context.Context, what string, out io.Writer, script string, args ...string) error {
	cmd := exec.CommandContext(ctx, "bash", append([]string{"-c", script, "bash"}, args...)...)
	cmd.Dir = d.root
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		return fmt.Errorf("%s: %v: %s", what, err, msg)
	}
	return nil
}

// RedirectLoop implements shellDriver: a bash loop of redirects.
func (d *fsDriver) RedirectLoop(ctx context.Context, dir string, n int) error {
	return d.sh(ctx, "bash redirect loop", nil, `set -e; d=$1; for ((i=0; i<$2; i++)); do echo "payload $i" > $d/f$i; done`, dir, fmt.Sprint(n))
}

// AppendLoop implements shellDriver: a bash loop of appending redirects.
func (d *fsDriver) AppendLoop(ctx context.Context, dir string, n int) error {
	return d.sh(ctx, "bash append loop", nil, `set -e; d=$1; for ((i=0; i<$2; i++)); do echo "append $i" >> $d/f$i; done`, dir, fmt.Sprint(n))
}

// ExtractTar implements shellDriver: tar x as an unprivileged user.
func (d *fsDriver) ExtractTar(ctx context.Context, tb *tarball, dir string) error {
	return d.sh(ctx, "tar x", nil, `tar xf "$1" -C "$2"`, tb.path, dir)
}

// ListLong implements shellDriver: ls -l (the kernel stats every entry).
func (d *fsDriver) ListLong(ctx context.Context, dir string) (int, error) {
	n, err := d.countLines(ctx, "ls -l", `ls -l "$1"`, dir)
	return n - 1, err // the first line is "total …"
}

// FindFiles implements shellDriver: find -type f.
func (d *fsDriver) FindFiles(ctx context.Context, dir string) (int, error) {
	return d.countLines(ctx, "find", `find "$1" -type f`, dir)
}

// countLines runs a script and counts the lines it prints.
func (d *fsDriver) countLines(ctx context.Context, what, script string, args ...string) (int, error) {
	lc := &lineCounter{}
	err := d.sh(ctx, what, lc, script, args...)
	return lc.n, err
}

// lineCounter is an io.Writer counting newlines.
type lineCounter struct{ n int }

func (c *lineCounter) Write(p []byte) (int, error) {
	c.n += bytes.Count(p, []byte{'\n'})
	return len(p), nil
}

// RedirectLoop implements shellDriver: serial PUTs.
func (d *s3Driver) RedirectLoop(ctx context.Context, dir string, n int) error {
	for i := 0; i < n; i++ {
		if err := d.WriteSmall(ctx, fmt.Sprintf("%s/f%d", dir, i), []byte(payload(i))); err != nil {
			return err
		}
	}
	return nil
}

// AppendLoop implements shellDriver: GET and PUT of each object.
func (d *s3Driver) AppendLoop(ctx context.Context, dir string, n int) error {
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("%s/f%d", dir, i)
		b, err := d.ReadSmall(ctx, key)
		if err != nil {
			return err
		}
		if err := d.WriteSmall(ctx, key, append(b, appendLine(i)...)); err != nil {
			return err
		}
	}
	return nil
}

// ExtractTar implements shellDriver: a PUT per regular file, read from the
// archive (prefixes need no directory objects).
func (d *s3Driver) ExtractTar(ctx context.Context, tb *tarball, dir string) error {
	f, err := os.Open(tb.path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(bufio.NewReader(f))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if _, err := d.env.client.PutObject(ctx, d.bucket, path.Join(dir, h.Name), tr, h.Size, minio.PutObjectOptions{}); err != nil {
			return err
		}
	}
}

// ListLong implements shellDriver: ListObjectsV2 with delimiter (it has
// every entry's size and time).
func (d *s3Driver) ListLong(ctx context.Context, dir string) (int, error) {
	return d.count(ctx, minio.ListObjectsOptions{Prefix: dir + "/"})
}

// FindFiles implements shellDriver: a recursive ListObjectsV2, directory
// markers not counted.
func (d *s3Driver) FindFiles(ctx context.Context, dir string) (int, error) {
	return d.count(ctx, minio.ListObjectsOptions{Prefix: dir + "/", Recursive: true})
}

// count lists and counts the entries that are not directory markers.
func (d *s3Driver) count(ctx context.Context, opts minio.ListObjectsOptions) (int, error) {
	n := 0
	for obj := range d.env.client.ListObjects(ctx, d.bucket, opts) {
		if obj.Err != nil {
			return n, obj.Err
		}
		if !strings.HasSuffix(obj.Key, "/") {
			n++
		}
	}
	return n, nil
}
