package objstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A key's lock while a body arrives.
//
// MinIO takes an object's namespace lock before it reads a conditional
// PUT's body and holds it until the body has arrived: a writer stopped in
// the middle of the body (an old leader frozen in a commit) stalls every
// request on that key — the new leader's bind and overwrite included —
// until the server's read timeout (30 s) drops it. It takes no lock on the
// key while it receives the parts of a multipart upload, and a Complete's
// body is small. The probe's CheckLockFreeBody row finds out, in about a
// second, whether the store does this; where it does, the store's users
// keep every request body that runs under the key's lock within what
// leaves the client in one write (Sizing.PlainLimit): larger commits go as
// multipart uploads.

// CheckLockFreeBody: while a conditional PUT's body is still arriving, a
// HEAD of its key is answered (the server holds no lock on the key for
// the body's duration). Optional: where it fails, commits whose request
// would not leave in one write go as multipart uploads (Sizing.PlainLimit),
// which costs two requests more per such commit.
const CheckLockFreeBody Capability = "lock-free-body"

// BodyStaller is implemented by stores whose requests carry their bodies
// over a network (objstore/s3): the probe's CheckLockFreeBody row uses it.
// A store without it (memstore) takes every body whole, so there is
// nothing a stalled body could hold, and the row passes.
type BodyStaller interface {
	// StallPut sends a PUT of key with If-None-Match:* whose headers
	// reach the server and whose body then stops. It returns once the
	// headers are sent; stop ends the request (closing its connection)
	// and waits for it: the body never completes, nothing is stored.
	StallPut(ctx context.Context, key string) (stop func(), err error)
}

const (
	// bodyLockSettle is how long the check lets the server take in the
	// stalled PUT's headers (and take its lock) before it asks.
	bodyLockSettle = 250 * time.Millisecond
	// bodyLockWait is how long a HEAD of the stalled key may take before
	// the check counts the key as locked: far above a HEAD's time on a
	// server that answers, far below MinIO's 30 s read timeout.
	bodyLockWait = time.Second
)

func (p *prober) lockFreeBody(ctx context.Context) (string, error) {
	bs, ok := p.s.(BodyStaller)
	if !ok {
		return "", nil
	}
	stop, err := bs.StallPut(ctx, p.dir+"stalled")
	if err != nil {
		return "", err
	}
	defer stop()
	select {
	case <-time.After(bodyLockSettle):
	case <-ctx.Done():
		return "", ctx.Err()
	}
	hctx, cancel := context.WithTimeout(ctx, bodyLockWait)
	defer cancel()
	_, err = p.s.Stat(hctx, p.dir+"stalled")
	switch {
	case err == nil || errors.Is(err, ErrNotFound):
		return "", nil
	case hctx.Err() != nil && ctx.Err() == nil:
		return fmt.Sprintf("a HEAD of a key got no answer within %v while a conditional PUT's body to it was stopped: "+
			"the store holds the key's lock while a body arrives (commits that do not leave in one write go as multipart uploads)", bodyLockWait), nil
	}
	return "", err
}
