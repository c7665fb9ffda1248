package csidriver_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/fencefs/fencefs/integration/kubeserver"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const rwx = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER

// wantCode fails unless err is a status of code whose one-line message
// holds want.
func wantCode(t *testing.T, what string, err error, code codes.Code, want string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code || !strings.Contains(st.Message(), want) || strings.Contains(st.Message(), "\n") {
		t.Fatalf("%s: %v %q; want %v, one line with %q", what, st.Code(), st.Message(), code, want)
	}
}

func TestPublishMountsTheBucketReadOnlyUntilBoundAndEveryCallIsIdempotent(t *testing.T) {
	n := newNode(t)
	d := n.startDriver(t)
	ctx := callCtx(t)
	n.putObject(t, "before.txt", "written before the publish")
	target := filepath.Join(n.kubelet, "pods", "p1", "mount")
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		t.Fatal(err)
	}
	req := n.publishReq("vol-1", target, rwx, n.attrs())
	if _, err := d.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("publish: %v; driver log: %s", err, d.log)
	}
	if !isFencefsMount(t, target) {
		t.Fatalf("%s is not a fencefs mount after the publish", target)
	}
	pids := mountProcesses(t, target)
	if len(pids) != 1 {
		t.Fatalf("mount processes of %s: %v; want one", target, pids)
	}
	if b, err := os.ReadFile(filepath.Join(target, "before.txt")); err != nil || string(b) != "written before the publish" {
		t.Errorf("reading through the volume: %q %v", b, err)
	}
	if err := writeFile(filepath.Join(target, "early.txt"), "x"); !errors.Is(err, syscall.EROFS) {
		t.Errorf("a write before any token is bound: %v; want EROFS (read-only until bound)", err)
	}

	if _, err := d.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("the same publish again: %v", err)
	}
	if again := mountProcesses(t, target); !slices.Equal(again, pids) {
		t.Errorf("the same publish again changed the mount processes: %v, then %v", pids, again)
	}
	other := n.publishReq("vol-1", target, rwx, n.attrs("meta_ttl", "9s"))
	_, err := d.NodePublishVolume(ctx, other)
	wantCode(t, "a publish of the target with other attributes", err, codes.AlreadyExists, "published already with other arguments")

	stats, err := d.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-1", VolumePath: target})
	if err != nil || len(stats.GetUsage()) != 2 || stats.GetUsage()[0].GetTotal() <= 0 {
		t.Errorf("volume stats: %v %v", stats, err)
	}
	_, err = d.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-2", VolumePath: target})
	wantCode(t, "stats of another volume id", err, codes.NotFound, "is not published at")

	bindToken(t, target, "auto")
	if err := writeFile(filepath.Join(target, "after.txt"), "bound"); err != nil {
		t.Fatalf("a write once a token is bound: %v", err)
	}
	if got := n.object(t, "after.txt"); got != "bound" {
		t.Errorf("the bucket holds %q", got)
	}

	for i := range 2 {
		if _, err := d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: target}); err != nil {
			t.Fatalf("unpublish %d: %v", i+1, err)
		}
		if isFencefsMount(t, target) {
			t.Fatalf("%s is still mounted after unpublish %d", target, i+1)
		}
		if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the target path after unpublish %d: %v; want it removed", i+1, err)
		}
	}
	waitGone(t, target)
	if entries, _ := os.ReadDir(filepath.Join(n.state, "volumes")); len(entries) != 0 {
		t.Errorf("the state directory keeps %d volume directories after the unpublish", len(entries))
	}
}

