package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"
)

// calibration is the raw client's measured round trips on the benchmark's
// gateway, each the median (or, for parallel PUTs, the mean time per
// request) over many requests.
type calibration struct {
	Put      float64 // seconds per PUT of a small object, one at a time
	Get      float64 // seconds per GET of a small object
	Put8     float64 // seconds per PUT with calParallel PUTs in flight (elapsed / requests)
	Copy     float64 // seconds per server-side CopyObject of a small object
	Delete   float64 // seconds per DeleteObject
	ListPage float64 // seconds per ListObjectsV2 page of 1000 keys (NaN without the listing bucket)
}

const (
	calRequests = 100 // requests per kind measured
	calParallel = 8   // in flight for Put8: as many as the parallel shells by default
	listPage    = 1000
)

// calibrate measures the raw client's round trips on a scratch bucket (and
// the listing bucket, when there is one).
func (e *benchEnv) calibrate(ctx context.Context) (calibration, error) {
	c := calibration{ListPage: math.NaN()}
	bucket := "bench-calibrate"
	if err := e.gw.CreateBucket(ctx, bucket); err != nil {
		return c, err
	}
	defer e.deleteBucket(context.WithoutCancel(ctx), bucket)
	key := func(i int) string { return fmt.Sprintf("cal/f%d", i) }
	put := func(ctx context.Context, i int) error {
		b := []byte(payload(i))
		_, err := e.client.PutObject(ctx, bucket, key(i), bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{})
		return err
	}
	var err error
	if c.Put, err = medianLatency(calRequests, func(i int) error { return put(ctx, i) }); err != nil {
		return c, err
	}
	if c.Get, err = medianLatency(calRequests, func(i int) error {
		_, err := (&s3Driver{env: e, bucket: bucket}).ReadSmall(ctx, key(i))
		return err
	}); err != nil {
		return c, err
	}
	copied := func(i int) string { return fmt.Sprintf("cal/c%d", i) }
	if c.Copy, err = medianLatency(calRequests, func(i int) error {
		_, err := e.client.CopyObject(ctx, minio.CopyDestOptions{Bucket: bucket, Object: copied(i)},
			minio.CopySrcOptions{Bucket: bucket, Object: key(i)})
		return err
	}); err != nil {
		return c, err
	}
	if c.Delete, err = medianLatency(calRequests, func(i int) error {
		return e.client.RemoveObject(ctx, bucket, copied(i), minio.RemoveObjectOptions{})
	}); err != nil {
		return c, err
	}
	t0 := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(calParallel)
	for i := 0; i < calParallel*calRequests/2; i++ {
		g.Go(func() error { return put(gctx, i) })
	}
	if err := g.Wait(); err != nil {
		return c, err
	}
	c.Put8 = time.Since(t0).Seconds() / float64(calParallel*calRequests/2)
	if lb := e.legacy.listingBucket; lb != "" {
		d := &s3Driver{env: e, bucket: lb}
		prefix, n := "lsl", e.cfg.ListFiles
		if !e.cfg.selected(wLsl) {
			prefix, n = "find/d0", e.cfg.FindFiles/4
		}
		secs, err := medianLatency(3, func(int) error { _, err := d.ListLong(ctx, prefix); return err })
		if err != nil {
			return c, err
		}
		c.ListPage = secs / float64(pages(n))
	}
	return c, nil
}

// medianLatency runs op n times serially and returns its median duration.
func medianLatency(n int, op func(i int) error) (float64, error) {
	var xs []float64
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := op(i); err != nil {
			return 0, err
		}
		xs = append(xs, time.Since(t0).Seconds())
	}
	return median(xs), nil
}

// pages is the number of ListObjectsV2 pages listing n keys takes (one for
// an empty listing).
func pages(n int) int { return max(1, (n+listPage-1)/listPage) }

// boundSpec is, for one legacy workload, the fewest S3 round trips the
// protocol needs for one run of it, and how its metric turns into seconds.
type boundSpec struct {
	key string
	// rtts describes the round trips of one run ("500 × PUT").
	rtts func(cfg config, tree *tarball) string
	// seconds is the time those round trips take at the raw client's
	// measured latency (in flight together where the workload allows).
	seconds func(cfg config, tree *tarball, c calibration) float64
	// ops is the number of operations in one run (files written, entries
	// extracted, listings), for per-operation times.
	ops func(cfg config, tree *tarball) int
}

// tarEntries is the number of entries tar x creates: files and directories.
func tarEntries(tb *tarball) int {
	if tb == nil {
		return 0
	}
	return len(tb.files) + tb.dirs
}

// findPages is what find -type f must list: its root (4 directories,
// one page) and every page of each of the 4 directories.
func findPages(n int) int { return 1 + 4*pages((n+3)/4) }

