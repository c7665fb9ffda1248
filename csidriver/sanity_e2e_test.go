package csidriver_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// staticVolumes stands in for the cluster's administrator in csi-sanity:
// the driver has no Controller service (a PersistentVolume names its
// bucket), so csi-sanity's "create a volume" is answered here with what a
// static PersistentVolume holds, its name and its attributes. Only the
// Node tests that need a volume ask for one; the Controller tests are
// skipped (docs/CSI.md). csi-sanity asks the Identity service of this
// endpoint too: it answers with the driver's own answers.
type staticVolumes struct {
	csi.UnimplementedControllerServer
	csi.UnimplementedIdentityServer
	attrs  map[string]string
	driver csi.IdentityClient
}

func (s *staticVolumes) GetPluginInfo(ctx context.Context, req *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return s.driver.GetPluginInfo(ctx, req)
}

func (s *staticVolumes) GetPluginCapabilities(ctx context.Context, req *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return s.driver.GetPluginCapabilities(ctx, req)
}

func (s *staticVolumes) Probe(ctx context.Context, req *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return s.driver.Probe(ctx, req)
}

func (s *staticVolumes) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is missing")
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: req.GetName(), VolumeContext: s.attrs}}, nil
}

func (s *staticVolumes) DeleteVolume(context.Context, *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	return &csi.DeleteVolumeResponse{}, nil
}

// serveStaticVolumes serves s on a unix socket in dir until the test ends.
func serveStaticVolumes(t *testing.T, dir string, s *staticVolumes) string {
	t.Helper()
	path := filepath.Join(dir, "static.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	csi.RegisterControllerServer(srv, s)
	csi.RegisterIdentityServer(srv, s)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return "unix://" + path
}

// sanityAloneEnv, set, runs TestCSISanity against a driver that mounts
// by itself (a child process of TestCSISanityOfADriverWithoutAMounter).
const sanityAloneEnv = "FENCEFS_TEST_CSI_SANITY_ALONE"

// TestCSISanity runs the Kubernetes CSI conformance suite (csi-sanity,
// kubernetes-csi/csi-test) against `fencefs csi` as the node plugin's pod
// runs it, asking a mounter (`fencefs csi mounter`, another process) to
// mount: Identity and Node tests on real mounts of the gateway's bucket.
// It checks its own counts, so that a suite that skipped everything
// cannot pass, and fails on any test csi-sanity skips while running it.
func TestCSISanity(t *testing.T) {
	n := newNode(t)
	var dc driverConfig
	if os.Getenv(sanityAloneEnv) == "" {
		dc.mounter = n.startMounter(t).sock
	}
	d := n.startDriverWith(t, dc)
	dir := filepath.Dir(n.sock)
	secrets := filepath.Join(dir, "secrets.yaml")
	yaml := fmt.Sprintf("NodePublishVolumeSecret:\n  AWS_ACCESS_KEY_ID: %q\n  AWS_SECRET_ACCESS_KEY: %q\n", n.gw.AccessKey, n.gw.SecretKey)
	if err := os.WriteFile(secrets, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + n.sock
	cfg.ControllerAddress = serveStaticVolumes(t, dir, &staticVolumes{attrs: n.attrs(), driver: d.IdentityClient})
	cfg.TargetPath = filepath.Join(n.kubelet, "target")
	cfg.StagingPath = filepath.Join(n.kubelet, "staging")
	cfg.SecretsFile = secrets
	cfg.TestVolumeAccessType = "mount"

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
	t.Logf("csi-sanity (mounter %q): %d passed, %d left out, %d failed", dc.mounter, passed, leftOut, failed)
	// The Identity and Node tests that apply to a node driver without
	// staging: fewer passing means the suite stopped testing something.
	if passed < wantSanityPassed || failed > 0 {
		t.Errorf("csi-sanity: %d passed (want at least %d), %d failed", passed, wantSanityPassed, failed)
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
	wantSanityPassed  = 16
	wantSanityLeftOut = 87
)

// notOffered are the csi-sanity tests of what the driver leaves out on
// purpose (docs/CSI.md), as ginkgo skip patterns (matched anywhere in a
// test's text, as ginkgo does): they are never run, so
// that a test csi-sanity skips at run time is always a failure. There is
// no Controller and no group snapshots (volumes are static), no staging
// (a mount per publish), no expansion (a bucket has no size), no health
// reports; and the Node flow tests that need the driver's own Controller
// to create a volume (the same flow is
// TestPublishMountsTheBucketReadOnlyUntilBoundAndEveryCallIsIdempotent).
var notOffered = []string{
	`\[Controller Server\]`,
	`GroupController Service `,
	`Node Service (NodeStageVolume|NodeUnstageVolume|NodeExpandVolume|NodeGetVolumeHealth|NodeGetStorageHealth) `,
	`Node Service should (work|be idempotent)`,
}

// TestCSISanityOfADriverWithoutAMounter runs TestCSISanity against a
// driver that mounts by itself, in a child test process: csi-sanity
// (ginkgo) runs once per process. The child runs TestCSISanity alone
// (-test.run), so this test never runs in it.
func TestCSISanityOfADriverWithoutAMounter(t *testing.T) {
	harness.RequireFUSE(t)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestCSISanity$", "-test.v", "-test.count", "1")
	cmd.Env = append(os.Environ(), sanityAloneEnv+"=1", "FENCEFS_BIN="+harness.Binary(t))
	out, err := cmd.CombinedOutput()
	counts := regexp.MustCompile(`csi-sanity \(mounter ""\): [0-9]+ passed, [0-9]+ left out, [0-9]+ failed`).Find(out)
	if err != nil || counts == nil {
		t.Fatalf("TestCSISanity without a mounter: %v; counts %q; output:\n%s", err, counts, out)
	}
	t.Logf("%s", counts)
}
