package config

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func loadKubernetes(t *testing.T, inv invocation) (*Kubernetes, error) {
	t.Helper()
	fs, err := inv.flags(t, GroupKubernetes|GroupS3)
	if err != nil {
		return nil, err
	}
	return LoadKubernetes(Source{Flags: fs, SearchPaths: []string{}})
}

func TestKubernetesSettingsComeFromFlagEnvAndFile(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	def := 5 * time.Second
	for _, tc := range []struct {
		name string
		inv  invocation
		want Kubernetes
	}{
		{"defaults: no Kubernetes", invocation{}, Kubernetes{DialTimeout: def}},
		{"flag, no namespace", invocation{args: []string{"--kubernetes-lease", "leader"}}, Kubernetes{Name: "leader", DialTimeout: def}},
		{"flag with namespace and kubeconfig", invocation{args: []string{"--kubernetes-lease", "team-a/db.leader", "--kubeconfig", kc, "--kubernetes-context", "kind"}},
			Kubernetes{Namespace: "team-a", Name: "db.leader", Kubeconfig: kc, Context: "kind", DialTimeout: def}},
		{"env", invocation{env: []string{"FENCEFS_KUBERNETES_LEASE=ns/x", "FENCEFS_KUBERNETES_DIAL_TIMEOUT=2s"}}, Kubernetes{Namespace: "ns", Name: "x", DialTimeout: 2 * time.Second}},
		{"file, flag wins", invocation{file: "kubernetes:\n  lease: a/b\n", args: []string{"--kubernetes-lease", "c"}}, Kubernetes{Name: "c", DialTimeout: def}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadKubernetes(t, tc.inv)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(*got) != fmt.Sprint(tc.want) || got.Enabled() != (tc.want.Name != "") {
				t.Errorf("LoadKubernetes = %+v; want %+v", *got, tc.want)
			}
		})
	}
}

func TestKubernetesSettingErrorsAreOneLineNamingTheKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		inv  invocation
		want string
	}{
		{"upper-case name", invocation{args: []string{"--kubernetes-lease", "Leader"}}, `kubernetes.lease (--kubernetes-lease): "Leader": "Leader" is not a Lease name`},
		{"bad namespace", invocation{args: []string{"--kubernetes-lease", "Team/leader"}}, `namespace "Team" is not a Kubernetes namespace`},
		{"two slashes", invocation{args: []string{"--kubernetes-lease", "a/b/c"}}, `"b/c" is not a Lease name`},
		{"empty name", invocation{args: []string{"--kubernetes-lease", "ns/"}}, `"" is not a Lease name`},
		{"missing kubeconfig", invocation{args: []string{"--kubeconfig", "/nonexistent/kc"}}, "kubernetes.kubeconfig (--kubeconfig): cannot read /nonexistent/kc: no such file or directory"},
		{"bad dial timeout", invocation{args: []string{"--kubernetes-dial-timeout", "0s"}}, `kubernetes.dial_timeout (--kubernetes-dial-timeout): "0s" is not a positive duration`},
		{"misspelt variable", invocation{env: []string{"FENCEFS_KUBERNETES_LEASES=x"}}, "FENCEFS_KUBERNETES_LEASES: unknown environment variable (accepted: FENCEFS_KUBERNETES_LEASE"},
		{"unknown key in the file", invocation{file: "kubernetes:\n  token: x\n"}, "kubernetes.token: unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadKubernetes(t, tc.inv)
			wantSecretFreeKeyErr(t, err, tc.want)
		})
	}
}
