package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strings"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"
)

// The namespace workloads: mv of MvFiles of the redirect loop's files one
// by one into another directory, then rm -rf of the loop's directory. Each
// has two rates: until the program returned ("acknowledged"), and until
// its changes were in the bucket ("durable"): after it returned, the
// benchmark fsyncs the directories it changed and syncfs's the mount (what
// `sync DIR; sync -f MOUNT` do), then lists the bucket with its own S3
// client until the changes are there. How many were not yet in the bucket
// when the program returned, and when the sync returned, is reported next
// to the numbers.

// Directories of the namespace workloads: the redirect loop's files are
// in loopDir; mv moves some of them into movedDir.
const (
	loopDir  = "sh"
	movedDir = "sh2"
)

// nsPoll is how often the bucket is listed after the sync until a
// namespace workload's changes are in it (for at most -sync-wait).
const nsPoll = 10 * time.Millisecond

// nsPromise is where a target promises that a program's renames and
// deletes are in the bucket.
type nsPromise int

const (
	nsNone     nsPromise = iota // nowhere (they may come later)
	nsAtSync                    // once fsync(2) of their directories and syncfs(2) returned
	nsAtReturn                  // when the call returns
)

// nsContract is what a target says of the renames and deletes a program
// makes. The benchmark checks the bucket either way; a target whose
// bucket lacks a change where it promised it fails a durability check.
type nsContract struct {
	durable nsPromise
	// async: it acknowledges them before it sends them, by design, so
	// its rates until the program returned are not durable ones whatever
	// the bucket showed right after (geesefs)
	async bool
}

// nsState is what the bucket showed of one run of a namespace workload:
// of its ops operations, how many were not in it when the program
// returned, when the sync returned, and at the end of the polling.
type nsState struct {
	ops, atReturn, afterSync, never int
}

// rmrfFiles is the number of files rm -rf removes: the redirect loop's,
// less those mv moved away.
func rmrfFiles(cfg config) int {
	if cfg.selected(wMv) {
		return cfg.ShellFiles - cfg.MvFiles
	}
	return cfg.ShellFiles
}

// mv moves MvFiles of the redirect loop's files into a new directory.
func (w *workloads) mv(ctx context.Context) error {
	n := w.env.cfg.MvFiles
	if err := w.unknownFiles(mRedirect); err != nil {
		return err
	}
	if err := w.in.driver.Mkdir(ctx, movedDir); err != nil {
		return err
	}
	w.markStart(ctx)
	d, err := timed(func() error { return w.shell().MoveLoop(ctx, loopDir, movedDir, n) })
	if err != nil {
		return err
	}
	return w.namespaceDone(ctx, nsRun{ack: mMv, durable: mMvDurable, ops: n, took: d,
		dirs: []string{loopDir, movedDir}, pending: func(ctx context.Context) (int, error) { return w.mvPending(ctx, n) }})
}

// rmrf removes the redirect loop's directory with rm -rf.
func (w *workloads) rmrf(ctx context.Context) error {
	if err := w.unknownFiles(mRedirect, mMv); err != nil {
		return err
	}
	d, err := timed(func() error { return w.shell().RemoveTree(ctx, loopDir) })
	if err != nil {
		return err
	}
	return w.namespaceDone(ctx, nsRun{ack: mRmrf, durable: mRmrfDurable, ops: rmrfFiles(w.env.cfg), took: d,
		dirs: []string{path.Dir(loopDir)}, pending: w.rmrfPending})
}

// renamedDir is the directory of rmrfRenamed.
const renamedDir = "rr"

// rmrfRenamed is the rm -rf an application's cleanup makes: the bash loop
// writes ShellFiles files into a directory of their own, MvFiles of them
// are renamed in place (mv rr/f$i rr/r$i; on a store whose DELETE ignores
// If-Match a strict rename leaves a tombstone at the old name), then the
// whole directory is removed with rm -rf, which alone is timed. Unlike
// rmrf, every file the directory had is removed, renamed ones included.
func (w *workloads) rmrfRenamed(ctx context.Context) error {
	cfg := w.env.cfg
	if err := w.in.driver.Mkdir(ctx, renamedDir); err != nil {
		return err
	}
	if err := w.shell().RedirectLoop(ctx, renamedDir, cfg.ShellFiles); err != nil {
		return err
	}
	if err := w.shell().RenameLoop(ctx, renamedDir, min(cfg.MvFiles, cfg.ShellFiles)); err != nil {
		return err
	}
	w.env.settle()
	w.markStart(ctx)
	d, err := timed(func() error { return w.shell().RemoveTree(ctx, renamedDir) })
	if err != nil {
		return err
	}
	return w.namespaceDone(ctx, nsRun{ack: mRmrfRenamed, durable: mRmrfRenamedDurable, ops: cfg.ShellFiles, took: d,
		dirs: []string{path.Dir(renamedDir)}, pending: func(ctx context.Context) (int, error) {
			live, err := w.liveObjects(ctx, renamedDir+"/")
			return len(live), err
		}})
}

