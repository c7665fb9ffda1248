package csidriver_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// The node plugin's pod, as deploy/kubernetes/node.yaml runs it: the
// driver and the mounter in containers of their own. A crash of the
// driver (its container's main process) restarts its container: every
// process of it dies. The mounts that the mounter's container started
// serve on, and the next driver adopts them; the mounts that the driver
// started itself (one container, no mounter) die with it — the gap the
// mounter closes, checked here so that this test can tell the two apart.
func TestADriverContainerRestartLeavesOnlyTheMounterContainersMountsServing(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mounter  bool // a mounter container mounts, else the driver itself
		survives bool // the mount serves on through the restart
	}{
		{"a mounter container mounts", true, true},
		{"the driver mounts in its own container", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t)
			cfg := driverConfig{container: true}
			var m *mounter
			if tc.mounter {
				m = n.startMounter(t)
				cfg.mounter = m.sock
			}
			d := n.startDriverWith(t, cfg)
			ctx := callCtx(t)
			target := filepath.Join(n.kubelet, "pods", "p1", "mount")
			if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
				t.Fatal(err)
			}
			req := n.publishReq("vol-1", target, rwx, n.attrs())
			if _, err := d.NodePublishVolume(ctx, req); err != nil {
				t.Fatalf("publish: %v; driver log: %s", err, d.log)
			}
			pids := mountProcesses(t, target)
			if len(pids) != 1 {
				t.Fatalf("mount processes of %s: %v; want one", target, pids)
			}
			if inDriver := slices.Contains(d.c.processes(), pids[0]); inDriver == tc.mounter {
				t.Fatalf("the mount process %d is in the driver's container: %v; want %v", pids[0], inDriver, !tc.mounter)
			}
			if tc.mounter && !slices.Contains(m.c.processes(), pids[0]) {
				t.Fatalf("the mount process %d is not in the mounter's container %v", pids[0], m.c.processes())
			}
			bindToken(t, target, "auto")
			if err := writeFile(filepath.Join(target, "f"), "before"); err != nil {
				t.Fatal(err)
			}

			d.kill(t)
			if left := d.c.processes(); len(left) > 0 {
				t.Fatalf("processes of the driver's container outlived it: %v", left)
			}
			err := writeFile(filepath.Join(target, "f"), "while the driver restarts")
			switch {
			case tc.survives && err != nil:
				t.Fatalf("a write while the driver's container restarts: %v", err)
			case tc.survives:
				if got := n.object(t, "f"); got != "while the driver restarts" {
					t.Errorf("the bucket holds %q", got)
				}
				if b, err := os.ReadFile(filepath.Join(target, "f")); err != nil || string(b) != "while the driver restarts" {
					t.Errorf("a read while the driver's container restarts: %q %v", b, err)
				}
			case !errors.Is(err, syscall.ENOTCONN):
				t.Fatalf("a write once the driver's container (and its mount) died: %v; want ENOTCONN", err)
			}

			d2 := n.startDriverWith(t, cfg)
			if _, err := d2.NodePublishVolume(ctx, req); err != nil {
				t.Fatalf("the same publish after the restart: %v; log: %s", err, d2.log)
			}
			again := mountProcesses(t, target)
			if adopted := slices.Equal(again, pids); adopted != tc.survives || len(again) != 1 {
				t.Errorf("mount processes %v before the restart, %v after the publish again; want the same: %v", pids, again, tc.survives)
			}
			if tc.survives && !strings.Contains(d2.log.String(), "alive=true") {
				t.Errorf("the new driver did not adopt a live mount; log: %s", d2.log)
			}
			want := "before"
			if tc.survives {
				want = "while the driver restarts"
			}
			if b, err := os.ReadFile(filepath.Join(target, "f")); err != nil || string(b) != want {
				t.Errorf("a read after the publish again: %q %v; want %q", b, err, want)
			}
			if _, err := d2.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-1", VolumePath: target}); err != nil {
				t.Errorf("stats after the restart: %v", err)
			}
			if _, err := d2.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: target}); err != nil {
				t.Fatalf("unpublish after the restart: %v; log: %s", err, d2.log)
			}
			if isFencefsMount(t, target) {
				t.Errorf("%s is still mounted after the unpublish", target)
			}
			waitGone(t, target)
			if tc.mounter && !strings.Contains(m.log.String(), "unmounted") {
				t.Errorf("the mounter did not unmount; its log: %s", m.log)
			}
		})
	}
}
