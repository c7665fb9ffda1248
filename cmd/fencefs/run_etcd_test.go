package main

import (
	"testing"
	"time"

	"github.com/fencefs/fencefs/config"
)

// The etcd path of `fencefs run` end to end is in integration/etcd_test.go;
// these are its command-line checks.

func TestRunEtcdRefusesBadSettingsAsUsageErrors(t *testing.T) {
	t.Setenv("FENCEFS_ETCD_PASSWORD", "")
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"endpoint without scheme", []string{"--etcd", "127.0.0.1:2379"}, "etcd.endpoints (--etcd): \"127.0.0.1:2379\" is not an etcd endpoint"},
		{"fractional ttl", []string{"--etcd", "http://127.0.0.1:2379", "--ttl", "2500ms"}, "etcd leases last whole seconds"},
		{"ttl below a second", []string{"--etcd", "http://127.0.0.1:2379", "--ttl", "500ms"}, "etcd leases last whole seconds"},
		{"user without password", []string{"--etcd", "http://127.0.0.1:2379", "--etcd-username", "u"}, "etcd.password: missing"},
		{"password is no flag", []string{"--etcd", "http://127.0.0.1:2379", "--etcd-password", "x"}, "unknown flag: --etcd-password"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantRunUsageError(t, append(append([]string{"--lease", "l", "--mount", dir}, tt.args...), "--", "true"), tt.want)
		})
	}
}

func TestEtcdClientConfigUsesTLSOnlyWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ec      config.Etcd
		wantTLS bool
	}{
		{"http", config.Etcd{Endpoints: []string{"http://127.0.0.1:2379"}}, false},
		{"https", config.Etcd{Endpoints: []string{"https://127.0.0.1:2379"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.ec.DialTimeout, tc.ec.Username, tc.ec.Password = time.Second, "u", "pw"
			cc, err := etcdClientConfig(&tc.ec)
			if err != nil {
				t.Fatal(err)
			}
			if (cc.TLS != nil) != tc.wantTLS || cc.Password != "pw" || cc.Username != "u" || cc.DialTimeout != time.Second {
				t.Errorf("client config %+v; want TLS %v, the credentials and the dial timeout", cc, tc.wantTLS)
			}
		})
	}
}
