package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencefs/fencefs/config"
)

// The Kubernetes path of `fencefs run` end to end is in
// integration/kube_test.go; these are its command-line checks.

func TestRunKubernetesRefusesBadSettingsAsUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"upper-case name", []string{"--kubernetes-lease", "Leader"}, `kubernetes.lease (--kubernetes-lease): "Leader": "Leader" is not a Lease name`},
		{"fractional ttl", []string{"--kubernetes-lease", "l", "--ttl", "2500ms"}, "a Kubernetes Lease lasts whole seconds, at least 2"},
		{"ttl of a second", []string{"--kubernetes-lease", "l", "--ttl", "1s"}, "a Kubernetes Lease lasts whole seconds, at least 2"},
		{"another lease name", []string{"--kubernetes-lease", "ns/other"}, "--lease l and --kubernetes-lease other name different leases"},
		{"etcd too", []string{"--kubernetes-lease", "l", "--etcd", "http://127.0.0.1:2379"}, "are both set: a fence domain takes its tokens from one source"},
		{"kubeconfig missing", []string{"--kubernetes-lease", "l", "--kubeconfig", filepath.Join(dir, "none")}, "kubernetes.kubeconfig (--kubeconfig): cannot read"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantRunUsageError(t, append(append([]string{"--lease", "l", "--mount", dir}, tt.args...), "--", "true"), tt.want)
		})
	}
}

// No kubeconfig anywhere and no pod around: one line that says where it
// looked.
func TestKubernetesWithoutAClusterSaysWhereItLooked(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	_, _, err := kubeRestConfig(&config.Kubernetes{Name: "leader"})
	if err == nil || !strings.Contains(err.Error(), "no Kubernetes cluster for --kubernetes-lease: not in a pod") || strings.Contains(err.Error(), "\n") {
		t.Errorf("kubeRestConfig = %v; want one line saying no cluster was found", err)
	}
}

// The namespace: the flag's, else the kubeconfig context's.
func TestKubernetesNamespaceIsTheFlagsElseTheContexts(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	body := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: team}}]
current-context: x
`
	if err := os.WriteFile(kc, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ flagNS, want string }{{"", "team"}, {"other", "other"}} {
		rc, ns, err := kubeRestConfig(&config.Kubernetes{Name: "leader", Namespace: tc.flagNS, Kubeconfig: kc})
		if err != nil || ns != tc.want || rc.Host != "https://127.0.0.1:1" {
			t.Errorf("namespace flag %q: %v, %q; want %q", tc.flagNS, err, ns, tc.want)
		}
	}
}
