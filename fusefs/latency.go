package fusefs

import (
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
)

// timedFS wraps the node filesystem's RawFileSystem and observes the
// latency of the operations that reach the storage (or stage data) in a
// histogram labelled by operation. Operations that stay in memory (forget,
// access, lseek, locks …) pass through untimed. go-fuse's own
// Server.RecordLatencies is a no-op since v2.5, hence this wrapper.
type timedFS struct {
	fuse.RawFileSystem
	hist *prometheus.HistogramVec
}

func newLatencyHistogram() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "fencefs", Subsystem: "fuse", Name: "op_duration_seconds",
		Help:    "Latency of FUSE operations, by operation.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10), // 100µs … 26s
	}, []string{"op"})
}

func (t *timedFS) observe(op string, start time.Time) {
	t.hist.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

var _ fuse.RawFileSystem = (*timedFS)(nil)

func (t *timedFS) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer t.observe("lookup", time.Now())
	return t.RawFileSystem.Lookup(c, h, name, out)
}

func (t *timedFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer t.observe("getattr", time.Now())
	return t.RawFileSystem.GetAttr(c, in, out)
}

func (t *timedFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer t.observe("setattr", time.Now())
	return t.RawFileSystem.SetAttr(c, in, out)
}

func (t *timedFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer t.observe("mkdir", time.Now())
	return t.RawFileSystem.Mkdir(c, in, name, out)
}

func (t *timedFS) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer t.observe("unlink", time.Now())
	return t.RawFileSystem.Unlink(c, h, name)
}

func (t *timedFS) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer t.observe("rmdir", time.Now())
	return t.RawFileSystem.Rmdir(c, h, name)
}

func (t *timedFS) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	defer t.observe("rename", time.Now())
	return t.RawFileSystem.Rename(c, in, oldName, newName)
}

func (t *timedFS) Symlink(c <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	defer t.observe("symlink", time.Now())
	return t.RawFileSystem.Symlink(c, h, target, name, out)
}

func (t *timedFS) Readlink(c <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	defer t.observe("readlink", time.Now())
	return t.RawFileSystem.Readlink(c, h)
}

func (t *timedFS) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	defer t.observe("setxattr", time.Now())
	return t.RawFileSystem.SetXAttr(c, in, attr, data)
}

func (t *timedFS) RemoveXAttr(c <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	defer t.observe("removexattr", time.Now())
	return t.RawFileSystem.RemoveXAttr(c, h, attr)
}

func (t *timedFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer t.observe("create", time.Now())
	return t.RawFileSystem.Create(c, in, name, out)
}

func (t *timedFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer t.observe("open", time.Now())
	return t.RawFileSystem.Open(c, in, out)
}

func (t *timedFS) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer t.observe("read", time.Now())
	return t.RawFileSystem.Read(c, in, buf)
}

func (t *timedFS) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer t.observe("write", time.Now())
	return t.RawFileSystem.Write(c, in, data)
}

func (t *timedFS) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	defer t.observe("flush", time.Now())
	return t.RawFileSystem.Flush(c, in)
}

func (t *timedFS) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer t.observe("fsync", time.Now())
	return t.RawFileSystem.Fsync(c, in)
}

func (t *timedFS) Release(c <-chan struct{}, in *fuse.ReleaseIn) {
	defer t.observe("release", time.Now())
	t.RawFileSystem.Release(c, in)
}

func (t *timedFS) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer t.observe("opendir", time.Now())
	return t.RawFileSystem.OpenDir(c, in, out)
}

func (t *timedFS) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer t.observe("readdir", time.Now())
	return t.RawFileSystem.ReadDir(c, in, out)
}

func (t *timedFS) StatFs(c <-chan struct{}, in *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer t.observe("statfs", time.Now())
	return t.RawFileSystem.StatFs(c, in, out)
}
