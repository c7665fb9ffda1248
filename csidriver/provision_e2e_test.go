package csidriver_test

// A volume per claim, end to end: `fencefs csi --controller` provisions
// two volumes of one bucket, `fencefs csi` publishes each (real FUSE
// mounts of a real S3 server), and a takeover in one claim leaves the
// other claim's epoch and files untouched.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/fencefs/fencefs/csidriver"
	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/fencefs/fencefs/integration/kubeserver"
	"github.com/minio/minio-go/v7"
)

// claims is a node with a controller, a driver and a StorageClass's
// parameters.
type claims struct {
	n      *node
	ctrl   *controller
	d      *driver
	params map[string]string
}

func newClaims(t *testing.T, gw *gateway.Gateway) *claims {
	t.Helper()
	n := newNodeWith(t, gw)
	c := &claims{n: n, d: n.startDriver(t), ctrl: n.startController(t),
		params: map[string]string{csidriver.ParamBucket: n.bucket, csidriver.ParamPrefix: "volumes", csidriver.ParamOnDelete: csidriver.OnDeleteDelete}}
	return c
}

// provision creates the volume of claim name, as the external-provisioner
// does for a PersistentVolumeClaim.
func (c *claims) provision(t *testing.T, name string) *csi.Volume {
	t.Helper()
	resp, err := c.ctrl.CreateVolume(callCtx(t), &csi.CreateVolumeRequest{Name: name, Parameters: c.params, Secrets: c.n.secrets(),
		VolumeCapabilities: []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: rwx}}}})
	if err != nil {
		t.Fatalf("CreateVolume %s: %v; log: %s", name, err, c.ctrl.log)
	}
	return resp.GetVolume()
}

// publish mounts v at a pod's target, as kubelet does, and unpublishes it
// in t.Cleanup.
func (c *claims) publish(t *testing.T, v *csi.Volume, pod string) string {
	t.Helper()
	target := filepath.Join(c.n.kubelet, "pods", pod, "volume")
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		t.Fatal(err)
	}
	ctx := callCtx(t)
	if _, err := c.d.NodePublishVolume(ctx, c.n.publishReq(v.GetVolumeId(), target, rwx, v.GetVolumeContext())); err != nil {
		t.Fatalf("publish %s at %s: %v; log: %s", v.GetVolumeId(), target, err, c.d.log)
	}
	t.Cleanup(func() { c.unpublish(t, v, target) })
	return target
}

func (c *claims) unpublish(t *testing.T, v *csi.Volume, target string) {
	t.Helper()
	if _, err := c.d.NodeUnpublishVolume(callCtx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: v.GetVolumeId(), TargetPath: target}); err != nil {
		t.Errorf("unpublish %s: %v", target, err)
	}
}

// fenceStatus is what a mount's root attributes say of its fencing.
type fenceStatus struct{ state, token, epoch string }

func statusOf(t *testing.T, mount string) fenceStatus {
	t.Helper()
	get := func(name string) string {
		buf := make([]byte, 256)
		n, err := syscall.Getxattr(mount, "user.fencefs."+name, buf)
		if err != nil {
			t.Fatalf("user.fencefs.%s of %s: %v", name, mount, err)
		}
		return string(buf[:n])
	}
	return fenceStatus{state: get("state"), token: get("token"), epoch: get("epoch")}
}

// register is the ETag of the epoch register of the volume at prefix.
func (c *claims) register(t *testing.T, prefix string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := c.n.gw.Client().StatObject(ctx, c.n.bucket, prefix+".fencefs/epoch", minio.StatObjectOptions{})
	if err != nil {
		t.Fatalf("the register of %s: %v", prefix, err)
	}
	return info.ETag
}

// keys lists the bucket's keys under prefix.
func (c *claims) keys(prefix string) []string {
	var out []string
	for o := range c.n.gw.Client().ListObjects(context.Background(), c.n.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		out = append(out, o.Key)
	}
	return out
}

