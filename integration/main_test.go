// Package integration holds fencefs's end-to-end tests: the real fencefs
// binary, real FUSE mounts and a real S3 server (the Versity gateway), driven
// by plain syscalls and checked with a plain S3 client.
package integration

import (
	"os"
	"testing"

	"github.com/fencefs/fencefs/integration/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }
