package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// A ZooKeeper session as the election sees it: one session (ephemeral
// znodes live exactly as long), which ends when the server expires it or
// when no server has answered for the session timeout. The client library
// only learns of an expiry when it reaches a server again; a leader cut
// off from every server must stop on its own, so the session counts as
// ended once the connection has been down for the timeout (as Curator's
// "session lost" does). The election itself is in zk.go.

// zkSession is one ZooKeeper session. Create with dialZooKeeper; end with
// close. Safe for concurrent use.
type zkSession struct {
	conn      *zk.Conn
	servers   string // "host:port,…", for messages
	requested time.Duration
	log       *slog.Logger
	connSet   chan struct{} // closed once conn is set
	up        chan struct{} // closed at the first session established
	ended     chan struct{} // closed when the session ended (endErr says why)
	done      chan struct{} // closed when the event loop has exited

	mu        sync.Mutex
	timeout   time.Duration // GUARDED_BY(mu): negotiated with the server (requested until known)
	sessionID int64         // GUARDED_BY(mu): the session's id, 0 before it is established
	downSince time.Time     // GUARDED_BY(mu): when the connection went down; zero while up
	downTimer *time.Timer   // GUARDED_BY(mu): ends the session timeout after downSince
	lastFail  string        // GUARDED_BY(mu): the last connection failure, for messages
	closing   bool          // GUARDED_BY(mu): close was called
	met       *metrics      // GUARDED_BY(mu): counts losses and returns of the connection once elected
	endErr    error         // GUARDED_BY(mu): why the session ended
}

// Formats of the client library's log lines that tell what its API does
// not expose: the session timeout the server granted, and why a server
// could not be reached. Pinned with the library's version.
const (
	zkLogAuthenticated = "authenticated: id=%d, timeout=%d"
	zkLogConnectFailed = "failed to connect to %s: %v"
)

// dialZooKeeper connects to servers and waits, up to dial, for a session
// with the requested timeout; digest ("user:password", or "") is then
// added as the session's credentials. Errors name the servers and say why
// none gave a session.
func dialZooKeeper(ctx context.Context, servers []string, timeout, dial time.Duration, digest string, log *slog.Logger) (*zkSession, error) {
	s := &zkSession{
		servers: strings.Join(servers, ","), requested: timeout, timeout: timeout, log: log,
		connSet: make(chan struct{}), up: make(chan struct{}), ended: make(chan struct{}), done: make(chan struct{}),
	}
	// The callback sees every state change in order (the event channel
	// drops events when full); it only takes s.mu.
	conn, events, err := zk.Connect(servers, timeout, zk.WithLogger(zkLogger{s}), zk.WithLogInfo(true), zk.WithEventCallback(s.onEvent))
	if err != nil {
		return nil, fmt.Errorf("ZooKeeper servers %q: %v", s.servers, err)
	}
	s.conn = conn
	close(s.connSet)
	go func() {
		defer close(s.done)
		for range events { // closed when the client has stopped
		}
	}()
	t := time.NewTimer(dial)
	defer t.Stop()
	select {
	case <-s.up:
	case <-s.ended:
		s.close()
		return nil, s.err()
	case <-ctx.Done():
		s.close()
		return nil, ctx.Err()
	case <-t.C:
		s.mu.Lock()
		why := s.lastFail
		s.mu.Unlock()
		s.close()
		if why == "" {
			why = "no session was established: is it a ZooKeeper client port?"
		}
		return nil, fmt.Errorf("cannot reach ZooKeeper at %s within %v (zookeeper.dial_timeout): %s", s.servers, dial, why)
	}
	if got := s.sessionTimeout(); got != timeout {
		log.Warn("ZooKeeper granted another session timeout than asked (its minSessionTimeout and maxSessionTimeout bound it)", "asked", timeout, "granted", got)
	}
	if digest != "" {
		if _, err := zkCall(ctx, func() (struct{}, error) { return struct{}{}, conn.AddAuth("digest", []byte(digest)) }); err != nil {
			s.close()
			return nil, fmt.Errorf("ZooKeeper at %s refused the digest credentials: %v", s.servers, err)
		}
	}
	return s, nil
}

// onEvent follows the connection's state.
func (s *zkSession) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	<-s.connSet // zk.Connect has returned (at once: it does not wait for a server)
	switch ev.State {
	case zk.StateHasSession:
		s.established()
	case zk.StateDisconnected, zk.StateConnecting:
		s.wentDown()
	case zk.StateExpired:
		s.end(fmt.Errorf("the ZooKeeper session expired (the servers heard nothing from this process for the session timeout %v)", s.sessionTimeout()))
	case zk.StateAuthFailed:
		s.end(fmt.Errorf("ZooKeeper at %s refused the credentials", s.servers))
	}
}

