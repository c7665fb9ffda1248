package s3

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"sync"
	"time"
)

// Connections and their timeouts. A request has no total time limit: an
// upload that keeps moving bytes may take as long as it needs. Instead:
//
//   - connecting (TCP, then TLS) is bounded by Config.ConnectTimeout;
//   - while a request uses a connection, a read or write fails once no
//     byte has moved in either direction for Config.IdleTimeout (a black
//     hole, a stopped server, a partition that keeps connections open).
//     Bytes leaving the socket's send queue count as moving (the end of
//     a body on a slow link waits there, after the last Write returned);
//   - a connection waiting in the pool has no deadline.
//
// The transport reports through httptrace when a request takes a
// connection (GotConn) and when it returns it to the pool (PutIdleConn);
// idleConn arms its deadlines only between the two.

// idleConn is a net.Conn with the idle timeout described above. Safe for
// the concurrent use net/http makes of it (one reader, one writer, and the
// trace callbacks).
type idleConn struct {
	net.Conn
	base time.Duration // Config.IdleTimeout
	wait *serverWait   // nil: a silent request always fails (serverwait.go)

	mu      sync.Mutex
	idle    time.Duration // the current request's idle timeout; GUARDED_BY(mu)
	active  bool          // a request holds the connection; GUARDED_BY(mu)
	gen     uint64        // requests that took it so far; GUARDED_BY(mu)
	armedAt time.Time     // when the deadlines were last renewed; GUARDED_BY(mu)
	// queued is the send queue seen at the last deadline that passed (-1:
	// none since bytes last moved through Read or Write); GUARDED_BY(mu)
	queued int
	// written counts the bytes Write handed to the kernel; ackedSeen is
	// written minus the send queue at the last deadline check: the bytes
	// the peer had acknowledged then. GUARDED_BY(mu)
	written, ackedSeen int64
	// checkedAt and wasMoving: the last draining check, shared by the
	// reader and the writer whose deadlines pass together; GUARDED_BY(mu)
	checkedAt time.Time
	wasMoving bool
	// req is the request holding the connection, quietSince when a byte
	// last moved for it; waitCheckedAt, waitOK and waitLogged are
	// waitsOnServer's last check and whether it logged. GUARDED_BY(mu)
	req           reqInfo
	quietSince    time.Time
	waitCheckedAt time.Time
	waitOK        bool
	waitLogged    bool
}

// reqInfo names the request holding a connection, for the log.
type reqInfo struct {
	method, path string
	noWait       bool // never wait on the server (withoutServerWait)
}

func newIdleConn(c net.Conn, idle time.Duration, wait *serverWait) *idleConn {
	return &idleConn{Conn: c, base: idle, idle: idle, wait: wait, queued: -1}
}

// idleKey is the context key of a request's own idle timeout (withIdle).
type idleKey struct{}

// withIdle gives the requests made with ctx the idle timeout d instead of
// Config.IdleTimeout: for a request the server may answer only after long
// work that moves no byte (CompleteMultipartUpload of a large object).
func withIdle(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, idleKey{}, d)
}

// renew moves both deadlines to now+idle while a request holds the
// connection (skipped when renewed within the last idle/8, so a deadline
// is always at least 7/8 of idle away), and clears them otherwise.
func (c *idleConn) renew() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.active {
		if !c.armedAt.IsZero() {
			_ = c.Conn.SetDeadline(time.Time{})
			c.armedAt = time.Time{}
		}
		return
	}
	now := time.Now()
	if !c.armedAt.IsZero() && now.Sub(c.armedAt) < c.idle/8 {
		return
	}
	c.armedAt = now
	_ = c.Conn.SetDeadline(now.Add(c.idle))
}

// moved records n bytes moving through Read or Write (wrote: Write): the
// send queue observed at a passed deadline no longer matters.
func (c *idleConn) moved(n int, wrote bool) {
	c.mu.Lock()
	c.queued = -1
	c.quietSince = time.Now()
	if wrote {
		c.written += int64(n)
	}
	c.mu.Unlock()
	c.renew()
}

// activate marks the connection taken by the request req whose idle
// timeout is idle (0: Config.IdleTimeout) and returns the request's
// generation, for deactivate.
func (c *idleConn) activate(idle time.Duration, req reqInfo) uint64 {
	c.mu.Lock()
	c.idle = c.base
	if idle > 0 {
		c.idle = idle
	}
	c.req, c.quietSince = req, time.Now()
	c.waitCheckedAt, c.waitLogged = time.Time{}, false
	c.active = true
	c.gen++
	gen := c.gen
	c.armedAt = time.Time{}
	c.mu.Unlock()
	c.renew()
	return gen
}

