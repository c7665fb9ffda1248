package s3

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
)

// A small request leaves in one write(2).
//
// MinIO takes an object's namespace lock before it reads a conditional
// PUT's body, and holds it while the body arrives; every other request on
// that key waits. A writer stopped between sending the headers and the body
// (SIGSTOP, a VM pause, a GC pause of the whole process) therefore stalls
// the key until the server's read times out (30 s on MinIO) — the new
// leader's takeover of that key included. net/http sends the headers in a
// write of their own whenever it cannot tell that the body is in memory
// (minio-go wraps every body in a reader of its own), so the window is real
// for every commit. Here a body of up to oneWriteBody bytes is handed to
// net/http in memory, and the transport's write buffer (oneWriteBuffer)
// holds headers and body together: the request is one write(2), which a
// stopped process cannot split — the kernel sends what it was given.
// Larger bodies stream under their condition: on a server that holds the
// key's lock for them, the mount sends none but in the rare cases
// objstore.Sizing.PlainLimit allows (bodylock.go: such commits go as
// multipart uploads), and a request held up behind one is not cut while
// the server answers others (serverwait.go). Over TLS a request is
// written in records of up to 16 KiB each.
const (
	// oneWriteBuffer is the transport's write buffer: the largest request
	// written at once. It equals writeChunk, so idleConn passes it on in
	// one piece.
	oneWriteBuffer = writeChunk
	// oneWriteBody leaves room for the headers (S3 allows 2 KiB of user
	// metadata; signature, condition and the rest fit in the remainder).
	oneWriteBody = oneWriteBuffer - 8<<10
)

// inMemoryBody returns req with a body of at most oneWriteBody bytes read
// into memory (a reader net/http recognizes, so it writes headers and body
// together), or req itself when there is no such body. It closes the
// original body when it replaces it.
func inMemoryBody(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength <= 0 || req.ContentLength > oneWriteBody {
		return req, nil
	}
	buf := make([]byte, req.ContentLength)
	n, err := io.ReadFull(req.Body, buf)
	req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("read a %d-byte request body: %d bytes: %w", req.ContentLength, n, err)
	}
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(buf))
	return r, nil
}