// boundSpecs are the bounds of the legacy workloads. A create or a whole-
// file replacement is one PUT (conditional in strict mode: If-None-Match
// or If-Match on the same request); an append to an object the mount has
// not read is a GET and a PUT; a directory is one PUT of its marker; a
// rename of a file is a server-side COPY and a DELETE; rm -rf is a DELETE
// per file and one of the directory's marker (the mount that wrote the
// directory knows what is in it: no listing), each in turn; ls -l needs
// only the listing pages, which carry every size and time, and a warm
// ls -l nothing; the parallel shells' PUTs are in flight together. The
// durable rates of mv and rm -rf have the same bounds.
var boundSpecs = []boundSpec{
	{
		key:     mRedirect,
		rtts:    func(cfg config, _ *tarball) string { return fmt.Sprintf("%d × PUT", cfg.ShellFiles) },
		seconds: func(cfg config, _ *tarball, c calibration) float64 { return float64(cfg.ShellFiles) * c.Put },
		ops:     func(cfg config, _ *tarball) int { return cfg.ShellFiles },
	},
	{
		key:     mAppend,
		rtts:    func(cfg config, _ *tarball) string { return fmt.Sprintf("%d × (GET + PUT)", cfg.ShellFiles) },
		seconds: func(cfg config, _ *tarball, c calibration) float64 { return float64(cfg.ShellFiles) * (c.Get + c.Put) },
		ops:     func(cfg config, _ *tarball) int { return cfg.ShellFiles },
	},
	mvBound(mMv), mvBound(mMvDurable), rmrfBound(mRmrf, rmrfFiles), rmrfBound(mRmrfDurable, rmrfFiles),
	rmrfBound(mRmrfRenamed, shellFiles), rmrfBound(mRmrfRenamedDurable, shellFiles),
	{
		key:     mTar,
		rtts:    func(_ config, tb *tarball) string { return fmt.Sprintf("%d × PUT", tarEntries(tb)) },
		seconds: func(_ config, tb *tarball, c calibration) float64 { return float64(tarEntries(tb)) * c.Put },
		ops:     func(_ config, tb *tarball) int { return tarEntries(tb) },
	},
	{
		key: mParallel,
		rtts: func(cfg config, _ *tarball) string {
			return fmt.Sprintf("%d × PUT, %d in flight", cfg.Shells*cfg.ShellFiles, cfg.Shells)
		},
		seconds: func(cfg config, _ *tarball, c calibration) float64 {
			return float64(cfg.Shells*cfg.ShellFiles) * c.Put8
		},
		ops: func(cfg config, _ *tarball) int { return cfg.Shells * cfg.ShellFiles },
	},
	{
		key:     mLslCold,
		rtts:    func(cfg config, _ *tarball) string { return fmt.Sprintf("%d × LIST page", pages(cfg.ListFiles)) },
		seconds: func(cfg config, _ *tarball, c calibration) float64 { return float64(pages(cfg.ListFiles)) * c.ListPage },
		ops:     func(config, *tarball) int { return 1 },
	},
	{
		key:     mLslWarm,
		rtts:    func(config, *tarball) string { return "none (cached)" },
		seconds: func(config, *tarball, calibration) float64 { return 0 },
		ops:     func(config, *tarball) int { return 1 },
	},
	{
		key:  mFind,
		rtts: func(cfg config, _ *tarball) string { return fmt.Sprintf("%d × LIST page", findPages(cfg.FindFiles)) },
		seconds: func(cfg config, _ *tarball, c calibration) float64 {
			return float64(findPages(cfg.FindFiles)) * c.ListPage
		},
		ops: func(config, *tarball) int { return 1 },
	},
}

// mvBound is the bound of mv's rate under key: a COPY and a DELETE per file.
func mvBound(key string) boundSpec {
	return boundSpec{
		key:     key,
		rtts:    func(cfg config, _ *tarball) string { return fmt.Sprintf("%d × (COPY + DELETE)", cfg.MvFiles) },
		seconds: func(cfg config, _ *tarball, c calibration) float64 { return float64(cfg.MvFiles) * (c.Copy + c.Delete) },
		ops:     func(cfg config, _ *tarball) int { return cfg.MvFiles },
	}
}

// rmrfBound is the bound of rm -rf's rate under key: a DELETE per file
// (files(cfg) of them), and one of the directory's marker.
func rmrfBound(key string, files func(config) int) boundSpec {
	return boundSpec{
		key:     key,
		rtts:    func(cfg config, _ *tarball) string { return fmt.Sprintf("%d × DELETE", files(cfg)+1) },
		seconds: func(cfg config, _ *tarball, c calibration) float64 { return float64(files(cfg)+1) * c.Delete },
		ops:     func(cfg config, _ *tarball) int { return files(cfg) },
	}
}

// shellFiles is the number of files a bash redirect loop writes.
func shellFiles(cfg config) int { return cfg.ShellFiles }

// workloadSeconds turns a legacy metric's value into the seconds one run
// took: rates are operations per second, the others seconds already.
func workloadSeconds(d metricDef, value float64, ops int) float64 {
	if d.higherBetter {
		return float64(ops) / value
	}
	return value
}

// bound is the least time one run of a workload can take: its round trips
// at the raw client's latency plus what FUSE alone costs it (the floor's
// time); NaN when a part is unknown.
func bound(rttSeconds, floorSeconds float64) float64 {
	if math.IsNaN(rttSeconds) || math.IsNaN(floorSeconds) || floorSeconds < 0 || rttSeconds < 0 {
		return math.NaN()
	}
	return rttSeconds + floorSeconds
}

// efficiency is the bound over the measured time: 1 is as fast as the
// protocol and FUSE allow; NaN when unknown.
func efficiency(boundSeconds, measuredSeconds float64) float64 {
	if math.IsNaN(boundSeconds) || math.IsNaN(measuredSeconds) || measuredSeconds <= 0 {
		return math.NaN()
	}
	return boundSeconds / measuredSeconds
}
