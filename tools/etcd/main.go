// Command etcd is the etcd server the tests of fencefs run against
// (fencefs run --etcd). It is a separate module so that the product's
// go.mod carries only the etcd client: the server module has replace
// directives that "go install module@version" refuses, so `make deps`
// builds it from here into bin/etcd.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
