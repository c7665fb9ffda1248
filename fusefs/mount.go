package fusefs

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is a mounted fencefs filesystem (Go does not allow a type named like
// the Mount function).
type FS struct {
	fsys       *filesystem
	server     *fuse.Server
	mountpoint string

	cleanupOnce sync.Once
	unmountMu   sync.Mutex // serialises Unmount calls
}

// Mount mounts the bucket (Options.Store under Options.Prefix) on
// mountpoint and returns once the kernel mount is ready. The filesystem is
// served until it is unmounted (Unmount, or fusermount -u by anyone): Wait
// blocks until then. ctx bounds only the mounting: once the kernel mount
// exists (and may be in use) it is returned even if ctx ended meanwhile.
func Mount(ctx context.Context, mountpoint string, opts Options) (*FS, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.CacheDir, 0o700); err != nil {
		return nil, fmt.Errorf("fusefs: cache directory: %w", err)
	}
	stageDir, err := os.MkdirTemp(opts.CacheDir, "fencefs-stage-")
	if err != nil {
		return nil, fmt.Errorf("fusefs: staging directory: %w", err)
	}
	fsys := newFilesystem(opts, stageDir)
	fsys.mountDir = mountpoint
	if err := fsys.metrics.register(opts.Registerer); err != nil {
		os.RemoveAll(stageDir)
		return nil, fmt.Errorf("fusefs: register metrics: %w", err)
	}
	root := newDirNode(fsys, rootInfo(fsys))
	fsys.root = root.EmbeddedInode()

	attrTTL, entryTTL := opts.AttrTTL, opts.EntryTTL
	fopts := &fs.Options{
		MountOptions: fuse.MountOptions{
			AllowOther:   opts.Access.AllowOther,
			Options:      mountFlags(opts),
			FsName:       opts.FsName,
			Name:         "fencefs",
			MaxWrite:     maxIO,
			MaxReadAhead: maxIO,
			// Readdir lists names with one LIST; READDIRPLUS would make
			// every listing pay a HEAD per entry, unless the listing
			// carries each entry's attributes.
			DisableReadDirPlus: !opts.ListingsCarryMetadata,
			// Security labels and POSIX ACLs reach getxattr (node.go):
			// go-fuse's IgnoreSecurityLabels answers ENODATA, which
			// made ls -l ask every file.
			MaxBackground: 64,
			// open(O_TRUNC) arrives as one OPEN with O_TRUNC, so the
			// truncation is staged with the handle, not committed alone.
			ExtraCapabilities: fuse.CAP_ATOMIC_O_TRUNC,
			Debug:             opts.Debug,
			Logger:            slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug),
		},
		EntryTimeout:    &entryTTL,
		AttrTimeout:     &attrTTL,
		NegativeTimeout: &entryTTL,
		NullPermissions: true,
		Logger:          log.New(slogWriter{opts.Logger}, "", 0),
	}
	server, err := serve(mountpoint, &timedFS{RawFileSystem: fs.NewNodeFS(root, fopts), hist: fsys.metrics.latency}, fopts)
	if err != nil {
		fsys.cancel()
		fsys.metrics.unregister(opts.Registerer)
		os.RemoveAll(stageDir)
		return nil, fmt.Errorf("fusefs: mount %s: %w", mountpoint, err)
	}
	raiseKernelReadahead(mountpoint, kernelReadaheadKB, fsys.log)
	fsys.mntID.Store(int64(mountID(mountpoint)))
	fsys.noteStatus(fsys.status())
	go fsys.watchGuard()
	if fsys.attrwb != nil {
		go fsys.attrwb.run(fsys.ctx)
	}
	m := &FS{fsys: fsys, server: server, mountpoint: mountpoint}
	// Once the kernel mount exists it may already be in use: it is
	// returned even if ctx ended meanwhile, and the caller stops it the
	// normal way (flush, unmount).
	fsys.log.Info("mounted", "mountpoint", mountpoint, "prefix", opts.Prefix,
		"state", fsys.status().State, "read_only", opts.Access.ReadOnly)
	return m, nil
}

// mountFlags are the kernel mount options beyond go-fuse's own. Permission
// checks are the kernel's (default_permissions, as the FUSE documentation
// recommends for multi-user mounts) and always on with allow_other.
func mountFlags(opts Options) []string {
	if opts.Access.AllowOther || opts.Access.DefaultPermissions {
		return []string{"default_permissions"}
	}
	return nil
}