// established records a session established, or re-established after the
// connection went down; a session of another id means ours ended.
func (s *zkSession) established() {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.conn.SessionID()
	switch {
	case s.sessionID == 0:
		s.sessionID = id
		close(s.up)
	case s.sessionID != id:
		s.endLocked(fmt.Errorf("the ZooKeeper session 0x%x ended (the client reconnected with a new one)", s.sessionID))
		return
	}
	if !s.downSince.IsZero() {
		s.log.Info("reconnected to ZooKeeper", "server", s.conn.Server(), "down", time.Since(s.downSince).Round(time.Millisecond))
		s.met.renewal("ok")
		s.met.wrote()
	}
	s.downSince = time.Time{}
	if s.downTimer != nil {
		s.downTimer.Stop()
		s.downTimer = nil
	}
}

// wentDown starts counting the session timeout from the moment the
// connection of an established session went down.
func (s *zkSession) wentDown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessionID == 0 || !s.downSince.IsZero() || s.endErr != nil || s.closing {
		return
	}
	since, timeout := time.Now(), s.timeout
	s.downSince = since
	s.met.renewal("error")
	s.log.Warn("lost the connection to ZooKeeper; reconnecting", "session_timeout", timeout)
	s.downTimer = time.AfterFunc(timeout, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.downSince.Equal(since) {
			s.endLocked(fmt.Errorf("no ZooKeeper server answered for the session timeout %v (%s)", timeout, s.lastFailLocked()))
		}
	})
}

func (s *zkSession) lastFailLocked() string {
	if s.lastFail == "" {
		return "the connection was lost"
	}
	return "last: " + s.lastFail
}

func (s *zkSession) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endLocked(err)
}

// endLocked ends the session with err (the first reason wins).
// LOCKS_REQUIRED(s.mu)
func (s *zkSession) endLocked(err error) {
	if s.endErr != nil {
		return
	}
	s.endErr = err
	if s.downTimer != nil {
		s.downTimer.Stop()
	}
	close(s.ended)
}

// err returns why the session ended (nil while it lasts).
func (s *zkSession) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endErr
}

// alive reports whether the session may still exist by this process's
// reckoning: not ended, and not down for the session timeout.
func (s *zkSession) alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endErr == nil && (s.downSince.IsZero() || time.Since(s.downSince) < s.timeout)
}

// count makes the session count in met each loss of its connection
// (renewals_total{outcome="error"}) and each return within the session
// (outcome="ok").
func (s *zkSession) count(met *metrics) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.met = met
}

// connected reports whether the session's connection is up.
func (s *zkSession) connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endErr == nil && s.downSince.IsZero()
}

// sessionTimeout returns the timeout the server granted.
func (s *zkSession) sessionTimeout() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.timeout
}

// close closes the session (the server deletes its ephemeral znodes at
// once) and waits a moment for the client to finish: a client stuck on a
// server that does not answer (not ZooKeeper, or frozen) finishes on its
// own later.
func (s *zkSession) close() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.conn.Close()
	select {
	case <-s.done:
	case <-time.After(time.Second):
	}
	s.end(errors.New("the ZooKeeper session was closed"))
}

// zkCall runs op, a blocking call of the client, until it returns or ctx
// is done (the call then finishes in the background).
func zkCall[T any](ctx context.Context, op func() (T, error)) (T, error) {
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() {
		v, err := op()
		ch <- res{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// zkTransient reports whether err is a failure of the connection, after
// which the same session may answer again (through another server).
func zkTransient(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrSessionMoved)
}

// zkRetry runs op, an idempotent call of the client, as zkCall does, and
// again after a transient failure for as long as the session lasts.
func zkRetry[T any](ctx context.Context, s *zkSession, op func() (T, error)) (T, error) {
	for {
		v, err := zkCall(ctx, op)
		if !zkTransient(err) || !s.alive() {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-s.ended:
			return v, err
		case <-time.After(s.sessionTimeout() / 20):
		}
	}
}

// zkLogger passes the client library's log lines to the session's logger
// at debug level, and reads from them the granted session timeout and the
// connection failures.
type zkLogger struct{ s *zkSession }

func (l zkLogger) Printf(format string, args ...any) {
	s := l.s
	switch {
	case format == zkLogAuthenticated && len(args) == 2:
		if ms, ok := args[1].(int32); ok && ms > 0 {
			s.mu.Lock()
			s.timeout = time.Duration(ms) * time.Millisecond
			s.mu.Unlock()
		}
	case format == zkLogConnectFailed && len(args) == 2:
		s.mu.Lock()
		s.lastFail = fmt.Sprintf("%v: %v", args[0], unwrapOp(args[1]))
		s.mu.Unlock()
	}
	s.log.Debug("zookeeper client: " + fmt.Sprintf(format, args...))
}

// unwrapOp drops the "dial tcp ADDR:" wrapping of a dial error.
func unwrapOp(v any) any {
	err, ok := v.(error)
	if !ok {
		return v
	}
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err
		}
		err = u
	}
}