// unknownFiles returns an error when one of the phases that made the
// redirect loop's directory what it is failed in this run: how many
// files it holds is then unknown, and so would be a rate.
func (w *workloads) unknownFiles(phases ...string) error {
	for _, e := range w.m.phaseErrors {
		for _, p := range phases {
			if strings.HasPrefix(e, p+": ") {
				return fmt.Errorf("not run: %s failed, so the files in %s/ are unknown", p, loopDir)
			}
		}
	}
	return nil
}

// nsRun is one run of a namespace workload whose program has returned.
type nsRun struct {
	ack, durable string // metric keys of the two rates
	ops          int
	took         time.Duration // until the program returned
	dirs         []string      // the directories it changed
	// pending returns how many of the operations the bucket does not show
	pending func(ctx context.Context) (int, error)
}

// namespaceDone records the rates of a namespace workload that returned
// after r.took: acknowledged, then durable once its directories were
// synced and the bucket showed every change (the time the bucket is
// checked when the program returns is not counted). A target whose bucket
// lacks a change where it promised it fails a durability check; for the
// others it is reported.
func (w *workloads) namespaceDone(ctx context.Context, r nsRun) error {
	w.m.values[r.ack] = float64(r.ops) / r.took.Seconds()
	st := nsState{ops: r.ops}
	promise := w.t.Namespace().durable
	var err error
	if !w.noCheck {
		if st.atReturn, err = r.pending(ctx); err != nil {
			return fmt.Errorf("checking the bucket: %w", err)
		}
		w.checkNamespace(promise >= nsAtReturn, r, st.atReturn, "when the program returned")
	}
	sync, err := timed(func() error { return w.shell().SyncDirs(ctx, r.dirs...) })
	if err != nil {
		return err
	}
	durable := r.took + sync
	if !w.noCheck {
		var late time.Duration
		if late, st.afterSync, st.never, err = pollPending(ctx, r.pending, nsPoll, w.env.cfg.SyncWait); err != nil {
			return fmt.Errorf("checking the bucket: %w", err)
		}
		durable += late
		w.checkNamespace(promise >= nsAtSync, r, st.afterSync, "after the directories' fsync and syncfs returned")
		if w.m.namespace == nil {
			w.m.namespace = map[string]nsState{}
		}
		w.m.namespace[r.ack] = st
	}
	if st.never == 0 {
		w.m.values[r.durable] = float64(r.ops) / durable.Seconds()
	}
	return nil
}

// checkNamespace counts a durability check of what the target promised
// (nothing when it did not): the bucket lacked pending of r's changes.
func (w *workloads) checkNamespace(promised bool, r nsRun, pending int, when string) {
	if !promised {
		return
	}
	w.m.checks++
	if pending > 0 {
		w.m.fail("%s: %d of %d changes not in the bucket %s", r.ack, pending, r.ops, when)
	}
}

// pollPending checks the bucket once, and while it lacks changes checks
// it again every interval for up to timeout. It returns how long after
// its start the bucket showed every change (0 when it did at once), what
// it lacked at first, and what it still lacked at the end.
func pollPending(ctx context.Context, pending func(ctx context.Context) (int, error), every, timeout time.Duration) (late time.Duration, first, last int, err error) {
	t0 := time.Now()
	if first, err = pending(ctx); err != nil || first == 0 {
		return 0, first, 0, err
	}
	last = first
	for last > 0 && time.Since(t0) < timeout {
		select {
		case <-ctx.Done():
			return 0, first, last, ctx.Err()
		case <-time.After(every):
		}
		if last, err = pending(ctx); err != nil {
			return 0, first, last, err
		}
	}
	return time.Since(t0), first, last, nil
}

// mvPending is how many of the first n moves the bucket does not show:
// the old name still there, or the new one absent.
func (w *workloads) mvPending(ctx context.Context, n int) (int, error) {
	src, err := w.liveObjects(ctx, loopDir+"/")
	if err != nil {
		return 0, err
	}
	dst, err := w.liveObjects(ctx, movedDir+"/")
	if err != nil {
		return 0, err
	}
	p := 0
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("f%d", i)
		if src[loopDir+"/"+name] || !dst[movedDir+"/"+name] {
			p++
		}
	}
	return p, nil
}

// rmrfPending is how many objects of the removed directory (its files and
// its marker) the bucket still has.
func (w *workloads) rmrfPending(ctx context.Context) (int, error) {
	live, err := w.liveObjects(ctx, loopDir+"/")
	return len(live), err
}

