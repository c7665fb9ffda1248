package main

import (
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The behaviour of `fencefs run` with real mounts is tested end to end in
// integration/lease_test.go; these are its pure parts.

func TestRunRefusesBadCommandLinesAsUsageErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no command", []string{"--lease", "l", "--mount", dir}, "requires at least 1 arg"},
		{"no lease", []string{"--mount", dir, "--", "true"}, "--lease NAME is required"},
		{"no mount", []string{"--lease", "l", "--", "true"}, "--mount MOUNTPOINT is required"},
		{"bad lease name", []string{"--lease", "a/b", "--mount", dir, "--", "true"}, "invalid lease name"},
		{"tiny ttl", []string{"--lease", "l", "--mount", dir, "--ttl", "1ms", "--", "true"}, "below the minimum"},
		{"negative grace", []string{"--lease", "l", "--mount", dir, "--grace", "-1s", "--", "true"}, "negative"},
		{"mountpoint missing", []string{"--lease", "l", "--mount", dir + "/nope", "--", "true"}, "no such file"},
		{"not a fencefs mount", []string{"--lease", "l", "--mount", dir, "--", "true"}, "is not a fencefs mount"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantRunUsageError(t, tt.args, tt.want) })
	}
}

// wantRunUsageError runs `fencefs run ARGS` and checks that it fails with
// a usage error (exit 2) containing want.
func wantRunUsageError(t *testing.T, args []string, want string) {
	t.Helper()
	cmd := newRunCmd()
	cmd.SetArgs(args)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v; want one containing %q", err, want)
	}
	var ue usageError
	if !errors.As(err, &ue) && !isFlagError(err) {
		t.Errorf("err = %v is not a usage error (exit 2)", err)
	}
}

func TestRunStopsParsingFlagsAtTheCommand(t *testing.T) {
	cmd := newRunCmd()
	if err := cmd.ParseFlags([]string{"--lease", "l", "--mount", "/m", "ls", "--ttl", "-l"}); err != nil {
		t.Fatalf("parse: %v", err)
	}
	if got := cmd.Flags().Args(); strings.Join(got, " ") != "ls --ttl -l" {
		t.Errorf("command args = %q; want the command's own flags left alone", got)
	}
	if ttl, _ := cmd.Flags().GetDuration("ttl"); ttl.String() != "15s" {
		t.Errorf("--ttl after the command was taken as run's: %v", ttl)
	}
}

func TestExitStatusOfTheCommand(t *testing.T) {
	tests := []struct {
		name     string
		script   string
		wantCode int
		wantHow  string
	}{
		{"success", "exit 0", 0, "exited with status 0"},
		{"failure status", "exit 3", 3, "exited with status 3"},
		{"killed by a signal", "kill -TERM $$", 128 + int(syscall.SIGTERM), "was stopped by SIGTERM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := exec.Command("/bin/sh", "-c", tt.script)
			err := c.Run()
			code, how := exitStatus(c.ProcessState, err)
			if code != tt.wantCode || how != tt.wantHow {
				t.Errorf("exitStatus = %d, %q; want %d, %q", code, how, tt.wantCode, tt.wantHow)
			}
		})
	}
}

func TestInterruptedWaitExitsWith128PlusSignal(t *testing.T) {
	other := errors.New("other")
	if err := interruptedOr(nil, runOptions{lease: "l"}, other); err != other {
		t.Errorf("without a signal: %v; want the error itself", err)
	}
	err := interruptedOr(syscall.SIGINT, runOptions{lease: "l"}, other)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 130 || !strings.Contains(ee.msg, "waiting for lease l") {
		t.Errorf("after SIGINT: %#v; want exit 130 naming the lease", err)
	}
}

func TestBindErrnosAreExplained(t *testing.T) {
	tests := []struct {
		errno error
		want  string
	}{
		{unix.EROFS, "read-only"},
		{unix.EIO, "epoch register"},
		{unix.ENOTSUP, "is it a fencefs mount"},
		{unix.EINVAL, "binding a token on /m"},
	}
	for _, tt := range tests {
		if got := explainBindErrno("/m", tt.errno).Error(); !strings.Contains(got, tt.want) {
			t.Errorf("explainBindErrno(%v) = %q; want it to contain %q", tt.errno, got, tt.want)
		}
	}
}
