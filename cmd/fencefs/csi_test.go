package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/csidriver"
	"github.com/fencefs/fencefs/fencing"
)

// The CSI driver learns the pid of a volume's mount process from the line
// a ready background mount prints: that line must keep naming it.
func TestTheCSIDriverFindsThePidInEveryMountSummary(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  config.Config
		st   fencing.Status
	}{
		{"unbound", config.Config{S3: config.S3{Bucket: "data"}, Mount: config.Mount{Mountpoint: "/t"}}, fencing.Status{State: fencing.StateUnbound}},
		{"read-only with a prefix and a log", config.Config{S3: config.S3{Bucket: "data", Prefix: "app/"}, Mount: config.Mount{Mountpoint: "/t", ReadOnly: true}, Log: config.Log{File: "/l"}}, fencing.Status{}},
		{"bound", config.Config{S3: config.S3{Bucket: "data"}, Mount: config.Mount{Mountpoint: "/t"}}, fencing.Status{State: fencing.StateActive, Token: 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := mountSummary(&tc.cfg, tc.st, 4242)
			if pid, ok := csidriver.PidOfMountSummary(line); !ok || pid != 4242 {
				t.Errorf("%q: pid %d %v; want 4242", line, pid, ok)
			}
		})
	}
}

func TestCSIRefusesAMissingNodeIDAndBadLogSettings(t *testing.T) {
	for _, tc := range []struct {
		o    csiOptions
		want string
	}{
		{csiOptions{csiShared: csiShared{logLevel: "info", logFormat: "text"}}, "--node-id is required"},
		{csiOptions{nodeID: "n", csiShared: csiShared{logLevel: "loud", logFormat: "text"}}, `--log-level "loud" is not a log level`},
		{csiOptions{nodeID: "n", csiShared: csiShared{logLevel: "info", logFormat: "xml"}}, `--log-format "xml" is not a log format`},
		{csiOptions{nodeID: "n", csiShared: csiShared{logLevel: "info", logFormat: "text", stateDir: t.TempDir()}, endpoint: "tcp://127.0.0.1:1"}, "is not a unix socket"},
		{csiOptions{nodeID: "n", csiShared: csiShared{logLevel: "info", logFormat: "text"}, mounter: "run/mounter.sock"}, `--mounter-socket "run/mounter.sock" is not an absolute path`},
	} {
		err := runCSI(tc.o)
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want a usage error with %q", tc.o, err, tc.want)
		}
	}
}

func TestCSIMounterRefusesRelativePathsAndBadLogSettings(t *testing.T) {
	ok := csiMounterOptions{socket: "/run/m.sock", csiShared: csiShared{stateDir: t.TempDir(), kubeletDir: "/var/lib/kubelet", logLevel: "info", logFormat: "text"}}
	for _, tc := range []struct {
		edit func(o *csiMounterOptions)
		want string
	}{
		{func(o *csiMounterOptions) { o.socket = "m.sock" }, `--socket "m.sock" is not an absolute path`},
		{func(o *csiMounterOptions) { o.kubeletDir = "kubelet" }, `--kubelet-dir "kubelet" is not an absolute path`},
		{func(o *csiMounterOptions) { o.logLevel = "loud" }, `--log-level "loud" is not a log level`},
		{func(o *csiMounterOptions) { o.logFormat = "xml" }, `--log-format "xml" is not a log format`},
	} {
		o := ok
		tc.edit(&o)
		err := runCSIMounter(o)
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want a usage error with %q", o, err, tc.want)
		}
	}
}

func TestCSITakesNoArgumentButItsMounterSubcommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"csi", "mountr"}, `unknown command "mountr" for "fencefs csi"; did you mean "mounter"?`},
		{[]string{"csi", "frob"}, `unknown command "frob" for "fencefs csi" (accepted: mounter)`},
		{[]string{"csi", "mounter", "extra"}, `unknown command "extra" for "fencefs csi mounter"`},
	} {
		r := runBin(t, nil, tc.args...)
		oneErrorLine(t, r, "fencefs: "+strings.Join(tc.args[:len(tc.args)-1], " ")+": ", tc.want)
		if r.code != exitUsage {
			t.Errorf("%q: exit status %d, want %d", tc.args, r.code, exitUsage)
		}
	}
}
