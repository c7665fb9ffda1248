package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// flags isolates the test's environment, sets inv's, writes inv's config
// file and parses inv's flags (those of groups, and --config).
func (inv invocation) flags(t *testing.T, groups Group) (*pflag.FlagSet, error) {
	t.Helper()
	isolate(t)
	for _, kv := range inv.env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.String(FlagConfig, "", "")
	RegisterFlags(fs, groups)
	args := inv.args
	if inv.file != "" {
		p := filepath.Join(t.TempDir(), "fencefs.yaml")
		if err := os.WriteFile(p, []byte(inv.file), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"--config", p}, args...)
	}
	return fs, fs.Parse(args)
}

func loadEtcd(t *testing.T, inv invocation) (*Etcd, error) {
	t.Helper()
	fs, err := inv.flags(t, GroupEtcd|GroupS3)
	if err != nil {
		return nil, err
	}
	return LoadEtcd(Source{Flags: fs, SearchPaths: []string{}})
}

func TestEtcdSettingsComeFromFlagEnvAndFile(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		inv  invocation
		want Etcd
	}{
		{"defaults: no etcd", invocation{}, Etcd{DialTimeout: 5 * time.Second, Prefix: DefaultEtcdPrefix}},
		{"flag", invocation{args: []string{"--etcd", "http://127.0.0.1:2379, http://127.0.0.1:2381/", "--etcd-prefix", "/x"}},
			Etcd{Endpoints: []string{"http://127.0.0.1:2379", "http://127.0.0.1:2381"}, DialTimeout: 5 * time.Second, Prefix: "/x/"}},
		{"env", invocation{env: []string{"FENCEFS_ETCD_ENDPOINTS=https://e:2379", "FENCEFS_ETCD_USERNAME=u", "FENCEFS_ETCD_PASSWORD=pw", "FENCEFS_ETCD_DIAL_TIMEOUT=2s"}},
			Etcd{Endpoints: []string{"https://e:2379"}, Username: "u", Password: "pw", DialTimeout: 2 * time.Second, Prefix: DefaultEtcdPrefix}},
		{"file, flag wins", invocation{file: "etcd:\n  endpoints: http://a:1\n  username: u\n  password_file: " + pwFile + "\n", args: []string{"--etcd", "http://b:2"}},
			Etcd{Endpoints: []string{"http://b:2"}, Username: "u", Password: "s3cret", DialTimeout: 5 * time.Second, Prefix: DefaultEtcdPrefix}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadEtcd(t, tc.inv)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(*got) != fmt.Sprint(tc.want) || got.Password.Reveal() != tc.want.Password.Reveal() || got.Enabled() != (len(tc.want.Endpoints) > 0) {
				t.Errorf("LoadEtcd = %+v; want %+v", *got, tc.want)
			}
		})
	}
}

func TestEtcdSettingErrorsAreOneLineNamingTheKey(t *testing.T) {
	dir := t.TempDir()
	cert := filepath.Join(dir, "cert.pem")
	empty := filepath.Join(dir, "empty")
	for _, p := range []string{cert, empty} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		inv  invocation
		want string
	}{
		{"endpoint without scheme", invocation{args: []string{"--etcd", "127.0.0.1:2379"}}, "etcd.endpoints (--etcd): \"127.0.0.1:2379\" is not an etcd endpoint"},
		{"endpoint with user info", invocation{args: []string{"--etcd", "http://u:hunter2@h:1"}}, "is not an etcd endpoint"},
		{"bad dial timeout", invocation{args: []string{"--etcd-dial-timeout", "0s"}}, "etcd.dial_timeout (--etcd-dial-timeout): \"0s\" is not a positive duration"},
		{"missing CA file", invocation{args: []string{"--etcd-ca-file", dir + "/nope"}}, "etcd.ca_file (--etcd-ca-file): cannot read"},
		{"cert without key", invocation{args: []string{"--etcd-cert-file", cert}}, "etcd.key_file: missing while etcd.cert_file is set"},
		{"user without password", invocation{args: []string{"--etcd-username", "u"}}, "etcd.password: missing for etcd user \"u\""},
		{"password without user", invocation{env: []string{"FENCEFS_ETCD_PASSWORD=hunter2"}}, "etcd.username: missing"},
		{"two password sources", invocation{env: []string{"FENCEFS_ETCD_PASSWORD=hunter2", "FENCEFS_ETCD_USERNAME=u"}, args: []string{"--etcd-password-file", cert}}, "set together with etcd.password_file"},
		{"empty password file", invocation{env: []string{"FENCEFS_ETCD_USERNAME=u"}, args: []string{"--etcd-password-file", empty}}, "is empty"},
		{"misspelt variable", invocation{env: []string{"FENCEFS_ETCD_ENDPOINT=http://h:1"}}, "FENCEFS_ETCD_ENDPOINT: unknown environment variable (accepted: FENCEFS_ETCD_ENDPOINTS"},
		{"unknown key in the file", invocation{file: "etcd:\n  endpoint: http://h:1\n"}, "etcd.endpoint: unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadEtcd(t, tc.inv)
			wantSecretFreeKeyErr(t, err, tc.want)
		})
	}
}

// wantSecretFreeKeyErr checks that err is an *Error of one line
// containing want, without the password hunter2.
func wantSecretFreeKeyErr(t *testing.T, err error, want string) {
	t.Helper()
	var ke *Error
	if err == nil || !errors.As(err, &ke) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v; want an *Error containing %q", err, want)
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || strings.Contains(msg, "hunter2") {
		t.Errorf("error %q is not one line, or shows the password", msg)
	}
}