func TestPublishFailuresAreTheOneLineFencefsPrinted(t *testing.T) {
	n := newNode(t)
	d := n.startDriver(t)
	ctx := callCtx(t)
	file := filepath.Join(n.kubelet, "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wrongSecret := "wrong-secret-0123456789"
	for _, tc := range []struct {
		name   string
		target string
		edit   func(r *csi.NodePublishVolumeRequest)
		code   codes.Code
		want   string
	}{
		{"missing bucket attribute", "t1", func(r *csi.NodePublishVolumeRequest) { delete(r.VolumeContext, "bucketName") },
			codes.InvalidArgument, "volume attribute bucketName is missing"},
		{"unreachable endpoint", "t2", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["endpoint"] = "http://127.0.0.1:1" },
			codes.Unavailable, "fencefs: mount: cannot reach http://127.0.0.1:1: connection refused"},
		{"wrong credentials", "t3", func(r *csi.NodePublishVolumeRequest) { r.Secrets["AWS_SECRET_ACCESS_KEY"] = wrongSecret },
			codes.PermissionDenied, "fencefs: mount: access denied to bucket"},
		{"a bucket that does not exist", "t4", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["bucketName"] = "no-such-bucket" },
			codes.NotFound, `bucket "no-such-bucket" does not exist`},
		{"an unknown option", "t5", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["fenc_mode"] = "fast" },
			codes.InvalidArgument, "fencefs: mount: -o fenc_mode: unknown mount option"},
		{"a target path that is not a directory", file, nil,
			codes.InvalidArgument, "target path " + file + " is not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.target
			if !filepath.IsAbs(target) {
				target = filepath.Join(n.kubelet, target)
			}
			req := n.publishReq("vol-"+tc.name, target, rwx, n.attrs())
			if tc.edit != nil {
				tc.edit(req)
			}
			_, err := d.NodePublishVolume(ctx, req)
			wantCode(t, "publish", err, tc.code, tc.want)
			msg := status.Convert(err).Message()
			for _, secret := range []string{n.gw.SecretKey, wrongSecret} {
				if strings.Contains(msg, secret) || strings.Contains(d.log.String(), secret) {
					t.Errorf("a secret shows in the error or the driver's log: %q", msg)
				}
			}
			if isFencefsMount(t, target) {
				t.Errorf("%s is mounted after a failed publish", target)
			}
		})
	}
	if entries, _ := os.ReadDir(filepath.Join(n.state, "volumes")); len(entries) != 0 {
		t.Errorf("failed publishes left %d volume directories", len(entries))
	}
}

// Two pods of one StatefulSet on one node, one volume: each publish is a
// mount of its own, so that the newer leader's token fences the older
// one's mount, never its own.
func TestTwoPublishesOfOneVolumeAreFencedApart(t *testing.T) {
	n := newNode(t)
	d := n.startDriver(t)
	ctx := callCtx(t)
	a, b := filepath.Join(n.kubelet, "pod-a"), filepath.Join(n.kubelet, "pod-b")
	for _, target := range []string{a, b} {
		if _, err := d.NodePublishVolume(ctx, n.publishReq("shared", target, rwx, n.attrs())); err != nil {
			t.Fatalf("publish at %s: %v", target, err)
		}
		t.Cleanup(func() {
			_, _ = d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "shared", TargetPath: target})
		})
	}
	if pa, pb := mountProcesses(t, a), mountProcesses(t, b); len(pa) != 1 || len(pb) != 1 || pa[0] == pb[0] {
		t.Fatalf("mount processes %v and %v; want one each", pa, pb)
	}
	bindToken(t, a, "auto")
	if err := writeFile(filepath.Join(a, "state"), "A leads"); err != nil {
		t.Fatal(err)
	}
	bindToken(t, b, "auto")
	if err := writeFile(filepath.Join(b, "state"), "B leads"); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(filepath.Join(a, "state"), "A again"); !errors.Is(err, syscall.EROFS) {
		t.Errorf("the old leader's write: %v; want EROFS", err)
	}
	if got := n.object(t, "state"); got != "B leads" {
		t.Errorf("the bucket holds %q; want B's", got)
	}
}

// recordOf returns the path of the record the driver keeps for target.
func recordOf(t *testing.T, n *node, target string) string {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(n.state, "volumes", "*", "record.json"))
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), `"target": "`+target+`"`) {
			return p
		}
	}
	t.Fatalf("no record of %s under %s", target, n.state)
	return ""
}

