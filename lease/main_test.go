package lease_test

import (
	"os"
	"testing"

	"github.com/fencefs/fencefs/integration/zkserver"
)

func TestMain(m *testing.M) {
	code := m.Run()
	zkserver.StopShared() // the ZooKeeper the election tests share
	os.Exit(code)
}
