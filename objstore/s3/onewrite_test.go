package s3

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// countingConn counts the Writes the HTTP transport makes.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// opaque hides the reader's type, as minio-go's wrappers do.
type opaque struct{ io.Reader }

// TestSmallRequestLeavesInOneWrite: with the store's transport, a PUT whose
// body is up to oneWriteBody bytes — in a reader net/http cannot tell is in
// memory — goes out with its headers in one write, so a process stopped
// while sending it cannot leave the server waiting for the body; a larger
// body streams after the headers.
func TestSmallRequestLeavesInOneWrite(t *testing.T) {
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got.Store(n)
	}))
	t.Cleanup(srv.Close)
	tr, err := transport(Config{ConnectTimeout: time.Second, IdleTimeout: 5 * time.Second}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: &writes}, nil
	}
	client := &http.Client{Transport: tracking{base: tr}}
	for _, tc := range []struct {
		name     string
		size     int
		oneWrite bool
	}{
		{"a small body", 1 << 10, true},
		{"the largest body sent at once", oneWriteBody, true},
		{"a larger body", oneWriteBody + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := bytes.Repeat([]byte("x"), tc.size)
			req, err := http.NewRequest(http.MethodPut, srv.URL+"/k", opaque{bytes.NewReader(body)})
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = int64(tc.size)
			req.Header.Set("X-Amz-Meta-Mode", "33188")
			writes.Store(0)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got.Load() != int64(tc.size) {
				t.Fatalf("the server read %d body bytes, want %d", got.Load(), tc.size)
			}
			if n := writes.Load(); (n == 1) != tc.oneWrite {
				t.Errorf("%d-byte body sent in %d writes; one write: want %v", tc.size, n, tc.oneWrite)
			}
		})
	}
}
