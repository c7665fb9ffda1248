package csidriver_test

// Workload identity end to end: a real kube-apiserver issues each pod's
// service-account token (TokenRequest, as kubelet does for the CSIDriver's
// tokenRequests) and is the OpenID provider of a real MinIO, whose role
// policy gives each token only the prefix named by its subject
// (${jwt:sub}); the controller provisions a volume under each workload's
// prefix, and the node driver (asking the mounter, as the DaemonSet runs
// it) mounts each with its pod's token by web identity — no keys.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/fencefs/fencefs/csidriver"
	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/fencefs/fencefs/integration/kubeserver"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// tokensKey is where kubelet puts the pod's tokens in the volume context.
const tokensKey = "csi.storage.k8s.io/serviceAccount.tokens"

// workloadPolicy is MinIO's role policy of the OpenID provider: a token
// reaches the keys under workloads/<its subject>/ of the bucket, and no
// others (docs/CSI.md shows it). The listings of its prefix are the
// first statement; s3:ListBucket of its keys in the second is what
// makes MinIO answer a HEAD of a missing key 404, not 403 (it checks
// that action on the bucket/key resource).
const workloadPolicy = `{
  "Version": "2012-10-17",
  "Statement": [
    {"Effect": "Allow", "Action": ["s3:ListBucket"],
     "Resource": ["arn:aws:s3:::BUCKET"],
     "Condition": {"StringLike": {"s3:prefix": ["workloads/${jwt:sub}/*"]}}},
    {"Effect": "Allow",
     "Action": ["s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:GetObjectTagging",
                "s3:PutObjectTagging", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
     "Resource": ["arn:aws:s3:::BUCKET/workloads/${jwt:sub}/*"]}
  ]
}`

// deployAudience is the audience of the tokenRequests of
// deploy/kubernetes/csidriver.yaml: the test's tokens are the ones that
// CSIDriver makes kubelet ask for.
func deployAudience(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../deploy/kubernetes/csidriver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*-\s*audience:\s*(\S+)\s*$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("deploy/kubernetes/csidriver.yaml has no tokenRequests audience")
	}
	return string(m[1])
}

// minioWithIssuer starts MinIO with discovery's issuer as its OpenID
// provider (client ID audience, role policy workloads), trusting caFile.
func minioWithIssuer(t *testing.T, ctx context.Context, discovery, caFile, audience string) *gateway.Gateway {
	t.Helper()
	if _, err := gateway.FindMinIO(); err != nil {
		gateway.SkipOrFail(t, "%v", err)
	}
	gw, err := gateway.StartMinIO(ctx, gateway.MinIOOptions{Dir: t.TempDir(), Env: []string{
		"SSL_CERT_FILE=" + caFile,
		"MINIO_IDENTITY_OPENID_CONFIG_URL=" + discovery,
		"MINIO_IDENTITY_OPENID_CLIENT_ID=" + audience,
		"MINIO_IDENTITY_OPENID_ROLE_POLICY=workloads",
	}})
	if err != nil {
		t.Fatalf("start MinIO: %v", err)
	}
	t.Cleanup(func() {
		if err := gw.Stop(); err != nil {
			t.Errorf("stop MinIO: %v", err)
		}
	})
	return gw
}

// podVolumeContext is v's context with token for audience, as kubelet
// passes it.
func podVolumeContext(v *csi.Volume, audience, token string) map[string]string {
	ctx := maps.Clone(v.GetVolumeContext())
	b, _ := json.Marshal(map[string]map[string]string{audience: {"token": token, "expirationTimestamp": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}})
	ctx[tokensKey] = string(b)
	return ctx
}

// volumeDirOf is the driver's directory of the volume published at target
// (csidriver's volumeDir).
func volumeDirOf(state, target string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(target)))
	return filepath.Join(state, "volumes", hex.EncodeToString(sum[:12]))
}

