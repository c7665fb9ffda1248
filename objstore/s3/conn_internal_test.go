package s3

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
)

// slowPeer listens on loopback with a small receive buffer (so that what
// the peer has not read stays in the sender's queue, as on a slow link) and
// hands each accepted connection to serve.
func slowPeer(t *testing.T, serve func(c net.Conn)) string {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 32<<10)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// dialIdle dials addr and returns the connection as an active idleConn.
func dialIdle(t *testing.T, addr string, idle time.Duration) *idleConn {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := newIdleConn(raw, idle, nil)
	t.Cleanup(func() { c.Close() })
	c.activate(0, reqInfo{})
	return c
}

// TestIdleConnCountsADrainingSendQueueAsMoving checks the idle timeout on
// a real TCP connection: a body that the peer reads slowly (the sender's
// queue drains for many idle timeouts after the last Write returned) is not
// cut, while a peer that stops reading, or reads everything and never
// answers, fails the request after a few idle timeouts.
func TestIdleConnCountsADrainingSendQueueAsMoving(t *testing.T) {
	if runtime.GOOS != "linux" {
		gateway.SkipOrFail(t, "the send queue is read with SIOCOUTQ (Linux only)")
	}
	const idle = 300 * time.Millisecond
	const size = 1 << 20
	body := bytes.Repeat([]byte("x"), size)
	for _, tc := range []struct {
		name  string
		serve func(c net.Conn)
		ok    bool
	}{
		{"slow reader, then an answer", func(c net.Conn) {
			buf := make([]byte, 16<<10)
			for n := 0; n < size; {
				m, err := c.Read(buf)
				if err != nil {
					return
				}
				n += m
				time.Sleep(40 * time.Millisecond) // ~400 KiB/s: ~2.5 s, ~8 idle timeouts
			}
			_, _ = c.Write([]byte("ok"))
		}, true},
		{"reader that stops", func(c net.Conn) {
			_, _ = c.Read(make([]byte, 16<<10))
			time.Sleep(time.Minute)
		}, false},
		{"reads all, never answers", func(c net.Conn) {
			_, _ = io.CopyN(io.Discard, c, size)
			time.Sleep(time.Minute)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialIdle(t, slowPeer(t, tc.serve), idle)
			start := time.Now()
			err := func() error {
				if _, err := c.Write(body); err != nil {
					return err
				}
				got := make([]byte, 2)
				_, err := io.ReadFull(c, got)
				if err == nil && string(got) != "ok" {
					return errors.New("wrong answer " + string(got))
				}
				return err
			}()
			took := time.Since(start)
			if tc.ok {
				if err != nil {
					t.Fatalf("after %v: %v", took, err)
				}
				if took < 3*idle {
					t.Fatalf("took %v: the peer did not read slowly enough to test anything (setup)", took)
				}
				return
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("after %v: %v, want the idle timeout", took, err)
			}
			if took > 20*idle {
				t.Errorf("failed after %v, want a few idle timeouts (%v)", took, idle)
			}
		})
	}
}

// TestIdleConnWaitsInThePoolWithoutADeadline checks that a connection back
// in the pool keeps waiting (the transport reads ahead on it) however long
// it stays there, and gets its deadline back when a request takes it.
func TestIdleConnWaitsInThePoolWithoutADeadline(t *testing.T) {
	const idle = 100 * time.Millisecond
	answer := make(chan struct{})
	addr := slowPeer(t, func(c net.Conn) {
		<-answer
		_, _ = c.Write([]byte("a"))
		time.Sleep(time.Minute)
	})
	c := dialIdle(t, addr, idle)
	c.deactivate(1) // back in the pool
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	select {
	case err := <-read:
		t.Fatalf("a read on a pooled connection ended: %v", err)
	case <-time.After(10 * idle):
	}
	close(answer)
	if err := <-read; err != nil {
		t.Fatalf("read after waiting in the pool: %v", err)
	}
	c.activate(0, reqInfo{})
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read by a request with nothing coming: %v, want the idle timeout", err)
	}
}

// TestARequestsOwnIdleTimeoutOutlastsASilentServer checks withIdle: a
// server that works silently for longer than Config.IdleTimeout before it
// answers (a CompleteMultipartUpload assembling a large object) fails a
// request with the connection's idle timeout, and not one given a longer
// one of its own; the next request has the connection's again.
func TestARequestsOwnIdleTimeoutOutlastsASilentServer(t *testing.T) {
	const idle = 100 * time.Millisecond
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(4 * idle) // silent work
		_, _ = w.Write([]byte("done"))
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	client := &http.Client{Transport: tracking{base: &http.Transport{DialContext: dialer(time.Second, idle, nil)}}}
	get := func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ln.Addr().String()+"/", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return err
	}
	cases := []struct {
		name    string
		ctx     context.Context
		timeout bool
	}{
		{"the connection's idle timeout", context.Background(), true},
		{"the request's own, longer one", withIdle(context.Background(), 20*idle), false},
		{"the connection's again", context.Background(), true},
	}
	for _, tc := range cases {
		err := get(tc.ctx)
		if got := err != nil && errors.Is(err, os.ErrDeadlineExceeded); got != tc.timeout {
			t.Errorf("%s: err = %v, want a timeout: %v", tc.name, err, tc.timeout)
		}
	}
}