// Two claims, two volumes of one bucket: each claim's leader binds a
// token on its own mount; a newer leader of claim A (a takeover) fences
// A's old leader, and leaves claim B's epoch, register, leader and files
// as they were. Deleting A's volume removes its prefix, fence domain
// included, and nothing of B's.
func TestATakeoverInOneProvisionedVolumeLeavesTheOtherUntouched(t *testing.T) {
	harness.RequireFUSE(t)
	gateway.ForEachServer(t, gateway.SingleDriveServers, func(t *testing.T, gw *gateway.Gateway) {
		c := newClaims(t, gw)
		va, vb := c.provision(t, "pvc-a"), c.provision(t, "pvc-b")
		pa, pb := va.GetVolumeContext()["prefix"], vb.GetVolumeContext()["prefix"]
		if pa == pb || va.GetVolumeContext()["fence_domain"] != "prefix" {
			t.Fatalf("volumes %v and %v: want two prefixes, each a fence domain", va.GetVolumeContext(), vb.GetVolumeContext())
		}
		a0, a1, b0 := c.publish(t, va, "a-0"), c.publish(t, va, "a-1"), c.publish(t, vb, "b-0")

		// Each claim's leader: B binds a token far above A's, as a
		// cluster-wide counter (a Lease's resourceVersion) would give.
		bindToken(t, a0, "5")
		if err := writeFile(filepath.Join(a0, "state"), "a-0 leads"); err != nil {
			t.Fatalf("a-0's write: %v", err)
		}
		bindToken(t, b0, "100")
		if err := writeFile(filepath.Join(b0, "state"), "b-0 leads"); err != nil {
			t.Fatalf("b-0's write: %v", err)
		}
		beforeB, regB := statusOf(t, b0), c.register(t, pb)

		// Claim A's takeover: a-1 binds a newer token than a-0's, below B's.
		bindToken(t, a1, "6")
		if err := writeFile(filepath.Join(a1, "state"), "a-1 leads"); err != nil {
			t.Fatalf("a-1's write after its takeover: %v", err)
		}
		if err := writeFile(filepath.Join(a0, "state"), "a-0 again"); !errors.Is(err, syscall.EROFS) {
			t.Errorf("a-0's write after a-1 took over: %v; want EROFS", err)
		}
		// A write refused by the journal a-1 sealed before raising the
		// register latches a-0 fenced while the epoch it saw is still 5;
		// its next register read shows 6.
		st := statusOf(t, a0)
		for deadline := time.Now().Add(10 * time.Second); st.epoch != "6" && time.Now().Before(deadline); st = statusOf(t, a0) {
			time.Sleep(100 * time.Millisecond)
		}
		if st.state != "fenced" || st.epoch != "6" {
			t.Errorf("a-0 after the takeover: %+v; want fenced by epoch 6", st)
		}

		// Claim B: nothing moved.
		if st := statusOf(t, b0); st != beforeB || st.state != "active" || st.epoch != "100" {
			t.Errorf("b-0 after A's takeover: %+v; want it as before, %+v (active at epoch 100)", st, beforeB)
		}
		if reg := c.register(t, pb); reg != regB {
			t.Errorf("B's register changed with A's takeover: ETag %s, then %s", regB, reg)
		}
		if err := writeFile(filepath.Join(b0, "state"), "b-0 still leads"); err != nil {
			t.Errorf("b-0's write after A's takeover: %v", err)
		}
		if got := c.n.object(t, pa+"state"); got != "a-1 leads" {
			t.Errorf("A's state holds %q; want a-1's", got)
		}
		if got := c.n.object(t, pb+"state"); got != "b-0 still leads" {
			t.Errorf("B's state holds %q; want b-0's", got)
		}

		// Deleting A (its pods gone first, as Kubernetes orders it): its
		// prefix goes, fence domain included; B's stays whole.
		c.unpublish(t, va, a0)
		c.unpublish(t, va, a1)
		keysB := c.keys(pb)
		if _, err := c.ctrl.DeleteVolume(callCtx(t), &csi.DeleteVolumeRequest{VolumeId: va.GetVolumeId(), Secrets: c.n.secrets()}); err != nil {
			t.Fatalf("DeleteVolume %s: %v", va.GetVolumeId(), err)
		}
		if left := c.keys(pa); len(left) != 0 {
			t.Errorf("after DeleteVolume %s its prefix holds %q", va.GetVolumeId(), left)
		}
		if after := c.keys(pb); len(after) != len(keysB) || len(after) == 0 {
			t.Errorf("B's prefix held %q, after A's delete %q", keysB, after)
		}
		if got := c.n.object(t, pb+"state"); got != "b-0 still leads" {
			t.Errorf("B's state after A's delete: %q", got)
		}
	})
}

// The same with `fencefs run --kubernetes-lease`, as the example
// StatefulSet runs it: each claim's replicas elect their leader with a
// Lease of their own (on a real kube-apiserver), whose resourceVersions
// come from one counter for the whole cluster. The second replica of
// claim A taking A's Lease fences A's first one, and not B's leader.
func TestFencefsRunWithALeasePerClaimFencesOnlyItsOwnClaim(t *testing.T) {
	harness.RequireFUSE(t)
	c := newClaims(t, gateway.ForTest(t))
	srv := kubeserver.ForTest(t)
	kubeconfig, err := srv.Kubeconfig(kubeserver.Admin)
	if err != nil {
		t.Fatal(err)
	}
	va, vb := c.provision(t, "pvc-a"), c.provision(t, "pvc-b")
	a0, a1, b0 := c.publish(t, va, "a-0"), c.publish(t, va, "a-1"), c.publish(t, vb, "b-0")
	run := func(target, lease, line string) {
		t.Helper()
		cmd := exec.CommandContext(callCtx(t), c.n.bin, "run", "--kubernetes-lease", "default/"+lease, "--kubeconfig", kubeconfig,
			"--fence-domain", "prefix", "--ttl", "10s", "--mount", target, "--", "sh", "-c", `echo "$1" >> "$2"/leader.log`, "sh", line, target)
		cmd.Env = append(os.Environ(), c.n.gw.Env()...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("fencefs run --kubernetes-lease %s on %s: %v\n%s", lease, target, err, out)
		}
	}
	run(a0, "claim-a", "a-0 led")
	run(b0, "claim-b", "b-0 led")
	beforeB := statusOf(t, b0)
	run(a1, "claim-a", "a-1 led")
	if err := writeFile(filepath.Join(a0, "leader.log"), "a-0 again\n"); !errors.Is(err, syscall.EROFS) {
		t.Errorf("a-0's write once a-1 led claim A: %v; want EROFS", err)
	}
	if st := statusOf(t, b0); st != beforeB || st.state != "active" {
		t.Errorf("b-0 after A's takeover: %+v; want it as before, %+v", st, beforeB)
	}
	run(b0, "claim-b", "b-0 led again")
	pa, pb := va.GetVolumeContext()["prefix"], vb.GetVolumeContext()["prefix"]
	if got := c.n.object(t, pa+"leader.log"); got != "a-0 led\na-1 led\n" {
		t.Errorf("A's leader.log holds %q", got)
	}
	if got := c.n.object(t, pb+"leader.log"); got != "b-0 led\nb-0 led again\n" {
		t.Errorf("B's leader.log holds %q", got)
	}
}
