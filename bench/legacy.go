package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"
)

// legacyEnv is what the legacy-program workloads of every target run share.
type legacyEnv struct {
	tree *tarball // the archive tar x extracts (nil unless tar is selected)
	// listingBucket holds the objects ls -l and find list, written once by
	// the raw client ("" unless lsl or find is selected)
	listingBucket string
	cal           calibration // the raw client's round trips
	loopback      string      // go-fuse's loopback example binary (the FUSE floor)

	floorOnce sync.Once
	floorSrc  string // the floor's copy of the listing tree, made once
	floorErr  error
}

// tarball is an archive of a real directory tree and what is in it.
type tarball struct {
	src   string // the directory archived
	path  string
	files []tarFile // regular files, in archive order
	dirs  int
}

// tarFile is one regular file of a tarball.
type tarFile struct {
	name string // slash-separated path in the archive
	size int64
}

// listingObjectSize is the size of each object ls -l and find list.
const listingObjectSize = 64

// prepareLegacy makes what the selected legacy workloads share: the
// tarball, the listing bucket, the FUSE floor's binary, and the raw
// client's round trips.
func (e *benchEnv) prepareLegacy(ctx context.Context) error {
	cfg := e.cfg
	var err error
	if cfg.selected(wTar) {
		if e.legacy.tree, err = makeTarball(ctx, cfg.TarDir, filepath.Join(cfg.WorkDir, "tree.tar")); err != nil {
			return err
		}
	}
	if cfg.selectedAny([]string{wLsl, wFind}) {
		e.legacy.listingBucket = "bench-listing"
		if err := e.gw.CreateBucket(ctx, e.legacy.listingBucket); err != nil {
			return err
		}
		t0 := time.Now()
		keys := listingKeys(cfg)
		if err := putParallel(ctx, e.client, e.legacy.listingBucket, keys, 16); err != nil {
			return fmt.Errorf("writing the listing objects: %w", err)
		}
		slog.Info("listing objects written by the raw client", "objects", len(keys), "took", time.Since(t0).Round(time.Millisecond))
	}
	if e.legacy.loopback, err = buildLoopback(ctx, cfg.WorkDir); err != nil {
		return err
	}
	if e.legacy.cal, err = e.calibrate(ctx); err != nil {
		return fmt.Errorf("measuring the raw client's round trips: %w", err)
	}
	return nil
}

// makeTarball archives dir (default: the Go distribution's net/http, present
// wherever Go is) into path and lists its content.
func makeTarball(ctx context.Context, dir, path string) (*tarball, error) {
	if dir == "" {
		out, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
		if err != nil {
			return nil, fmt.Errorf("go env GOROOT: %w", err)
		}
		dir = filepath.Join(strings.TrimSpace(string(out)), "src", "net", "http")
	}
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("-tar-dir %s: not a directory", dir)
	}
	cmd := exec.CommandContext(ctx, "tar", "cf", path, "-C", filepath.Dir(dir), filepath.Base(dir))
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("tar cf: %v: %s", err, bytes.TrimSpace(out))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tb := &tarball{src: dir, path: path}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			tb.dirs++
		case tar.TypeReg:
			tb.files = append(tb.files, tarFile{name: h.Name, size: h.Size})
		default:
			return nil, fmt.Errorf("-tar-dir %s holds %s, neither a file nor a directory", dir, h.Name)
		}
	}
	return tb, nil
}

// listingKeys are the keys of the listing bucket: directory markers, then
// ListFiles objects in lsl/ (for lsl) and FindFiles in find/d0 … find/d3
// (for find).
func listingKeys(cfg config) []string {
	var keys []string
	if cfg.selected(wLsl) {
		keys = append(keys, "lsl/")
	}
	if cfg.selected(wFind) {
		keys = append(keys, "find/")
		for d := 0; d < 4; d++ {
			keys = append(keys, fmt.Sprintf("find/d%d/", d))
		}
	}
	if cfg.selected(wLsl) {
		for i := 0; i < cfg.ListFiles; i++ {
			keys = append(keys, fmt.Sprintf("lsl/f%06d", i))
		}
	}
	if cfg.selected(wFind) {
		for i := 0; i < cfg.FindFiles; i++ {
			keys = append(keys, fmt.Sprintf("find/d%d/f%06d", i%4, i/4))
		}
	}
	return keys
}