func TestEachWorkloadReachesOnlyItsOwnVolumeWithItsPodsToken(t *testing.T) {
	harness.RequireFUSE(t)
	ctx := callCtx(t)
	aud := deployAudience(t)
	srv := kubeserver.ForTest(t)
	discovery, err := srv.ServeIssuerAnonymously(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gw := minioWithIssuer(t, ctx, discovery, srv.CAFile, aud)
	n := newNodeWith(t, gw)
	if err := gw.AddPolicy(ctx, "workloads", strings.ReplaceAll(workloadPolicy, "BUCKET", n.bucket)); err != nil {
		t.Fatal(err)
	}
	role := gateway.MinIORoleARN(gw.Region, aud)
	token := func(sa string) string {
		tok, err := srv.ServiceAccountToken(ctx, "default", sa, aud, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	tokA, tokB := token("app-a"), token("app-b")
	if err := gw.WaitWebIdentity(ctx, tokA, role); err != nil {
		t.Fatalf("%v; MinIO log: %s", err, gw.LogPath)
	}

	m := n.startMounter(t)
	d := n.startDriverWith(t, driverConfig{mounter: m.sock})
	ctrl := n.startController(t)

	// One StorageClass per workload: its volumes under the prefix its
	// token's subject reaches.
	provision := func(name, sa string) *csi.Volume {
		params := map[string]string{csidriver.ParamBucket: n.bucket, csidriver.ParamPrefix: "workloads/system:serviceaccount:default:" + sa,
			csidriver.ParamOnDelete: csidriver.OnDeleteDelete, csidriver.AttrAuthenticationSource: csidriver.AuthPod, "role_arn": role}
		resp, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, Parameters: params, Secrets: n.secrets(),
			VolumeCapabilities: []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
				AccessMode: &csi.VolumeCapability_AccessMode{Mode: rwx}}}})
		if err != nil {
			t.Fatalf("CreateVolume %s: %v; log: %s", name, err, ctrl.log)
		}
		return resp.GetVolume()
	}
	va, vb := provision("pvc-a", "app-a"), provision("pvc-b", "app-b")
	publish := func(v *csi.Volume, pod, token string) (string, error) {
		target := filepath.Join(n.kubelet, "pods", pod, "volume")
		if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
			t.Fatal(err)
		}
		req := n.publishReq(v.GetVolumeId(), target, rwx, podVolumeContext(v, aud, token))
		req.Secrets = nil
		_, err := d.NodePublishVolume(ctx, req)
		if err == nil && !slices.Contains(fencefsMounts(t, n.kubelet), target) {
			t.Fatalf("publish of %s at %s succeeded without a mount", v.GetVolumeId(), target)
		}
		return target, err
	}
	unpublish := func(v *csi.Volume, target string) {
		if _, err := d.NodeUnpublishVolume(callCtx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: v.GetVolumeId(), TargetPath: target}); err != nil {
			t.Errorf("unpublish %s: %v", target, err)
		}
	}

	targets := map[*csi.Volume]string{}
	for _, w := range []struct {
		v     *csi.Volume
		pod   string
		token string
	}{{va, "a-0", tokA}, {vb, "b-0", tokB}} {
		target, err := publish(w.v, w.pod, w.token)
		if err != nil {
			t.Fatalf("publish %s with its pod's token: %v; driver log: %s; mounter log: %s", w.v.GetVolumeId(), err, d.log, m.log)
		}
		t.Cleanup(func() { unpublish(w.v, target) })
		targets[w.v] = target
		bindToken(t, target, "1")
		body := "written by " + w.pod + " with its own token"
		if err := writeFile(filepath.Join(target, "report"), body); err != nil {
			t.Fatalf("%s's write through its volume: %v", w.pod, err)
		}
		if got := n.object(t, w.v.GetVolumeContext()["prefix"]+"report"); got != body {
			t.Fatalf("%s's report holds %q, want %q", w.pod, got, body)
		}
	}

	t.Run("another workload's token is refused", func(t *testing.T) {
		target, err := publish(vb, "intruder", tokA)
		if err == nil {
			defer unpublish(vb, target)
			werr := writeFile(filepath.Join(target, "stolen"), "x")
			if !errors.Is(werr, syscall.EACCES) && !errors.Is(werr, syscall.EROFS) {
				t.Fatalf("app-a's token mounted app-b's volume and its write returned %v; want the publish refused or EACCES", werr)
			}
			return
		}
		st := status.Convert(err)
		if st.Code() != codes.PermissionDenied || strings.Contains(st.Message(), "\n") {
			t.Errorf("app-a's token for app-b's volume: %v %q; want PermissionDenied in one line", st.Code(), st.Message())
		}
		t.Logf("refused: %v: %s", st.Code(), st.Message())
		if isFencefsMount(t, target) {
			t.Error("the refused publish left a mount")
		}
	})

	t.Run("no token in the publish", func(t *testing.T) {
		target := filepath.Join(n.kubelet, "pods", "tokenless", "volume")
		req := n.publishReq(va.GetVolumeId(), target, rwx, va.GetVolumeContext())
		req.Secrets = nil
		_, err := d.NodePublishVolume(ctx, req)
		if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "tokenRequests") {
			t.Errorf("a publish without the pod's token: %v %q; want FailedPrecondition naming tokenRequests", st.Code(), st.Message())
		}
	})

	var fresh string
	t.Run("a republish with a fresh token rewrites the file only", func(t *testing.T) {
		target := targets[va]
		before := mountProcesses(t, target)
		fresh = token("app-a")
		if fresh == tokA {
			t.Fatal("TokenRequest gave the same token twice")
		}
		if _, err := publish(va, "a-0", fresh); err != nil {
			t.Fatalf("republish: %v", err)
		}
		file := filepath.Join(volumeDirOf(n.state, target), "token")
		b, err := os.ReadFile(file)
		if err != nil || string(b) != fresh {
			t.Fatalf("the token file after the republish: %v; want the fresh token", err)
		}
		if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
			t.Errorf("the token file's mode is %v; want 0600", fi.Mode())
		}
		if after := mountProcesses(t, target); len(before) != 1 || !slices.Equal(before, after) {
			t.Errorf("mount processes %v before the republish, %v after; want the one same", before, after)
		}
		if err := writeFile(filepath.Join(target, "report"), "after the republish"); err != nil {
			t.Errorf("a write after the republish: %v", err)
		}
	})

	t.Run("no token shows anywhere but in its file", func(t *testing.T) {
		secrets := []string{tokA, tokB, fresh}
		shown := func(where, text string) {
			for i, tok := range secrets {
				if tok != "" && strings.Contains(text, tok) {
					t.Errorf("%s holds token %d", where, i)
				}
			}
		}
		shown("the driver's log", d.log.String())
		shown("the mounter's log", m.log.String())
		err := filepath.WalkDir(n.state, func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || e.Name() == "token" || strings.Contains(path, "/cache/") {
				return err
			}
			b, err := os.ReadFile(path)
			if err == nil {
				shown(path, string(b))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			if b, err := os.ReadFile(p); err == nil {
				shown(p, string(b))
			}
		}
		for _, tgt := range targets {
			for _, pid := range mountProcesses(t, tgt) {
				b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
				shown("the mount process's environment", string(b))
			}
		}
	})
}
