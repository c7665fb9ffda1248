package s3

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/fencefs/fencefs/objstore"
)

// The probe's stalled PUT, and what a store that needs it does with the
// answer (objstore/bodylock.go says why).

var _ objstore.BodyStaller = (*Store)(nil)

// stallBody is the declared size of StallPut's body, and stallSent what of
// it is handed to the transport (it stays in the transport's write buffer:
// the server sees the headers only).
const (
	stallBody = 1 << 20
	stallSent = 4 << 10
)

// errStallStopped ends a stalled PUT's body.
var errStallStopped = errors.New("stalled probe PUT stopped")

// StallPut implements objstore.BodyStaller: a signed PUT of key with
// If-None-Match:* and a 1 MiB body of which nothing reaches the server.
// It returns once the transport has flushed the headers (it asks for body
// bytes only after that). It bypasses the retries and the breaker: it is
// one attempt, ended by stop.
func (s *Store) StallPut(ctx context.Context, key string) (stop func(), err error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, err
	}
	body := make([]byte, stallBody)
	sum := sha256.Sum256(body)
	pr, pw := io.Pipe()
	rctx, cancel := context.WithCancel(ctx)
	req, err := s.signedRequest(rctx, http.MethodPut, key, nil, http.Header{"If-None-Match": {"*"}}, pr, stallBody, hex.EncodeToString(sum[:]))
	if err != nil {
		cancel()
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		resp, err := s.http.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("%w: s3 put %s/%s: the server answered %s before the body arrived", objstore.ErrUnavailable, s.cfg.Bucket, key, resp.Status)
		}
		pr.CloseWithError(err)
		done <- err
	}()
	stop = func() {
		cancel()
		pw.CloseWithError(errStallStopped)
		<-done
	}
	if _, err := pw.Write(body[:stallSent]); err != nil {
		stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, s.classify(err, "put", key)
	}
	return stop, nil
}

// LimitPlainToOneWrite makes every plain PUT the store's users choose fit
// in one write of the request (objstore.Sizing.PlainLimit): the probe
// found that the server holds a key's lock while a body arrives
// (objstore.CheckLockFreeBody failed). A body of up to the limit leaves
// with its headers in one write(2) (onewrite.go), which a stopped process
// cannot split; a larger ShapeAuto upload becomes a multipart upload,
// whose parts hold no lock on the key. Call it before the store's first
// write and before anyone reads its Sizing (the fencing Guard reads it
// once, to predict ETags): it is not safe concurrently with other calls.
func (s *Store) LimitPlainToOneWrite() {
	s.sizing.PlainLimit = oneWriteBody
	s.sizing = s.sizing.Normalize()
}