// liveObjects lists prefix in the target's bucket and returns the keys
// that are not fencefs tombstones. A strict delete where the store's
// DELETE ignores If-Match (MinIO) leaves a tombstone at the key: the name
// is gone for every fencefs mount, and the object goes later (its reaper,
// the bucket's lifecycle rule). A tombstone is recognised by its metadata
// (a HEAD); keys found to be tombstones are not asked about again while
// their ETag stays the same.
func (w *workloads) liveObjects(ctx context.Context, prefix string) (map[string]bool, error) {
	live := map[string]bool{}
	for obj := range w.env.client.ListObjects(ctx, w.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, obj.Err
		}
		if etag, ok := w.tombstones[obj.Key]; ok && etag == obj.ETag {
			continue
		}
		tomb, err := w.isTombstone(ctx, obj.Key)
		if err != nil {
			return nil, err
		}
		if tomb {
			if w.tombstones == nil {
				w.tombstones = map[string]string{}
			}
			w.tombstones[obj.Key] = obj.ETag
			continue
		}
		live[obj.Key] = true
	}
	return live, nil
}

// isTombstone reports whether key holds a fencefs tombstone; a key gone
// since it was listed counts as one.
func (w *workloads) isTombstone(ctx context.Context, key string) (bool, error) {
	info, err := w.env.client.StatObject(ctx, w.bucket, key, minio.StatObjectOptions{})
	if minio.ToErrorResponse(err).StatusCode == 404 {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return hasTombstoneMeta(info.UserMetadata), nil
}

// hasTombstoneMeta reports whether user metadata (as minio-go returns it:
// names without x-amz-meta-, in any case) marks a fencefs tombstone.
func hasTombstoneMeta(meta map[string]string) bool {
	for k, v := range meta {
		if strings.EqualFold(strings.TrimPrefix(strings.ToLower(k), "x-amz-meta-"), fencing.MetaTombstone) {
			return v == "1"
		}
	}
	return false
}

// MoveLoop implements shellDriver: a bash loop of mv.
func (d *fsDriver) MoveLoop(ctx context.Context, from, to string, n int) error {
	return d.sh(ctx, "bash mv loop", nil, `set -e; for ((i=0; i<$3; i++)); do mv "$1/f$i" "$2/f$i"; done`, from, to, fmt.Sprint(n))
}

// RenameLoop implements shellDriver: a bash loop of mv in one directory.
func (d *fsDriver) RenameLoop(ctx context.Context, dir string, n int) error {
	return d.sh(ctx, "bash mv loop in place", nil, `set -e; for ((i=0; i<$2; i++)); do mv "$1/f$i" "$1/r$i"; done`, dir, fmt.Sprint(n))
}

// RemoveTree implements shellDriver: rm -rf.
func (d *fsDriver) RemoveTree(ctx context.Context, dir string) error {
	return d.sh(ctx, "rm -rf", nil, `rm -rf "$1"`, dir)
}

// SyncDirs implements shellDriver with fsync(2) of each directory (a
// filesystem that does not support it has nothing to sync there), then
// syncfs(2) of the mount (on FUSE it writes back dirty pages; the
// filesystem process is not told).
func (d *fsDriver) SyncDirs(_ context.Context, dirs ...string) error {
	for _, dir := range dirs {
		if err := fsyncDir(d.path(dir)); err != nil {
			return err
		}
	}
	f, err := os.Open(d.root)
	if err != nil {
		return err
	}
	defer f.Close()
	return pathErr("syncfs", d.root, unix.Syncfs(int(f.Fd())))
}

// fsyncDir fsyncs directory p; EINVAL, ENOTSUP and ENOSYS (no fsync for
// directories there) are not errors.
func fsyncDir(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	err = unix.Fsync(int(f.Fd()))
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.ENOSYS) {
		slog.Debug("fsync of a directory not supported", "dir", p, "err", err)
		return nil
	}
	return pathErr("fsync", p, err)
}

// MoveLoop implements shellDriver: a Rename (CopyObject, DeleteObject)
// per file.
func (d *s3Driver) MoveLoop(ctx context.Context, from, to string, n int) error {
	for i := 0; i < n; i++ {
		if err := d.Rename(ctx, fmt.Sprintf("%s/f%d", from, i), fmt.Sprintf("%s/f%d", to, i)); err != nil {
			return err
		}
	}
	return nil
}

// RenameLoop implements shellDriver: a Rename per file.
func (d *s3Driver) RenameLoop(ctx context.Context, dir string, n int) error {
	for i := 0; i < n; i++ {
		if err := d.Rename(ctx, fmt.Sprintf("%s/f%d", dir, i), fmt.Sprintf("%s/r%d", dir, i)); err != nil {
			return err
		}
	}
	return nil
}

// RemoveTree implements shellDriver: list the prefix, then DeleteObject
// of each object serially.
func (d *s3Driver) RemoveTree(ctx context.Context, dir string) error {
	var keys []string
	for obj := range d.env.client.ListObjects(ctx, d.bucket, minio.ListObjectsOptions{Prefix: dir + "/", Recursive: true}) {
		if obj.Err != nil {
			return obj.Err
		}
		keys = append(keys, obj.Key)
	}
	for _, k := range keys {
		if err := d.Remove(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// SyncDirs implements shellDriver: every call was durable when it returned.
func (d *s3Driver) SyncDirs(context.Context, ...string) error { return nil }
