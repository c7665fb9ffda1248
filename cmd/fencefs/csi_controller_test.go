package main

import (
	"errors"
	"strings"
	"testing"
)

func TestCSIControllerRefusesNodeFlagsAndAMissingEndpoint(t *testing.T) {
	shared := csiShared{logLevel: "info", logFormat: "text"}
	for _, tc := range []struct {
		o    csiOptions
		want string
	}{
		{csiOptions{csiShared: shared, controller: true}, "--s3-endpoint is required with --controller"},
		{csiOptions{csiShared: shared, controller: true, nodeID: "n", s3: csiS3{endpoint: "http://s3"}}, "--node-id and --mounter-socket are the node driver's"},
		{csiOptions{csiShared: shared, controller: true, mounter: "/m.sock", s3: csiS3{endpoint: "http://s3"}}, "--node-id and --mounter-socket are the node driver's"},
		{csiOptions{csiShared: shared, controller: true, s3: csiS3{endpoint: "http://s3"}, endpoint: "tcp://127.0.0.1:1"}, "is not a unix socket"},
		{csiOptions{csiShared: shared, nodeID: "n", s3: csiS3{endpoint: "http://s3"}}, "are the controller's (--controller)"},
	} {
		err := runCSI(tc.o)
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want a usage error with %q", tc.o, err, tc.want)
		}
	}
}