// rootInfo is the root's version: the prefix's marker is not looked up (the
// mount's defaults apply); LastModified is the mount time.
func rootInfo(fsys *filesystem) (info objstore.ObjectInfo) {
	info.Key = fsys.prefix
	info.LastModified = fsys.mountTime
	return info
}

// Wait blocks until the filesystem is unmounted, then removes the staging
// directory.
func (m *FS) Wait() {
	m.server.Wait()
	if err := m.fsys.deletes.waitAll(context.Background()); err != nil {
		m.fsys.log.Error("unmounted: acknowledged deletes failed", "err", err)
	}
	if m.fsys.attrwb != nil {
		// Unmounted by someone else (fusermount -u): the bucket can
		// still take the attribute changes the kernel acknowledged.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := m.fsys.attrwb.storeAll(ctx); err != nil {
			m.fsys.log.Error("unmounted: attribute changes are lost", "err", err)
		}
		cancel()
	}
	m.cleanup()
}

// Unmount commits every file with uncommitted changes, then unmounts. The
// filesystem is unmounted even when a commit fails (the error reports the
// files whose changes were lost). Unmounting fails (EBUSY) while files or
// directories of the mount are in use; the mount then stays up.
func (m *FS) Unmount(ctx context.Context) error {
	m.unmountMu.Lock()
	defer m.unmountMu.Unlock()
	commitErr := m.fsys.commitAll(ctx)
	var umErr error
	for attempt := 0; ; attempt++ {
		umErr = m.server.Unmount()
		if umErr == nil || ctx.Err() != nil || attempt >= 10 {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	if umErr != nil {
		return errors.Join(commitErr, fmt.Errorf("fusefs: unmount %s: %w", m.mountpoint, umErr))
	}
	m.cleanup()
	return commitErr
}

func (m *FS) cleanup() {
	m.cleanupOnce.Do(func() {
		m.fsys.cancel()
		m.fsys.metrics.unregister(m.fsys.opts.Registerer)
		if err := os.RemoveAll(m.fsys.stageDir); err != nil {
			m.fsys.log.Warn("could not remove the staging directory", "dir", m.fsys.stageDir, "err", err)
		}
		m.fsys.log.Info("unmounted", "mountpoint", m.mountpoint)
	})
}

// DirtyFiles returns the number of files with uncommitted changes.
func (m *FS) DirtyFiles() int { return int(m.fsys.dirtyFiles.Load()) }

// StagingBytes returns the bytes held in staging files.
func (m *FS) StagingBytes() int64 { return m.fsys.stagingBytes.Load() }

// commitAll waits for the deletes unlink acknowledged, commits every dirty
// file and stores every pending attribute change (unmount).
func (fsys *filesystem) commitAll(ctx context.Context) error {
	fsys.nodesMu.Lock()
	files := make([]stagedFile, 0, len(fsys.staged))
	for f := range fsys.staged {
		files = append(files, f)
	}
	fsys.nodesMu.Unlock()
	var errs []error
	if err := fsys.deletes.waitAll(ctx); err != nil {
		errs = append(errs, err) // each logged as it failed
	}
	for _, f := range files {
		if err := f.commit(ctx); err != nil {
			errs = append(errs, err)
			fsys.log.Error("unmount: uncommitted changes are lost", "err", err)
		}
	}
	if fsys.attrwb != nil {
		if err := fsys.attrwb.storeAll(ctx); err != nil {
			errs = append(errs, err)
			fsys.log.Error("unmount: attribute changes are lost", "err", err)
		}
	}
	return errors.Join(errs...)
}

// slogWriter adapts go-fuse's log.Logger output to slog.
type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	msg := string(p)
	for len(msg) > 0 && msg[len(msg)-1] == '\n' {
		msg = msg[:len(msg)-1]
	}
	w.l.Warn("go-fuse: " + msg)
	return len(p), nil
}

// serve mounts rawFS at mountpoint and serves it (fs.Mount, with the raw
// filesystem wrapped for latency metrics).
func serve(mountpoint string, rawFS fuse.RawFileSystem, fopts *fs.Options) (*fuse.Server, error) {
	server, err := fuse.NewServer(rawFS, mountpoint, &fopts.MountOptions)
	if err != nil {
		return nil, err
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		// The serve loop ends by itself when the mount fails.
		return nil, err
	}
	return server, nil
}
