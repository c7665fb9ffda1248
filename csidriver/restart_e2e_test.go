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
// process of it dies. The mounts that the mounter's container runs serve
// on, and the next driver adopts them; the mounts that the driver ran
// itself (one container, no mounter) die with it — the gap the mounter
// closes, checked here so that this test tells the two apart — and so do
// the mounter's when its own container restarts.
func TestAContainerRestartStopsOnlyTheMountsItRan(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mounter  bool   // a mounter container mounts, else the driver itself
		crash    string // the container that crashes: "driver" or "mounter"
		survives bool   // the mount serves on through the restart
	}{
		{"the driver's container, a mounter mounting", true, "driver", true},
		{"the driver's container, the driver mounting", false, "driver", false},
		{"the mounter's container", true, "mounter", false},
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

			crashed := d.c
			if tc.crash == "mounter" {
				crashed = m.c
			}
			crashed.crash(t)
			if left := crashed.processes(); len(left) > 0 {
				t.Fatalf("processes of the %s's container outlived it: %v", tc.crash, left)
			}
			wrote := writeThroughACrash(t, n, target, tc.crash, tc.survives)

			d2 := d
			if tc.crash == "driver" {
				d2 = n.startDriverWith(t, cfg)
			} else {
				m = n.startMounter(t)
			}
			if _, err := d2.NodePublishVolume(ctx, req); err != nil {
				t.Fatalf("the same publish after the restart: %v; log: %s", err, d2.log)
			}
			again := mountProcesses(t, target)
			if adopted := slices.Equal(again, pids); adopted != tc.survives || len(again) != 1 {
				t.Errorf("mount processes %v before the restart, %v after the publish again; want the same: %v", pids, again, tc.survives)
			}
			if tc.crash == "driver" && tc.survives != strings.Contains(d2.log.String(), "alive=true") {
				t.Errorf("the new driver adopted a live mount: %v; want %v; log: %s", !tc.survives, tc.survives, d2.log)
			}
			if b, err := os.ReadFile(filepath.Join(target, "f")); err != nil || string(b) != wrote {
				t.Errorf("a read after the publish again: %q %v; want %q", b, err, wrote)
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

// writeThroughACrash writes f of the mount at target once the container
// crashed is gone: a write that lands when the mount survives, ENOTCONN
// when it died. It returns what f holds.
func writeThroughACrash(t *testing.T, n *node, target, crashed string, survives bool) string {
	t.Helper()
	data := "while the " + crashed + " restarts"
	err := writeFile(filepath.Join(target, "f"), data)
	if !survives {
		if !errors.Is(err, syscall.ENOTCONN) {
			t.Fatalf("a write once the %s's container (and the mount) died: %v; want ENOTCONN", crashed, err)
		}
		return "before"
	}
	if err != nil {
		t.Fatalf("a write while the %s's container restarts: %v", crashed, err)
	}
	if got := n.object(t, "f"); got != data {
		t.Errorf("the bucket holds %q; want %q", got, data)
	}
	if b, err := os.ReadFile(filepath.Join(target, "f")); err != nil || string(b) != data {
		t.Errorf("a read while the %s's container restarts: %q %v", crashed, b, err)
	}
	return data
}
