// Command kube-apiserver is the Kubernetes API server the tests of fencefs run
// against (fencefs run --kubernetes-lease). It is a separate module so that the
// product's go.mod carries only client-go: k8s.io/kubernetes requires its
// staging modules at v0.0.0 and resolves them with replace directives, which
// "go install module@version" refuses, so `make deps` builds it from here into
// bin/kube-apiserver. The replace lines in go.mod pin those staging modules to
// the release that matches k8s.io/kubernetes.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
