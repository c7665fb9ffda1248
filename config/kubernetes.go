package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// GroupKubernetes is the Kubernetes connection of `fencefs run
// --kubernetes-lease`. It is not in GroupAll: a mount has no use for it.
const GroupKubernetes Group = 1 << 18

// kubeSettings are the keys kubernetes.*, appended to the table at init so
// that the config file accepts them and `fencefs run` registers their
// flags. The credentials are never settings: they come from the kubeconfig
// or the pod's service account.
var kubeSettings = []Setting{
	{Key: "kubernetes.lease", Flag: "kubernetes-lease", Env: []string{"FENCEFS_KUBERNETES_LEASE"}, Group: GroupKubernetes,
		Usage: "elect the leader by the Kubernetes Lease [NAMESPACE/]NAME (coordination.k8s.io/v1) instead of the S3 lease; the token is its resourceVersion (namespace: the kubeconfig context's, or the pod's)"},
	{Key: "kubernetes.kubeconfig", Flag: "kubeconfig", Env: []string{"FENCEFS_KUBERNETES_KUBECONFIG"}, Group: GroupKubernetes,
		Usage: "kubeconfig file for --kubernetes-lease (default: $KUBECONFIG, ~/.kube/config, else the pod's in-cluster config)"},
	{Key: "kubernetes.context", Flag: "kubernetes-context", Env: []string{"FENCEFS_KUBERNETES_CONTEXT"}, Group: GroupKubernetes,
		Usage: "kubeconfig context for --kubernetes-lease (default: its current context)"},
	{Key: "kubernetes.dial_timeout", Flag: "kubernetes-dial-timeout", Env: []string{"FENCEFS_KUBERNETES_DIAL_TIMEOUT"}, Default: "5s", Group: GroupKubernetes, kind: kindDuration,
		Usage: "how long to try to reach the Kubernetes API server at start before giving up"},
}

func init() { settings = append(settings, kubeSettings...) }

// Kubernetes is the Kubernetes connection of `fencefs run
// --kubernetes-lease` (keys kubernetes.*).
type Kubernetes struct {
	// Namespace and Name of the Lease; Name empty means: not elected by
	// Kubernetes. Namespace empty means the kubeconfig context's (or the
	// pod's) namespace.
	Namespace, Name string
	Kubeconfig      string // absolute path, "" = client-go's default rules
	Context         string
	DialTimeout     time.Duration
}

// Enabled reports whether a Lease is configured.
func (k *Kubernetes) Enabled() bool { return k.Name != "" }

// LoadKubernetes reads the kubernetes.* settings with the same precedence
// as Load and validates them. Errors are *Error values naming the key and
// where it was set.
func LoadKubernetes(src Source) (*Kubernetes, error) {
	l := newLoader(src)
	if err := l.read(checkEnvPrefix("FENCEFS_KUBERNETES_", kubeSettings), kubeSettings); err != nil {
		return nil, err
	}
	k, err := l.buildKubernetes()
	if err != nil {
		return nil, l.withOrigin(err)
	}
	return k, nil
}

// buildKubernetes reads and checks the kubernetes.* values.
func (l *loader) buildKubernetes() (*Kubernetes, error) {
	str := func(key string) string { return strings.TrimSpace(l.v.GetString(key)) }
	k := &Kubernetes{Context: str("kubernetes.context")}
	if raw := str("kubernetes.lease"); raw != "" {
		ns, name, ok := strings.Cut(raw, "/")
		if !ok {
			ns, name = "", raw
		}
		if ok {
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				return nil, keyErr("kubernetes.lease", "%q: namespace %q is not a Kubernetes namespace: %s (accepted: [NAMESPACE/]NAME)", raw, ns, errs[0])
			}
		}
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return nil, keyErr("kubernetes.lease", "%q: %q is not a Lease name: %s (accepted: [NAMESPACE/]NAME)", raw, name, errs[0])
		}
		if len(name) > 128 {
			return nil, keyErr("kubernetes.lease", "%q: the Lease name is longer than fencefs's 128 characters", raw)
		}
		k.Namespace, k.Name = ns, name
	}
	raw := str("kubernetes.dial_timeout")
	d, err := time.ParseDuration(raw)
	if err != nil || d <= 0 {
		return nil, keyErr("kubernetes.dial_timeout", "%q is not a positive duration (accepted: such as 5s)", raw)
	}
	k.DialTimeout = d
	if f := str("kubernetes.kubeconfig"); f != "" {
		abs, err := filepath.Abs(f)
		if err != nil {
			return nil, keyErr("kubernetes.kubeconfig", "%v", err)
		}
		if _, err := os.Stat(abs); err != nil {
			return nil, keyErr("kubernetes.kubeconfig", "cannot read %s: %v", abs, errors.Unwrap(err))
		}
		k.Kubeconfig = abs
	}
	return k, nil
}
