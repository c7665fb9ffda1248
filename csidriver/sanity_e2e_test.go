package csidriver_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fencefs/fencefs/csidriver"
	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/minio/minio-go/v7"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"
)

// sanityAloneEnv, set, runs TestCSISanity against a driver that mounts
// by itself (a child process of TestCSISanityOfADriverWithoutAMounter);
// sanityServerEnv names the S3 server (gateway.Kind) of a child's run
// (TestCSISanityOnMinIO), the Versity gateway when unset.
const (
	sanityAloneEnv  = "FENCEFS_TEST_CSI_SANITY_ALONE"
	sanityServerEnv = "FENCEFS_TEST_CSI_SANITY_SERVER"
)

// TestCSISanity runs the Kubernetes CSI conformance suite (csi-sanity,
// kubernetes-csi/csi-test) against `fencefs csi` as the node plugin's pod
// runs it, asking a mounter (`fencefs csi mounter`, another process) to
// mount, and against `fencefs csi --controller` as the controller
// Deployment runs it: Identity, Controller (CreateVolume, DeleteVolume,
// ValidateVolumeCapabilities: prefixes of a real bucket) and Node tests
// (real mounts of the volumes the controller made). It checks its own
// counts, so that a suite that skipped everything cannot pass, and fails
// on any test csi-sanity skips while running it.
func TestCSISanity(t *testing.T) {
	kind := gateway.Kind(os.Getenv(sanityServerEnv))
	if kind == "" {
		kind = gateway.Versity
	}
	n := newNodeOn(t, kind)
	var dc driverConfig
	if os.Getenv(sanityAloneEnv) == "" {
		dc.mounter = n.startMounter(t).sock
	}
	n.startDriverWith(t, dc)
	ctrl := n.startController(t)
	dir := filepath.Dir(n.sock)
	secrets := filepath.Join(dir, "secrets.yaml")
	var yaml strings.Builder
	for _, k := range []string{"CreateVolumeSecret", "DeleteVolumeSecret", "ControllerValidateVolumeCapabilitiesSecret", "NodePublishVolumeSecret"} {
		fmt.Fprintf(&yaml, "%s:\n  AWS_ACCESS_KEY_ID: %q\n  AWS_SECRET_ACCESS_KEY: %q\n", k, n.gw.AccessKey, n.gw.SecretKey)
	}
	if err := os.WriteFile(secrets, []byte(yaml.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + n.sock
	cfg.ControllerAddress = "unix://" + ctrl.sock
	cfg.TargetPath = filepath.Join(n.kubelet, "target")
	cfg.StagingPath = filepath.Join(n.kubelet, "staging")
	cfg.SecretsFile = secrets
	cfg.TestVolumeAccessType = "mount"
	// Every volume a prefix of the bucket, deleted with its objects.
	cfg.TestVolumeParameters = map[string]string{csidriver.ParamBucket: n.bucket, csidriver.ParamPrefix: "sanity", csidriver.ParamOnDelete: csidriver.OnDeleteDelete}

	var report types.Report
	ginkgo.ReportAfterSuite("counts", func(r ginkgo.Report) { report = r })
	sanity.GinkgoTest(&cfg)
	suite, reporter := ginkgo.GinkgoConfiguration()
	suite.SkipStrings = notOffered
	reporter.Succinct = !testing.Verbose()
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "csi-sanity against fencefs csi", suite, reporter)

	left := regexp.MustCompile(strings.Join(notOffered, "|"))
	var passed, leftOut, failed int
	for _, s := range report.SpecReports {
		if s.LeafNodeType != types.NodeTypeIt {
			continue
		}
		switch {
		case s.State.Is(types.SpecStatePassed):
			passed++
			t.Logf("passed: %s", s.FullText())
		case s.State.Is(types.SpecStateSkipped|types.SpecStatePending) && s.Failure.Message == "" && left.MatchString(s.FullText()):
			// Never run: notOffered left it out of the suite.
			leftOut++
		default:
			// Failed, or skipped while running (csi-sanity skips what a
			// driver does not advertise; everything the driver leaves
			// out on purpose is left out above): CI or not, a failure.
			failed++
			t.Errorf("csi-sanity: %s %q: %s", s.State, s.FullText(), s.Failure.Message)
		}
	}
	t.Logf("csi-sanity (%s, mounter %q): %d passed, %d left out, %d failed", kind, dc.mounter, passed, leftOut, failed)
	// The Identity, Controller and Node tests that apply to a driver
	// without staging, attach or snapshots: fewer passing means the suite
	// stopped testing something.
	if passed < wantSanityPassed || failed > 0 {
		t.Errorf("csi-sanity: %d passed (want at least %d), %d failed", passed, wantSanityPassed, failed)
	}
	// csi-sanity deleted every volume it made (onDelete: delete): the
	// bucket holds nothing of them, not even their fence domains.
	var remaining []string
	for o := range n.gw.Client().ListObjects(context.Background(), n.bucket, minio.ListObjectsOptions{Recursive: true}) {
		remaining = append(remaining, o.Key)
	}
	if len(remaining) > 0 {
		t.Errorf("after csi-sanity the bucket still holds %d objects: %q", len(remaining), remaining)
	}
	// Exactly the specs of what the driver leaves out: a pattern that
	// grew, or a csi-sanity version with more such specs, must be looked
	// at, not silently left out.
	if leftOut != wantSanityLeftOut {
		t.Errorf("csi-sanity: %d left out by notOffered, want exactly %d", leftOut, wantSanityLeftOut)
	}
}

// wantSanityPassed is how many csi-sanity tests pass (docs/CSI.md lists
// them); wantSanityLeftOut how many notOffered leaves out (v5.6.0).
const (
	wantSanityPassed  = 33
	wantSanityLeftOut = 70
)

// notOffered are the csi-sanity tests of what the driver leaves out on
// purpose (docs/CSI.md), as ginkgo skip patterns (matched anywhere in a
// test's text, as ginkgo does): they are never run, so
// that a test csi-sanity skips at run time is always a failure. The
// controller makes and deletes volumes, and nothing else: no attach
// (ControllerPublish), no listing, capacity, snapshots, clones, expansion,
// volume attribute classes or health; no group snapshots; no staging (a
// mount per publish), no node expansion (a prefix has no size), no health
// reports.
var notOffered = []string{
	`Controller Service \[Controller Server\] (GetCapacity|ListVolumes|ControllerPublishVolume|volume lifecycle|ControllerUnpublishVolume) `,
	`Controller Service \[Controller Server\] CreateVolume should (create volume from|fail when the volume source|create volume with a volume attribute class|not create volume with an invalid volume attribute class)`,
	`(ListSnapshots|GetSnapshot|DeleteSnapshot|CreateSnapshot|ExpandVolume|ModifyVolume|ControllerGetVolumeHealth|ControllerListVolumeHealth) \[Controller Server\]`,
	`GroupController Service `,
	`Node Service (NodeStageVolume|NodeUnstageVolume|NodeExpandVolume|NodeGetVolumeHealth|NodeGetStorageHealth) `,
}

// runSanityChild runs TestCSISanity in a child test process with env
// (ginkgo runs one suite per process) and returns its counts line.
func runSanityChild(t *testing.T, env ...string) {
	t.Helper()
	harness.RequireFUSE(t)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestCSISanity$", "-test.v", "-test.count", "1")
	cmd.Env = append(append(os.Environ(), env...), "FENCEFS_BIN="+harness.Binary(t))
	out, err := cmd.CombinedOutput()
	counts := regexp.MustCompile(`csi-sanity \([^)]*\): [0-9]+ passed, [0-9]+ left out, [0-9]+ failed`).Find(out)
	if err != nil || counts == nil || bytes.Contains(out, []byte("--- SKIP: TestCSISanity")) {
		t.Fatalf("TestCSISanity with %q: %v; counts %q; output:\n%s", env, err, counts, out)
	}
	t.Logf("%s", counts)
}

// TestCSISanityOnMinIO runs TestCSISanity on MinIO (one server with four
// erasure-coded drives) in a child test process.
func TestCSISanityOnMinIO(t *testing.T) {
	if _, err := gateway.FindMinIO(); err != nil {
		gateway.SkipOrFail(t, "%v", err)
	}
	runSanityChild(t, sanityServerEnv+"="+string(gateway.MinIOErasure))
}

// TestCSISanityOfADriverWithoutAMounter runs TestCSISanity against a
// driver that mounts by itself, in a child test process: csi-sanity
// (ginkgo) runs once per process. The child runs TestCSISanity alone
// (-test.run), so this test never runs in it.
func TestCSISanityOfADriverWithoutAMounter(t *testing.T) {
	runSanityChild(t, sanityAloneEnv+"=1")
}