// deactivate marks the connection idle in the pool, unless a later request
// (generation > gen) took it meanwhile.
func (c *idleConn) deactivate(gen uint64) {
	c.mu.Lock()
	if c.gen == gen {
		c.active = false
	}
	c.mu.Unlock()
	c.renew()
}

func (c *idleConn) isActive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.active
}

func (c *idleConn) Read(b []byte) (int, error) {
	for {
		c.renew()
		n, err := c.Conn.Read(b)
		if n > 0 {
			c.moved(n, false)
		}
		// A deadline that passed while the connection went back to the
		// pool (the transport reads ahead on idle connections), while
		// the end of a request body was still leaving the send buffer (a
		// slow link), or while the server answers other requests (this
		// one waits on the server): keep waiting.
		if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) && (!c.isActive() || c.draining() || c.waitsOnServer()) {
			continue
		}
		return n, err
	}
}

// draining reports whether bytes are still leaving the send buffer since
// the previous check: the queue is not empty and the peer acknowledged
// more bytes than at the previous check (the first check with a queue
// counts as moving; a queue that emptied since the previous check too, as
// it may have done so just now). If so, the deadlines are renewed. A black
// hole's queue stays still (or empty, when something in between swallows
// the bytes), so it fails after one to three idle timeouts.
func (c *idleConn) draining() bool {
	q, ok := unsent(c.Conn)
	c.mu.Lock()
	now := time.Now()
	if !c.checkedAt.IsZero() && now.Sub(c.checkedAt) < c.idle/8 {
		// The other side of the connection just checked this deadline.
		moving := c.wasMoving
		c.mu.Unlock()
		return moving
	}
	acked := c.written - int64(q)
	moving := ok && (q > 0 && acked > c.ackedSeen || q == 0 && c.queued > 0)
	if ok {
		c.queued, c.ackedSeen = q, acked
	}
	c.checkedAt, c.wasMoving = now, moving
	if moving {
		c.armedAt = time.Time{}
	}
	c.mu.Unlock()
	if moving {
		c.renew()
	}
	return moving
}

func (c *idleConn) Write(b []byte) (int, error) {
	total := 0
	for len(b) > 0 {
		c.renew()
		n, err := c.Conn.Write(b[:min(len(b), writeChunk)])
		total += n
		b = b[n:]
		if n > 0 {
			c.moved(n, true)
		}
		// A deadline that passed while bytes still moved (part of the
		// piece went out, or the send buffer drains), or while the
		// server, answering others, does not read this body yet: write
		// the rest.
		if err != nil && !(errors.Is(err, os.ErrDeadlineExceeded) && (n > 0 || c.draining() || c.waitsOnServer())) {
			return total, err
		}
	}
	return total, nil
}

// writeChunk is the largest piece written at once: a body handed over in
// one Write (a whole part) renews the deadlines, and counts as moving,
// piece by piece.
const writeChunk = 64 << 10

// asIdleConn finds the idleConn under c (a *tls.Conn wraps it).
func asIdleConn(c net.Conn) *idleConn {
	for c != nil {
		switch t := c.(type) {
		case *idleConn:
			return t
		case interface{ NetConn() net.Conn }:
			c = t.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// dialer returns a DialContext that bounds connecting by connect and wraps
// each connection in an idleConn (wait may be nil).
func dialer(connect, idle time.Duration, wait *serverWait) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return newIdleConn(c, idle, wait), nil
	}
}

// tracking is the RoundTripper in front of the transport: it tells each
// request's idleConn when the request takes it and when it goes back to the
// pool.
type tracking struct{ base http.RoundTripper }

func (t tracking) RoundTrip(req *http.Request) (*http.Response, error) {
	req, err := inMemoryBody(req)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var conn *idleConn
	var gen uint64
	idle, _ := req.Context().Value(idleKey{}).(time.Duration)
	ri := reqInfo{method: req.Method, path: req.URL.Path, noWait: req.Context().Value(noWaitKey{}) != nil}
	trace := &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if c := asIdleConn(info.Conn); c != nil {
				g := c.activate(idle, ri)
				mu.Lock()
				conn, gen = c, g
				mu.Unlock()
			}
		},
		PutIdleConn: func(err error) {
			mu.Lock()
			c, g := conn, gen
			mu.Unlock()
			if c != nil && err == nil {
				c.deactivate(g)
			}
		},
	}
	return t.base.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
}
