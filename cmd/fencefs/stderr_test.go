package main

// The one-line promise of docs/CLI.md, checked on the real binary: at the
// default log level a command prints exactly one line on stderr when it
// fails and nothing on stderr when it succeeds (its answer goes to stdout).

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencefs/fencefs/integration/gateway"
)

func TestCommandsAgainstADeadEndpointPrintOnlyTheErrorLine(t *testing.T) {
	port, err := gateway.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("http://127.0.0.1:%d", port)
	env := []string{"AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=secret-of-nobody", "AWS_REGION=us-east-1", "AWS_ENDPOINT_URL_S3=" + dead}
	tmp := t.TempDir()
	tests := []struct {
		prefix string
		args   []string
	}{
		{"fencefs: epoch show: ", []string{"epoch", "show", "some-bucket"}},
		{"fencefs: epoch raise: ", []string{"epoch", "raise", "some-bucket", "5"}},
		{"fencefs: epoch raise: ", []string{"epoch", "raise", "some-bucket", "auto"}},
		{"fencefs: probe: ", []string{"probe", "some-bucket"}},
		{"fencefs: gc: ", []string{"gc", "some-bucket"}},
		// In the foreground stderr is the mount's log (at info), and a
		// mount that cannot start has logged nothing yet.
		{"fencefs: mount: ", []string{"mount", "--foreground", "some-bucket", tmp, "--cache-dir", filepath.Join(tmp, ".cache")}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args[:2], " "), func(t *testing.T) {
			r := runBin(t, env, tt.args...)
			oneErrorLine(t, r, tt.prefix, "cannot reach "+dead)
			if r.code != exitFailure {
				t.Errorf("exit status %d, want %d", r.code, exitFailure)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
		})
	}
}

func TestAdminCommandsThatSucceedPrintNothingOnStderr(t *testing.T) {
	gateway.ForEachServer(t, gateway.AllServers, testAdminCommandsPrintNothingOnStderr)
}

func testAdminCommandsPrintNothingOnStderr(t *testing.T, gw *gateway.Gateway) {
	bucket := gateway.NewBucket(t, gw)
	// In order: raise binds and sweeps a fresh register, then raises over
	// it; each raise used to end with a WARN of its cancelled tombstone
	// reaper ("context canceled"), so there are several.
	steps := []struct {
		args []string
		want string // on stdout
	}{
		{[]string{"epoch", "show", bucket}, "no token has ever been bound"},
		{[]string{"epoch", "raise", bucket, "1"}, "epoch raised to 1"},
		{[]string{"epoch", "raise", bucket, "auto"}, "epoch raised to 2"},
		{[]string{"epoch", "raise", bucket, "auto", "--holder", "script"}, "epoch raised to 3"},
		{[]string{"epoch", "raise", bucket, "7"}, "epoch raised to 7"},
		{[]string{"epoch", "show", bucket, "--json"}, `"epoch": 7`},
		{[]string{"probe", bucket}, "strict mode: possible"},
		{[]string{"gc", bucket, "--dry-run"}, "would remove"},
		{[]string{"gc", bucket}, "removed"},
	}
	for _, s := range steps {
		r := runBin(t, gw.Env(), s.args...)
		if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, s.want) {
			t.Errorf("%s: status %d, stderr %q (want none), stdout %q (want %q)", strings.Join(s.args, " "), r.code, r.stderr, r.stdout, s.want)
		}
	}
}
