package main

import "testing"

// The ZooKeeper path of `fencefs run` end to end is in
// integration/zk_test.go; these are its command-line checks.

func TestRunZooKeeperRefusesBadSettingsAsUsageErrors(t *testing.T) {
	t.Setenv("FENCEFS_ZOOKEEPER_PASSWORD", "")
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"server without port", []string{"--zookeeper", "zk1"}, `zookeeper.servers (--zookeeper): "zk1" is not a ZooKeeper server`},
		{"relative prefix", []string{"--zookeeper", "zk1:2181", "--zookeeper-prefix", "fencefs"}, "it must start with /"},
		{"user without password", []string{"--zookeeper", "zk1:2181", "--zookeeper-username", "u"}, "zookeeper.password: missing"},
		{"password is no flag", []string{"--zookeeper", "zk1:2181", "--zookeeper-password", "x"}, "unknown flag: --zookeeper-password"},
		{"etcd too", []string{"--zookeeper", "zk1:2181", "--etcd", "http://127.0.0.1:2379"}, "are both set: a fence domain takes its tokens from one source"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantRunUsageError(t, append(append([]string{"--lease", "l", "--mount", dir}, tt.args...), "--", "true"), tt.want)
		})
	}
}