func TestADriverKilledLeavesTheMountsServingAndItsSuccessorAdoptsThem(t *testing.T) {
	n := newNode(t)
	d := n.startDriver(t)
	ctx := callCtx(t)
	kept, lost := filepath.Join(n.kubelet, "kept"), filepath.Join(n.kubelet, "lost")
	for _, target := range []string{kept, lost} {
		if _, err := d.NodePublishVolume(ctx, n.publishReq("vol-"+filepath.Base(target), target, rwx, n.attrs())); err != nil {
			t.Fatalf("publish at %s: %v", target, err)
		}
	}
	pids := mountProcesses(t, kept)
	bindToken(t, kept, "auto")
	if err := writeFile(filepath.Join(kept, "f"), "before"); err != nil {
		t.Fatal(err)
	}

	d.kill(t)
	if err := writeFile(filepath.Join(kept, "f"), "while no driver runs"); err != nil {
		t.Fatalf("a write while no driver runs: %v", err)
	}
	if got := n.object(t, "f"); got != "while no driver runs" {
		t.Errorf("the bucket holds %q", got)
	}
	// A driver that lost a record (its mount was published by a driver
	// that died before writing it, or the state was wiped).
	if err := os.Remove(recordOf(t, n, lost)); err != nil {
		t.Fatal(err)
	}

	d2 := n.startDriver(t)
	if _, err := d2.NodePublishVolume(ctx, n.publishReq("vol-kept", kept, rwx, n.attrs())); err != nil {
		t.Fatalf("the same publish after the restart: %v; log: %s", err, d2.log)
	}
	if again := mountProcesses(t, kept); !slices.Equal(again, pids) {
		t.Errorf("the same publish after the restart changed the mount processes: %v, then %v", pids, again)
	}
	_, err := d2.NodePublishVolume(ctx, n.publishReq("vol-kept", kept, rwx, n.attrs("uid", "1000")))
	wantCode(t, "another publish after the restart", err, codes.AlreadyExists, "published already with other arguments")
	_, err = d2.NodePublishVolume(ctx, n.publishReq("vol-lost", lost, rwx, n.attrs()))
	wantCode(t, "a publish of the mount without a record", err, codes.AlreadyExists, "no record of")
	if _, err := d2.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-kept", VolumePath: kept}); err != nil {
		t.Errorf("stats of the adopted volume: %v", err)
	}
	for _, target := range []string{kept, lost} {
		if _, err := d2.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-" + filepath.Base(target), TargetPath: target}); err != nil {
			t.Fatalf("unpublish of %s: %v", target, err)
		}
		if isFencefsMount(t, target) {
			t.Errorf("%s is still mounted", target)
		}
		waitGone(t, target)
	}
	if !strings.Contains(d2.log.String(), "adopted a fencefs mount the driver has no record of") {
		t.Errorf("the driver did not say it adopted a mount without a record; log: %s", d2.log)
	}
}

func TestAPublishWhoseMountProcessDiedIsMountedAgain(t *testing.T) {
	n := newNode(t)
	d := n.startDriver(t)
	ctx := callCtx(t)
	n.putObject(t, "f", "stored")
	target := filepath.Join(n.kubelet, "t")
	req := n.publishReq("vol-1", target, rwx, n.attrs())
	if _, err := d.NodePublishVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	pids := mountProcesses(t, target)
	if len(pids) != 1 {
		t.Fatalf("mount processes %v", pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, target)
	_, err := d.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-1", VolumePath: target})
	wantCode(t, "stats of a volume whose process died", err, codes.FailedPrecondition, "is gone")
	if _, err := d.NodePublishVolume(ctx, req); err != nil {
		t.Fatalf("the same publish again: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(target, "f")); err != nil || string(b) != "stored" {
		t.Errorf("reading through the mount again: %q %v", b, err)
	}
	if _, err := d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, target)
}

// The StatefulSet of deploy/kubernetes/example: each replica's volume is
// published without a token, and the replica's `fencefs run
// --kubernetes-lease` binds the Lease's token through it. Once the second
// replica led, the first one's mount is fenced.
func TestFencefsRunWithAKubernetesLeaseBindsTheTokenThroughAPublishedVolume(t *testing.T) {
	n := newNode(t)
	srv := kubeserver.ForTest(t)
	kubeconfig, err := srv.Kubeconfig(kubeserver.Admin)
	if err != nil {
		t.Fatal(err)
	}
	d := n.startDriver(t)
	ctx := callCtx(t)
	pods := []string{filepath.Join(n.kubelet, "app-0"), filepath.Join(n.kubelet, "app-1")}
	for _, target := range pods {
		if _, err := d.NodePublishVolume(ctx, n.publishReq("data", target, rwx, n.attrs())); err != nil {
			t.Fatalf("publish at %s: %v", target, err)
		}
		t.Cleanup(func() {
			_, _ = d.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "data", TargetPath: target})
		})
	}
	run := func(target, line string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, n.bin, "run", "--kubernetes-lease", "default/example-leader", "--kubeconfig", kubeconfig,
			"--ttl", "10s", "--mount", target, "--", "sh", "-c", `echo "$1" >> "$2"/leader.log`, "sh", line, target)
		cmd.Env = append(os.Environ(), n.gw.Env()...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("fencefs run on %s: %v\n%s", target, err, out)
		}
	}
	run(pods[0], "app-0 led")
	run(pods[1], "app-1 led")
	if got := n.object(t, "leader.log"); got != "app-0 led\napp-1 led\n" {
		t.Errorf("leader.log holds %q", got)
	}
	if err := writeFile(filepath.Join(pods[0], "leader.log"), "app-0 again\n"); !errors.Is(err, syscall.EROFS) {
		t.Errorf("app-0's write once app-1 led: %v; want EROFS", err)
	}
}
