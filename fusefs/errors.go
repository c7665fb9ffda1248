package fusefs

import "errors"

// Local sentinels for outcomes that only the filesystem layer knows about.
// They are wrapped with context (which key, why) and become errnos in toErrno
// (errno.go).
var (
	// errExist: the name is taken (a create found an object, O_EXCL, mkdir
	// over an existing key, RENAME_NOREPLACE onto an existing name).
	errExist = errors.New("file exists")
	// errNotEmpty: rmdir or a directory rename onto a non-empty directory.
	errNotEmpty = errors.New("directory not empty")
	// errNotDir / errIsDir: a rename between a file and a directory.
	errNotDir = errors.New("not a directory")
	errIsDir  = errors.New("is a directory")
	// errCrossDevice: a directory rename that is larger than
	// Options.MaxDirRename (or refused). EXDEV makes mv(1) fall back to
	// copy and delete, which works file by file.
	errCrossDevice = errors.New("directory rename too large; refused")
	// errNotSupported: an operation fencefs does not implement (hard links,
	// exchanging renames, xattrs outside the user namespace).
	errNotSupported = errors.New("operation not supported")
	// errInvalid: a malformed request (bad control value, bad flags).
	errInvalid = errors.New("invalid argument")
	// errPerm: a read-only control attribute or the reserved user.fencefs.
	// namespace.
	errPerm = errors.New("operation not permitted")
	// errNoAttr: the extended attribute does not exist.
	errNoAttr = errors.New("no such attribute")
	// errTooBig: an xattr that would not fit in the object's metadata.
	errTooBig = errors.New("attribute too large for object metadata")
	// errNameTooLong: a name or key beyond what S3 or the kernel accept.
	errNameTooLong = errors.New("name too long")
)

// errNotSequential: an access to a range of a file uploaded while written
// that has left the local disk (the rules in file_content_upload.go). ESPIPE.
var errNotSequential = errors.New("illegal seek: this part of the file was uploaded and released from the staging file while it is written front to back; it can be read once the file is closed, and written only by rewriting the file from its start")

// errStopList stops a List early.
var errStopList = errors.New("stop listing")

// errUploadLost: the streamed upload of a file whose early parts have left
// the local disk cannot be published. EIO unless the cause says otherwise.
// errHalfDone: an operation of two mutations whose first landed and whose
// second was refused (a rename's copy and its source's delete): EIO, not
// the refusal's errno, which would tell the application nothing changed.
var errHalfDone = errors.New("done in part")

var errUploadLost = errors.New("the file's streamed upload cannot be published and its early parts are no longer on local disk")