// putParallel writes keys into bucket with at most n PUTs in flight;
// keys ending in "/" are empty directory markers, the others hold
// listingObjectSize bytes.
func putParallel(ctx context.Context, client *minio.Client, bucket string, keys []string, n int) error {
	data := bytes.Repeat([]byte("x"), listingObjectSize)
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(n)
	for _, k := range keys {
		g.Go(func() error {
			body, opts := data, minio.PutObjectOptions{}
			if strings.HasSuffix(k, "/") {
				// An empty payload signed with its SHA-256 makes the
				// gateway (v1.8.0) send a stray 400 on the connection
				// after answering; an unsigned one does not.
				body, opts.DisableContentSha256 = nil, true
			}
			_, err := client.PutObject(ctx, bucket, k, bytes.NewReader(body), int64(len(body)), opts)
			return err
		})
	}
	return g.Wait()
}

// buildLoopback builds go-fuse's loopback example (what bench/floor runs)
// into dir.
func buildLoopback(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "loopback")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/hanwen/go-fuse/v2/example/loopback").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building go-fuse's loopback example: %v: %s", err, bytes.TrimSpace(out))
	}
	return bin, nil
}

// floorTarget is the FUSE floor: go-fuse's loopback example filesystem
// over a directory of the work directory (tmpfs by default), no S3 at all.
// It runs only the legacy workloads; their time on it is what FUSE itself
// costs them here, the second part of each bound.
type floorTarget struct{}

// floorName is the floor's target name.
const floorName = "fuse-floor"

func isFloor(t target) bool { _, ok := t.(floorTarget); return ok }

// Name implements target.
func (floorTarget) Name() string { return floorName }

// DurableAtClose implements target: nothing goes to the bucket, and no
// durability is checked.
func (floorTarget) DurableAtClose() bool { return false }

// Namespace implements target: nothing goes to the bucket.
func (floorTarget) Namespace() nsContract { return nsContract{} }

// Start implements target: it mounts the loopback over a fresh directory,
// or for the listing bucket over a copy of its tree made once.
func (floorTarget) Start(ctx context.Context, env *benchEnv, bucket, scratch string) (*instance, error) {
	src := filepath.Join(scratch, "src")
	if bucket != "" && bucket == env.legacy.listingBucket {
		env.legacy.floorOnce.Do(func() {
			env.legacy.floorSrc = filepath.Join(env.cfg.WorkDir, "floor-listing")
			env.legacy.floorErr = writeListingTree(env.legacy.floorSrc, listingKeys(env.cfg))
		})
		if env.legacy.floorErr != nil {
			return nil, env.legacy.floorErr
		}
		src = env.legacy.floorSrc
	} else if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, err
	}
	mt := &mountTarget{
		name: floorName,
		command: func(s mountSpec) (string, []string, []string, error) {
			return env.legacy.loopback, []string{"-q", s.mountpoint, src}, nil, nil
		},
	}
	return mt.Start(ctx, env, bucket, scratch)
}

// writeListingTree makes the listing bucket's keys as files under dir.
func writeListingTree(dir string, keys []string) error {
	data := bytes.Repeat([]byte("x"), listingObjectSize)
	for _, k := range keys {
		p := filepath.Join(dir, filepath.FromSlash(k))
		var err error
		if strings.HasSuffix(k, "/") {
			err = os.MkdirAll(p, 0o755)
		} else {
			err = os.WriteFile(p, data, 0o644)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
