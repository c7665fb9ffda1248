package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/objstore/s3"
)

// The same behaviours as the memstore tests, against the real S3 server in
// real time. Every assertion is an invariant (who holds, which token); the
// TTL leaves a renewal 2.3 s for its conditional PUT, so that a server
// stalled by a loaded machine delays the tests rather than failing them.

const gwTTL = 5 * time.Second

func gatewayEnv(t *testing.T) env {
	t.Helper()
	gw := gateway.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := s3.New(ctx, s3.Config{
		Endpoint:  gw.Endpoint,
		Bucket:    gateway.NewBucket(t, gw),
		Region:    gw.Region,
		AccessKey: gw.AccessKey,
		SecretKey: gw.SecretKey,
		PathStyle: true,
	})
	if err != nil {
		t.Fatalf("s3.New: %v", err)
	}
	return env{store: st, ttl: gwTTL, wait: 2 * time.Minute}
}

func TestGatewaySecondContenderWaitsForRelease(t *testing.T) {
	testSecondContenderWaitsForRelease(t, gatewayEnv(t))
}

func TestGatewayCutOffHolderIsTakenOverAndFenced(t *testing.T) {
	testCutOffHolderIsTakenOverAndFenced(t, gatewayEnv(t))
}

func TestGatewayOneHolderAtATime(t *testing.T) {
	testOneHolderAtATime(t, gatewayEnv(t), 3, 3)
}
