package s3_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http/httptrace"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/objstore"
)

// TestSequentialRequestsReuseOneConnection checks that the store keeps
// connections alive (a new TCP connection per request costs a third
// of a small PUT on the gateway): sequential PUTs (also refused ones),
// HEADs, full GETs and DELETEs all run on the first connection.
func TestSequentialRequestsReuseOneConnection(t *testing.T) {
	s := newStore(t, config(t, keepAliveGateway(t)))
	var fresh, reused atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if i.Reused {
			reused.Add(1)
		} else {
			fresh.Add(1)
		}
	}})
	body := []byte("small body")
	for i := range 20 {
		k := fmt.Sprintf("c%02d", i)
		create := objstore.PutOptions{Cond: objstore.Condition{IfNoneMatch: true}}
		if _, err := s.Put(ctx, k, bytes.NewReader(body), int64(len(body)), create); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(ctx, k, bytes.NewReader(body), int64(len(body)), create); err == nil {
			t.Fatal("a second create succeeded")
		}
		if _, err := s.Stat(ctx, k); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Stat(ctx, k+"-missing"); err == nil {
			t.Fatal("stat of a missing key succeeded")
		}
		rc, _, err := s.Get(ctx, k, objstore.GetOptions{Offset: 2, Length: 3})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(rc); err != nil {
			t.Fatal(err)
		}
		rc.Close()
		if err := s.Delete(ctx, k, objstore.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	if f, r := fresh.Load(), reused.Load(); f != 1 || r < 119 {
		t.Fatalf("%d new connections and %d reused for 120 sequential requests; want 1 new", f, r)
	}
}

// keepAliveGateway starts a gateway that keeps connections alive, as real
// S3 servers do (ForTest's gateway closes every connection, see
// gateway.Options.KeepAlive), stopped in t.Cleanup.
func keepAliveGateway(t *testing.T) *gateway.Gateway {
	t.Helper()
	bin, err := gateway.FindBinary()
	if err != nil {
		gateway.SkipOrFail(t, "%v", err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	gw, err := gateway.Start(sctx, gateway.Options{Bin: bin, Dir: t.TempDir(), KeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Stop() })
	return gw
}
