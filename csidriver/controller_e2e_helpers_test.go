package csidriver_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// newNodeOn is newNode with the S3 server of kind.
func newNodeOn(t *testing.T, kind gateway.Kind) *node {
	t.Helper()
	harness.RequireFUSE(t)
	return newNodeWith(t, gateway.ForKind(t, kind))
}

// controller is one running `fencefs csi --controller` and a client of it.
type controller struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{}
	sock string
	csi.ControllerClient
	csi.IdentityClient
}

// startController starts `fencefs csi --controller` for n's S3 server, its
// socket beside the driver's, and waits until it answers; it is stopped in
// t.Cleanup. Its environment holds no credential: every request's secret
// gives them.
func (n *node) startController(t *testing.T) *controller {
	t.Helper()
	c := &controller{log: &syncBuffer{}, done: make(chan struct{}), sock: filepath.Join(filepath.Dir(n.sock), "controller.sock")}
	c.cmd = exec.Command(n.bin, "csi", "--controller", "--endpoint", "unix://"+c.sock,
		"--s3-endpoint", n.gw.Endpoint, "--s3-region", n.gw.Region, "--log-level", "debug")
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	c.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(20 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
			t.Errorf("fencefs csi --controller did not stop on SIGTERM; log: %s", c.log)
		}
	})
	conn, err := grpc.NewClient("unix://"+c.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c.ControllerClient, c.IdentityClient = csi.NewControllerClient(conn), csi.NewIdentityClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, err := c.Probe(ctx, &csi.ProbeRequest{})
		if err == nil {
			return c
		}
		select {
		case <-c.done:
			t.Fatalf("fencefs csi --controller exited: %s", c.log)
		case <-ctx.Done():
			t.Fatalf("fencefs csi --controller does not answer: %v; log: %s", err, c.log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
