package fusefs

// How a streamed file is split into parts, chosen from the cache disk.
//
// A streamed file (file_upload.go) keeps on local disk its first part (held
// until the commit), the parts being uploaded and the part being written:
// three parts at least. With the store's part size (8 MiB by default, and
// an upload that starts past twice that) a cache disk below 24 MiB fills
// before the upload can give anything back, and the write fails with
// ENOSPC. So when an upload starts, the room the cache disk has for the file
// (what its staging file holds there plus the disk's free space, by
// fstatfs) decides:
//
//   - room for three of the store's parts: the store's part size and
//     multipart threshold, as on any large disk;
//   - less: parts of a third of the room (whole MiB), at least S3's 5 MiB
//     minimum, and the upload starts past two of them;
//   - not even three 5 MiB parts (15 MiB): the store's sizes, and the file
//     fails with ENOSPC once the disk is full, keeping its old content.
//
// The upload's bound (what its staging file may hold before uploaded parts
// are released) is Options.StreamStaging or the room, whichever is less,
// so that on a small disk parts are released before the disk is full (a
// write that finds it full anyway still releases them, file_content_upload.go);
// parts grow every 1000 parts only while they stay within a quarter of the
// bound (partUpload.sizeOf). Parts of one upload need not be equal: S3,
// the gateway and MinIO require only that every part but the last be at
// least 5 MiB. The ETag the fencing layer records is computed from the
// parts uploaded, whatever their sizes (fencing.Guard.CommitStream).
//
// The largest file a disk streams is therefore bounded by S3's 10,000
// parts of at most a quarter of the bound: about 49 GiB through a 15 or
// 16 MiB disk (5 MiB parts, which cannot grow there), at least 78 GiB
// through one that holds three 8 MiB parts, over 500 GB with the defaults
// through 256 MiB or more; beyond it the file stays in staging and fails
// with ENOSPC, its old content kept.

import (
	"os"

	"github.com/fencefs/fencefs/objstore"
	"golang.org/x/sys/unix"
)

// uploadPlan is how an upload splits a file into parts and how much of it
// the staging file holds. Constant once the stream started.
type uploadPlan struct {
	// start: a sequential append takes the staged content past it starts
	// the stream.
	start int64
	// part: the size of the first 1000 parts (sizeOf).
	part int64
	// bound: once the staged content holds more, uploaded parts are
	// released from the staging file.
	bound int64
}

// planUpload chooses the plan of a stream with the store's sizing z, the
// staging bound staging (Options.StreamStaging) and room, the bytes of the
// cache disk the file's staging file may take (negative: unknown). See the
// head of this file.
func planUpload(z objstore.Sizing, staging, room int64) uploadPlan {
	z = z.Normalize()
	p := uploadPlan{start: z.MultipartThreshold, part: z.PartSize, bound: staging}
	if room < 0 {
		return p
	}
	p.bound = min(staging, room)
	if fit := (room / 3) &^ (1<<20 - 1); fit < z.PartSize && fit >= objstore.MinPartSize {
		p.part = fit
		p.start = min(z.MultipartThreshold, 2*fit)
	}
	return p
}

// minUploadStart: no plan starts a stream before the staged content passes
// two parts of S3's minimum size (or the store's threshold, if lower).
const minUploadStart = 2 * objstore.MinPartSize

// cacheRoom is how many bytes of its filesystem the staging file f may
// take: the blocks it holds plus the filesystem's free space (what an
// unprivileged writer may use); -1 when the filesystem cannot tell.
func cacheRoom(f *os.File) int64 {
	var fs unix.Statfs_t
	var st unix.Stat_t
	fd := int(f.Fd())
	if unix.Fstatfs(fd, &fs) != nil || unix.Fstat(fd, &st) != nil {
		return -1
	}
	unit := fs.Frsize
	if unit <= 0 {
		unit = fs.Bsize
	}
	return int64(fs.Bavail)*unit + st.Blocks*512
}
