package fusefs

import (
	"errors"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the filesystem's Prometheus metrics. The zero value (no
// Registerer) records nothing.
type metrics struct {
	errs    *prometheus.CounterVec
	latency *prometheus.HistogramVec
	// negativeHits counts lookups answered ENOENT from a directory's
	// listing without a request (dirNames).
	negativeHits prometheus.Counter
	// streamed counts commits of files uploaded while written, by result:
	// committed, fallback (uploaded whole with Put instead), failed.
	streamed *prometheus.CounterVec
	// readRebases counts reads that moved to the object's current version
	// instead of failing ESTALE (file_handle.go: rebase); activations counts the times
	// this mount became the leader and forgot what it had cached (activate.go).
	readRebases prometheus.Counter
	// superseded counts nodes whose version was replaced in the bucket
	// while handles read it: their name moved to a new inode (file_capture.go).
	superseded   prometheus.Counter
	activations  prometheus.Counter
	prefetchHits prometheus.Counter
	// attrWritebackFailures counts acknowledged attribute changes that
	// could not be stored (attrwb.go).
	attrWritebackFailures prometheus.Counter
	// deleteFailures counts acknowledged deletes that could not be
	// stored (deletewb.go).
	deleteFailures prometheus.Counter
	// refusedDrops counts files whose held changes the fence refused for
	// good and the mount dropped (held.go).
	refusedDrops prometheus.Counter
	collectors   []prometheus.Collector
}

// gauges are what the metrics read of the mount when they are scraped.
type gauges struct {
	attrPending    func() int           // changes the attribute write-back holds
	pendingDeletes func() int           // deletes acknowledged and not ended
	dirtyFiles     func() int64         // files with uncommitted changes
	stagingBytes   func() int64         // bytes in staging files
	oldestDirty    func() time.Duration // age of the oldest uncommitted change
	stagingFS      func() (avail, size float64)
}

// newMetrics makes the metrics of one mount, reading g when scraped.
func newMetrics(g gauges) *metrics {
	m := &metrics{}
	m.errs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "fencefs", Subsystem: "fuse", Name: "errors_total",
		Help: "FUSE operations that failed, by errno.",
	}, []string{"errno"})
	m.latency = newLatencyHistogram()
	m.negativeHits = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "fencefs", Subsystem: "fuse", Name: "negative_lookup_hits_total",
		Help: "Lookups of absent names answered from the directory's last listing (or this mount's own creations) without a request.",
	})
	m.streamed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "fencefs", Subsystem: "fuse", Name: "streamed_commits_total",
		Help: "Commits of large files whose parts were uploaded while they were written, by result (committed; fallback: uploaded whole instead; failed).",
	}, []string{"result"})
	m.readRebases = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "fencefs", Subsystem: "fuse", Name: "read_rebases_total",
		Help: "Reads that had returned nothing yet and took the object's current version instead of failing with ESTALE.",
	})
	m.superseded = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "fencefs", Subsystem: "fuse", Name: "superseded_files_total",
		Help: "Open files replaced in the bucket by another writer while read here; their name moved to a new inode so that new opens read the new version.",
	})
	m.activations = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "fencefs", Subsystem: "fuse", Name: "activations_total",
		Help: "Times this mount became the active leader (a token bound) and dropped the versions it had cached before.",
	})
	m.prefetchHits = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "fencefs", Subsystem: "fuse", Name: "prefetch_hits_total",
		Help: "Lookups answered by a HEAD a directory listing started ahead of them.",
	})
	m.attrWritebackFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "fencefs", Subsystem: "fuse", Name: "attr_writeback_failures_total",
		Help: "Acknowledged chmod/chown/utimens that could not be stored a moment later (fenced, or the storage failed) and were dropped.",
	})
	m.deleteFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "fencefs", Subsystem: "fuse", Name: "delete_failures_total",
		Help: "Deletes unlink acknowledged that could not be stored (fenced, the object changed, or the storage failed): the name shows the object again and the directory's next fsync fails.",
	})
	m.refusedDrops = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "fencefs", Subsystem: "fuse", Name: "refused_changes_dropped_total",
		Help: "Files whose uncommitted changes were refused by the fence (fenced, or made under a binding another holder's epoch superseded) and dropped: the close or write that met them failed with EROFS.",
	})
	m.collectors = []prometheus.Collector{
		m.errs,
		m.deleteFailures,
		m.refusedDrops,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "fencefs", Subsystem: "fuse", Name: "deletes_pending",
			Help: "Deletes unlink acknowledged that are queued or in flight (in the bucket once fsync of their directory, its rmdir or unmount returns).",
		}, func() float64 { return float64(g.pendingDeletes()) }),
		m.attrWritebackFailures,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "fencefs", Subsystem: "fuse", Name: "attr_writeback_pending",
			Help: "Nodes with an acknowledged chmod/chown/utimens not stored yet (stored within mount.attr_writeback).",
		}, func() float64 { return float64(g.attrPending()) }),
		m.prefetchHits,
		m.readRebases,
		m.superseded,
		m.activations,
		m.streamed,
		m.latency,
		m.negativeHits,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "fencefs", Subsystem: "fuse", Name: "dirty_files",
			Help: "Files with local changes not yet committed to the bucket.",
		}, func() float64 { return float64(g.dirtyFiles()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "fencefs", Subsystem: "fuse", Name: "staging_bytes",
			Help: "Bytes held in local staging files.",
		}, func() float64 { return float64(g.stagingBytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "fencefs", Subsystem: "fuse", Name: "oldest_dirty_age_seconds",
			Help: "Age of the oldest local change not yet committed to the bucket (0 when nothing is dirty): what a crash now would lose the most of.",
		}, func() float64 { return g.oldestDirty().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "fencefs", Subsystem: "fuse", Name: "staging_fs_avail_bytes",
			Help: "Bytes available on the file system holding the staging files (the cache directory); 0 if it cannot be read.",
		}, func() float64 { avail, _ := g.stagingFS(); return avail }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "fencefs", Subsystem: "fuse", Name: "staging_fs_size_bytes",
			Help: "Size of the file system holding the staging files (the cache directory); 0 if it cannot be read.",
		}, func() float64 { _, size := g.stagingFS(); return size }),
	}
	return m
}

// register adds the metrics to r (nil: none).
func (m *metrics) register(r prometheus.Registerer) error {
	if r == nil {
		return nil
	}
	var errs []error
	for _, c := range m.collectors {
		if err := r.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *metrics) unregister(r prometheus.Registerer) {
	if r == nil {
		return
	}
	for _, c := range m.collectors {
		r.Unregister(c)
	}
}

// errors counts one failed operation.
func (m *metrics) errors(e syscall.Errno) {
	m.errs.WithLabelValues(errnoName(e)).Inc()
}

// errnoName is the symbolic name of common errnos (metric labels).
func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.ENOENT:
		return "ENOENT"
	case syscall.EROFS:
		return "EROFS"
	case syscall.ESTALE:
		return "ESTALE"
	case syscall.EIO:
		return "EIO"
	case syscall.EEXIST:
		return "EEXIST"
	case syscall.EINTR:
		return "EINTR"
	case syscall.EINVAL:
		return "EINVAL"
	case syscall.EACCES:
		return "EACCES"
	case syscall.ENOTEMPTY:
		return "ENOTEMPTY"
	case syscall.ENODATA:
		return "ENODATA"
	case syscall.EXDEV:
		return "EXDEV"
	case syscall.EBUSY:
		return "EBUSY"
	case syscall.ENOTSUP:
		return "ENOTSUP"
	case syscall.EPERM:
		return "EPERM"
	}
	return "other"
}
