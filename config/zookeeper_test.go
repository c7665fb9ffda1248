package config

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func loadZooKeeper(t *testing.T, inv invocation) (*ZooKeeper, error) {
	t.Helper()
	fs, err := inv.flags(t, GroupZooKeeper|GroupS3)
	if err != nil {
		return nil, err
	}
	return LoadZooKeeper(Source{Flags: fs, SearchPaths: []string{}})
}

func TestZooKeeperSettingsComeFromFlagEnvAndFile(t *testing.T) {
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	def := 5 * time.Second
	for _, tc := range []struct {
		name string
		inv  invocation
		want ZooKeeper
	}{
		{"defaults: no ZooKeeper", invocation{}, ZooKeeper{DialTimeout: def, Prefix: DefaultZooKeeperPrefix}},
		{"flag", invocation{args: []string{"--zookeeper", "zk1:2181, zk2:2182", "--zookeeper-prefix", "/kafka/fencefs/"}},
			ZooKeeper{Servers: []string{"zk1:2181", "zk2:2182"}, DialTimeout: def, Prefix: "/kafka/fencefs"}},
		{"env", invocation{env: []string{"FENCEFS_ZOOKEEPER_SERVERS=[::1]:2181", "FENCEFS_ZOOKEEPER_USERNAME=u", "FENCEFS_ZOOKEEPER_PASSWORD=pw", "FENCEFS_ZOOKEEPER_DIAL_TIMEOUT=2s"}},
			ZooKeeper{Servers: []string{"[::1]:2181"}, Username: "u", Password: "pw", DialTimeout: 2 * time.Second, Prefix: DefaultZooKeeperPrefix}},
		{"file, flag wins", invocation{file: "zookeeper:\n  servers: a:1\n  username: u\n  password_file: " + pwFile + "\n", args: []string{"--zookeeper", "b:2"}},
			ZooKeeper{Servers: []string{"b:2"}, Username: "u", Password: "s3cret", DialTimeout: def, Prefix: DefaultZooKeeperPrefix}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadZooKeeper(t, tc.inv)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(*got) != fmt.Sprint(tc.want) || got.Password.Reveal() != tc.want.Password.Reveal() || got.Enabled() != (len(tc.want.Servers) > 0) {
				t.Errorf("LoadZooKeeper = %+v; want %+v", *got, tc.want)
			}
		})
	}
}

func TestZooKeeperSettingErrorsAreOneLineNamingTheKey(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		inv  invocation
		want string
	}{
		{"server without port", invocation{args: []string{"--zookeeper", "zk1"}}, `zookeeper.servers (--zookeeper): "zk1" is not a ZooKeeper server (accepted: HOST:PORT`},
		{"server as a URL", invocation{args: []string{"--zookeeper", "http://zk1:2181"}}, `names a chroot`},
		{"port out of range", invocation{args: []string{"--zookeeper", "zk1:70000"}}, `"zk1:70000" is not a ZooKeeper server`},
		{"chroot in the connect string", invocation{args: []string{"--zookeeper", "zk1:2181,zk2:2181/kafka"}}, "names a chroot (/kafka): give the path as zookeeper.prefix instead (--zookeeper zk1:2181,zk2:2181 --zookeeper-prefix /kafka/fencefs/elections)"},
		{"relative prefix", invocation{args: []string{"--zookeeper-prefix", "fencefs"}}, `zookeeper.prefix (--zookeeper-prefix): "fencefs" is not a usable znode path: it must start with /`},
		{"root prefix", invocation{args: []string{"--zookeeper-prefix", "/"}}, "the root itself"},
		{"empty component", invocation{args: []string{"--zookeeper-prefix", "/a//b"}}, "empty component"},
		{"dot component", invocation{args: []string{"--zookeeper-prefix", "/a/../b"}}, "relative component"},
		{"ZooKeeper's own tree", invocation{args: []string{"--zookeeper-prefix", "/zookeeper/x"}}, "/zookeeper is ZooKeeper's own"},
		{"control character", invocation{env: []string{"FENCEFS_ZOOKEEPER_PREFIX=/a\x01b"}}, "a character ZooKeeper refuses"},
		{"bad dial timeout", invocation{args: []string{"--zookeeper-dial-timeout", "-1s"}}, "zookeeper.dial_timeout (--zookeeper-dial-timeout): \"-1s\" is not a positive duration"},
		{"user without password", invocation{args: []string{"--zookeeper-username", "u"}}, "zookeeper.password: missing for ZooKeeper user \"u\" (set FENCEFS_ZOOKEEPER_PASSWORD, or zookeeper.password_file / --zookeeper-password-file"},
		{"password without user", invocation{env: []string{"FENCEFS_ZOOKEEPER_PASSWORD=hunter2"}}, "zookeeper.username: missing while a ZooKeeper password is set"},
		{"user with a colon", invocation{env: []string{"FENCEFS_ZOOKEEPER_PASSWORD=hunter2", "FENCEFS_ZOOKEEPER_USERNAME=a:b"}}, "holds a colon"},
		{"empty password file", invocation{env: []string{"FENCEFS_ZOOKEEPER_USERNAME=u"}, args: []string{"--zookeeper-password-file", empty}}, "is empty"},
		{"misspelt variable", invocation{env: []string{"FENCEFS_ZOOKEEPER_SERVER=h:1"}}, "FENCEFS_ZOOKEEPER_SERVER: unknown environment variable (accepted: FENCEFS_ZOOKEEPER_SERVERS"},
		{"unknown key in the file", invocation{file: "zookeeper:\n  server: h:1\n"}, "zookeeper.server: unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadZooKeeper(t, tc.inv)
			wantSecretFreeKeyErr(t, err, tc.want)
		})
	}
}
