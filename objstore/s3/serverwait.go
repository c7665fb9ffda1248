package s3

import (
	"context"
	"log/slog"
	"time"
)

// A request that waits on the server is not a black hole.
//
// The idle timeout (conn.go) fails a request once no byte has moved for
// Config.IdleTimeout: a black hole, a stopped server. But a server may keep
// a request silent on purpose: MinIO holds an object's lock while a
// conditional PUT's body arrives, so when the writer of that PUT is frozen
// mid-body (an old leader stopped in the middle of a commit — the moment
// fencing exists for), every other request on that key waits until MinIO's
// own read timeout (30 s) releases the lock. Cutting such a request after
// the idle timeout turns the new leader's bind or overwrite into EIO (and
// a cut request counts as the storage being down, which opens the breaker).
//
// So when a request's connection has been silent for the idle timeout, the
// store asks the server something else — the breaker's probe, a HEAD of the
// bucket on another connection, bounded by Config.ProbeTimeout. If the
// server answers, the request keeps waiting (logged once, with what it
// waits for), until it has been silent for Config.ServerWait; if the
// server does not answer, the request fails as before.
type serverWait struct {
	max   time.Duration // Config.ServerWait
	quick time.Duration // Config.ProbeTimeout
	log   *slog.Logger
	// probe is the breaker's probe (nil: the server answered); set once by
	// newStore before any request.
	probe func(ctx context.Context) error
}

// noWaitKey marks the context of a request that must never outlast its idle
// timeout this way (the probe itself).
type noWaitKey struct{}

func withoutServerWait(ctx context.Context) context.Context {
	return context.WithValue(ctx, noWaitKey{}, true)
}

// answers reports whether the server answers a probe within w.quick.
func (w *serverWait) answers() bool {
	ctx, cancel := context.WithTimeout(context.Background(), w.quick)
	defer cancel()
	return w.probe(withoutServerWait(ctx)) == nil
}

// waitsOnServer reports whether the request holding c, silent for an idle
// timeout, should keep waiting: it may wait (not the probe's own request),
// it has been silent for less than the server wait, and the server answers
// other requests. Then the deadlines are renewed. The answer is shared by
// the reader and the writer whose deadlines pass together.
func (c *idleConn) waitsOnServer() bool {
	c.mu.Lock()
	w, req, quiet, logged := c.wait, c.req, c.quietSince, c.waitLogged
	if w == nil || w.probe == nil || req.noWait || time.Since(quiet) >= w.max {
		c.mu.Unlock()
		return false
	}
	if !c.waitCheckedAt.IsZero() && time.Since(c.waitCheckedAt) < c.idle/8 {
		ok := c.waitOK
		c.mu.Unlock()
		return ok
	}
	c.mu.Unlock()
	ok := w.answers()
	c.mu.Lock()
	c.waitCheckedAt, c.waitOK = time.Now(), ok
	if ok {
		c.armedAt = time.Time{}
		c.waitLogged = true
	}
	c.mu.Unlock()
	if !ok {
		return false
	}
	if !logged {
		w.log.Warn("s3: a request gets no answer, but the storage answers others: waiting for it "+
			"(a lock on the key held by another client's stalled request?)",
			"request", req.method+" "+req.path, "silent_for", time.Since(quiet).Round(time.Millisecond), "wait_up_to", w.max)
	}
	c.renew()
	return true
}
