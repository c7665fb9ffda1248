package main

// The command line itself: misspelt commands, completion, --version. These
// run the binary but need no server.

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/fencefs/fencefs/integration/gateway"
)

func TestUnknownCommandsAreUsageErrorsWithASuggestion(t *testing.T) {
	mnt := t.TempDir()
	tests := []struct {
		args   []string
		prefix string
		want   []string
	}{
		{[]string{"stauts", mnt}, "fencefs: ", []string{`unknown command "stauts"`, `did you mean "status"?`, "fencefs mount stauts MOUNTPOINT"}},
		{[]string{"mout", "bucket", mnt}, "fencefs: ", []string{`unknown command "mout"`, `did you mean "mount"?`}},
		{[]string{"xyzzy"}, "fencefs: ", []string{`unknown command "xyzzy"`, "accepted: completion, csi, epoch, gc, mount, probe, run, status, version"}},
		{[]string{"epoch", "frob"}, "fencefs: epoch: ", []string{`unknown command "frob" for "fencefs epoch"`, "accepted: raise, show"}},
		{[]string{"epoch", "shwo", "bucket"}, "fencefs: epoch: ", []string{`did you mean "show"?`}},
		{[]string{"completion", "nushell"}, "fencefs: completion: ", []string{`unknown command "nushell"`, "accepted: bash, fish, powershell, zsh"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := runBin(t, nil, tt.args...)
			oneErrorLine(t, r, tt.prefix, tt.want...)
			if r.code != exitUsage {
				t.Errorf("exit status %d, want %d", r.code, exitUsage)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing (no help text on an error)", r.stdout)
			}
		})
	}
}

// TestHelperFormWithOptionsMountsABucketNamedLikeATypo: mount(8) always
// passes -o, so "fencefs stauts MNT -o …" is a mount of bucket "stauts".
func TestHelperFormWithOptionsMountsABucketNamedLikeATypo(t *testing.T) {
	port, err := gateway.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("http://127.0.0.1:%d", port)
	r := runBin(t, []string{"AWS_REGION=us-east-1"}, "stauts", t.TempDir(), "-o", "endpoint="+dead+",cache_dir="+t.TempDir())
	oneErrorLine(t, r, "fencefs: mount: ", "cannot reach "+dead)
}

func TestCompletionPrintsAScriptForEachShell(t *testing.T) {
	tests := []struct{ shell, want string }{
		{"bash", "__start_fencefs"},
		{"zsh", "#compdef fencefs"},
		{"fish", "complete -c fencefs"},
	}
	for _, tt := range tests {
		t.Run(tt.shell, func(t *testing.T) {
			r := runBin(t, nil, "completion", tt.shell)
			if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, tt.want) {
				t.Fatalf("completion %s: status %d, stderr %q, stdout lacks %q:\n%.300s", tt.shell, r.code, r.stderr, tt.want, r.stdout)
			}
		})
	}
}

func TestVersionFlagPrintsWhatTheVersionCommandPrints(t *testing.T) {
	cmd, flag := runBin(t, nil, "version"), runBin(t, nil, "--version")
	if cmd.code != 0 || flag.code != 0 || cmd.stdout != flag.stdout || flag.stderr != "" {
		t.Fatalf("version: %d %q %q; --version: %d %q %q", cmd.code, cmd.stdout, cmd.stderr, flag.code, flag.stdout, flag.stderr)
	}
	if !strings.HasPrefix(flag.stdout, "fencefs ") || !strings.Contains(flag.stdout, "(commit ") {
		t.Errorf("--version = %q, want the release and the commit", flag.stdout)
	}
}

func TestVersionNamesTheReleaseAndTheCommit(t *testing.T) {
	rev := "573f17c026a7f423d7d039642d372fc03dc1b1eb"
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	tests := []struct {
		name    string
		version string
		bi      *debug.BuildInfo
		want    string
	}{
		{"clean tree", "dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings("vcs.revision", rev, "vcs.modified", "false")}, "fencefs dev (commit 573f17c026a7)"},
		{"dirty tree", "dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings("vcs.revision", rev, "vcs.modified", "true")}, "fencefs dev (commit 573f17c026a7, modified)"},
		{"release set at link time", "v1.2.0", &debug.BuildInfo{Settings: settings("vcs.revision", rev, "vcs.modified", "false")}, "fencefs v1.2.0 (commit 573f17c026a7)"},
		{"go install MODULE@VERSION", "dev", &debug.BuildInfo{Main: debug.Module{Version: "v1.3.1"}}, "fencefs v1.3.1 (commit unknown)"},
		{"no VCS information", "dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "fencefs dev (commit unknown)"},
		{"no build information", "dev", nil, "fencefs dev (commit unknown)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
			if got := describeBuild(tt.version, tt.bi); got != want {
				t.Errorf("describeBuild = %q, want %q", got, want)
			}
		})
	}
}

func TestMountHelpListsTheEssentialFlagsFirstTypedAndWrapped(t *testing.T) {
	r := runBin(t, nil, "mount", "--help")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("mount --help: status %d, stderr %q", r.code, r.stderr)
	}
	help := r.stdout
	// In this order: the examples, then the essential flags, then the groups.
	order := []string{"Examples:", "fencefs mount logs /srv/logs", "Essential flags:", "--endpoint string", "--token string", "-f, --foreground", "--config string",
		"Fencing flags:", "S3 flags:", "Mount flags:", "Logging and metrics flags:"}
	at := 0
	for _, w := range order {
		i := strings.Index(help[at:], w)
		if i < 0 {
			t.Fatalf("mount --help lacks %q after offset %d (or it comes earlier):\n%s", w, at, help)
		}
		at += i + len(w)
	}
	for _, typed := range []string{"--attr-ttl duration", "--s3-timeout duration", "--s3-concurrency number", "--uid id", "--file-mode mode", "--cache-dir path"} {
		if !strings.Contains(help, typed) {
			t.Errorf("mount --help does not show %q", typed)
		}
	}
	for _, l := range strings.Split(help, "\n") {
		if len(l) > 100 {
			t.Errorf("a help line of %d characters: %q", len(l), l)
		}
	}
}

func TestManWritesAPageForEveryCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "man1")
	r := runBin(t, nil, "man", dir)
	if r.code != 0 || r.stderr != "" || r.stdout != "" {
		t.Fatalf("man: status %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	pages := map[string]string{ // page: what it must say
		"fencefs.1":             "fencefs - Mount an S3 bucket with fenced writers",
		"fencefs-mount.1":       `\fB--token\fP`,
		"fencefs-epoch-raise.1": `\fB--holder\fP`,
		"fencefs-gc.1":          `\fB--dry-run\fP`,
		"fencefs-run.1":         `\fB--lease\fP`,
		"fencefs-status.1":      `\fB--json\fP`,
		"fencefs-probe.1":       "fencefs probe",
		"fencefs-epoch-show.1":  "fencefs epoch show",
		"fencefs-completion.1":  "fencefs completion",
		"fencefs-version.1":     "fencefs version",
	}
	for page, want := range pages {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Errorf("no page %s: %v", page, err)
			continue
		}
		if !strings.Contains(string(b), ".SH NAME") || !strings.Contains(string(b), want) {
			t.Errorf("%s lacks .SH NAME or %q:\n%.400s", page, want, b)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "fencefs-man.1")); err == nil {
		t.Errorf("the hidden man command has a page of its own")
	}
	bad := runBin(t, nil, "man", "/proc/self/no-such-dir/man1")
	oneErrorLine(t, bad, "fencefs: man: ", "cannot create /proc/self/no-such-dir/man1")
}
