// Package fusefs is the fencefs filesystem: a FUSE mount (go-fuse/v2) of an
// S3 bucket, or of a prefix of it, where every mutation goes through the
// fencing Guard and every read goes straight to the objstore.Store.
//
// # Files and objects
//
// One file is one object at the same key, readable by any S3 client. POSIX
// metadata lives in the user metadata keys s3fs uses: mode (decimal st_mode,
// with S_IFREG/S_IFDIR/S_IFLNK), uid, gid, mtime, ctime, atime (decimal
// seconds, "sec.nsec" when there are nanoseconds) and xattr (URL-encoded JSON
// of base64 values); rclone's mtime is read too. Objects without metadata
// are regular files with the mount's owner and modes. A directory is a
// "dir/" marker object, or implicitly the common prefix of the objects under
// it. A symlink is an object whose body is the target, with S_IFLNK in its
// mode. A FIFO, socket or device node is an empty object with its S_IF* type
// in mode and, for a device, its number in rdev (special.go). Hard links are
// not supported (ENOTSUP): an object cannot have two keys. chown, chmod and
// utimens follow Linux's ownership rules (posixrules.go); see docs/POSIX.md
// for what pjdfstest finds and why.
//
// Tombstones (the objects fencing writes in place of deleted keys) and the
// protocol directory "<domain>/.fencefs/" are invisible: lookups and
// listings skip them, and a directory holding only tombstones does not
// exist.
//
// # Writes
//
// A file's content stays in the store until a handle writes or truncates
// it; then the object is copied into a staging file under the cache
// directory (pinned to the ETag the mount saw), writes go there, and the
// whole file is committed with Guard.Put on flush (every close), fsync and
// release — except a close while the only change is the open's own (empty
// new file, O_TRUNC) and the closing process still holds the file through
// another descriptor, as shell redirects and dd do (file_handle_dupclose.go). The commit is conditioned on the version the mount read (on
// absence for a new file, on the tombstone for a file created over a deleted
// key): fsync and close succeed only when the data is stored under an epoch
// that was still valid, and report the failure otherwise. A new file is
// written at its first close, so create-write-close is one PUT; a large
// file written sequentially is uploaded while it is written (its parts go
// out as the writer passes them, the close sends the first part, the tail
// and the Complete through Guard.CommitStream; see file_upload.go), falling back
// to one Put of the staging file whenever the stream no longer matches it.
// Past Options.StreamStaging (or the cache disk's room, if less), uploaded
// parts leave the staging file, so a file of any size needs bounded local
// disk (three parts, sized to the cache disk, down to S3's 5 MiB minimum:
// file_upload_plan.go); such a file then accepts only sequential writes (ESPIPE
// otherwise; file_content_upload.go states the rules); O_EXCL creates the empty
// object at once, so exclusivity holds across mounts.
// chmod, chown, utimens and setxattr are a server-side self-copy with new
// metadata (or ride along with pending content). Unlink and rmdir are
// conditional deletes; rename is a conditional server-side copy followed by
// a conditional delete. A directory rename moves object by object, is not
// atomic, and is limited to Options.MaxDirRename objects (EXDEV beyond, so
// mv(1) falls back to copying file by file).
//
// # Reads and caching
//
// Reads are GETs pinned to the ETag the node holds (a changed object reads
// as ESTALE once the handle returned bytes, never as a mix of versions; a
// handle that returned none moves to the current version, file_handle.go): a sequential reader gets one
// streaming GET from its position to the end, read ahead into pooled 1 MiB
// buffers (2 MiB ahead, growing to 16 MiB) that READ replies point into
// without a copy; random reads are one ranged GET each (readahead.go,
// read.go). The mount raises the kernel's readahead of the FUSE device to
// 1 MiB when it may (root), so the kernel sends large reads several at a
// time. A node with open handles is never refreshed
// from the store (close-to-open consistency). The kernel caches attributes
// and entries for Options.AttrTTL and EntryTTL; nodes trust the metadata they
// fetched for Options.MetaCacheTTL, and forget all of it when the mount
// becomes the leader or learns it is fenced (activate.go). A directory's last listing (or its
// creation by this mount) answers lookups of names it did not show with
// ENOENT for EntryTTL, like the kernel's negative entries (names.go). The
// mount's own changes update its nodes at once.
//
// # Fencing and errors
//
// Without a bound token (and with fencing on) the mount is read-only: every
// mutation fails with EROFS at once. Binding is done at run time with
// setfattr -n user.fencefs.token -v N (or "auto") on the mount root; the
// root also shows user.fencefs.epoch, .state, .holder, .epoch_holder and
// .reason, and every object shows user.fencefs.stamp, the epoch that wrote
// it. Errors become errnos in one function, toErrno:
//
//	fenced (a newer epoch exists), no token   EROFS
//	someone else changed the object           ESTALE
//	the epoch register cannot be read         EIO
//	object not found                          ENOENT
//	the name exists (create, mkdir, O_EXCL)   EEXIST
//	a streamed file accessed below the parts  ESPIPE
//	  that left the staging file
//	the caller was interrupted                EINTR
//
// and every failure is logged once with its cause.
//
// # Interrupts
//
// A mutation (close, fsync, create, mkdir, rename, chmod, …) is never
// abandoned when the calling process receives a signal: an abandoned
// conditional write has an unknown outcome that the caller could not act
// on. Read-only requests ignore signals too unless Options.HonorInterrupts
// is set (then they fail with EINTR): like NFS since Linux 2.6.25 and gcsfuse
// by default, because ordinary signals (SIGCHLD, SIGWINCH, and the SIGURG the
// Go runtime sends constantly) would otherwise turn into EINTR from read(2),
// stat(2) or close(2), which almost no program retries. A fatal signal
// still ends the waiting process at once. Unmounting cancels everything.
//
// # Concurrency
//
// Each node has its own locks; none is held across the filesystem, and the
// ones held across network calls are per node. Lock order, outermost first:
//
//	fileNode.openMu     a regular file's opens
//	nodeBase.opMu       serialises a node's mutations (commit, metadata,
//	                    unlink, rename); two nodes are locked in address order
//	fileContent.body    a file's staged bytes (write: create, write, truncate,
//	                    drop; read: read, upload)
//	fileHandle.mu       a handle's reader
//	nodeBase.mu         the node's fields; never held across I/O
//	fileContent.mu      the content's state; never held across I/O
//	partUpload.mu       an upload's parts
//	filesystem.nodesMu  the files the mount tracks as staged
//
// The read path's locks (reader, stream) are taken alone.
//
// go-fuse's own inode locks are taken inside go-fuse calls (GetChild,
// NewInode, Parent) and never while a network call is in flight.
package fusefs
