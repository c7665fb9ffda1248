package csidriver

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// mountCap is a mount capability with mode and flags.
func mountCap(mode csi.VolumeCapability_AccessMode_Mode, flags ...string) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: flags}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

// publishReq is a valid request, changed by edit.
func publishReq(edit func(r *csi.NodePublishVolumeRequest)) *csi.NodePublishVolumeRequest {
	r := &csi.NodePublishVolumeRequest{
		VolumeId:         "vol-1",
		TargetPath:       "/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv/mount",
		VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER),
		VolumeContext:    map[string]string{AttrBucket: "data", "endpoint": "http://127.0.0.1:9000"},
		Secrets:          map[string]string{SecretAccessKeyID: "AKIDEXAMPLE", SecretSecretAccessKey: "wJalrXUtnFEMI-secret"},
	}
	if edit != nil {
		edit(r)
	}
	return r
}

func TestParsePublishRefusesWhatCannotBeMountedInOneLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(r *csi.NodePublishVolumeRequest)
		want string
	}{
		{"no volume id", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "" }, "volume_id is missing"},
		{"no target path", func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "" }, "target_path is missing"},
		{"no capability", func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability = nil }, "volume_capability is missing"},
		{"block access", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		}, "block access is not supported"},
		{"no access mode", func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability.AccessMode = nil }, "no access mode"},
		{"no bucket", func(r *csi.NodePublishVolumeRequest) { delete(r.VolumeContext, AttrBucket) }, "volume attribute bucketName is missing"},
		{"bucket with a prefix", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[AttrBucket] = "data/app" }, "give the bucket alone"},
		{"a bucket that reads as a flag", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[AttrBucket] = "--token=9" }, "is not a bucket name"},
		{"a relative target path", func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "pods/p/mount" }, `target_path "pods/p/mount" is not an absolute path`},
		{"a token", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["token"] = "7" }, "volume attribute token is not accepted: the volume comes up without a token"},
		{"a token file by key", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["fence.token_file"] = "/t" }, "fence.token_file is not accepted"},
		{"a cache dir", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["cache_dir"] = "/x" }, "cache_dir is not accepted"},
		{"a secret as an attribute", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["secret_key"] = "s3cr3t-value" }, "credentials go in the volume's secret"},
		{"a secret as a mount option", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability = mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "access_key=AKID")
		}, "mount option access_key is not accepted"},
		{"an option twice", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeContext["uid"] = "1000"
			r.VolumeCapability = mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "uid=2000")
		}, "mount option uid=2000 contradicts uid=1000"},
		{"a list in a value", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["meta_ttl"] = "5s,attr_ttl=1s" }, "is not an option"},
		{"an unknown secret key", func(r *csi.NodePublishVolumeRequest) { r.Secrets["password"] = "hunter2-long" }, `secret key "password" is not accepted`},
		{"an access key alone", func(r *csi.NodePublishVolumeRequest) { delete(r.Secrets, SecretSecretAccessKey) }, "needs both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := publishReq(tc.edit)
			_, err := parsePublish(req, nil)
			st, _ := status.FromError(err)
			if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.want) {
				t.Fatalf("got %v %q; want InvalidArgument with %q", st.Code(), st.Message(), tc.want)
			}
			if strings.Contains(st.Message(), "\n") {
				t.Errorf("message is not one line: %q", st.Message())
			}
			for _, v := range req.Secrets {
				if strings.Contains(st.Message(), v) {
					t.Errorf("message shows a secret: %q", st.Message())
				}
			}
		})
	}
}

func TestParsePublishMapsAttributesFlagsAndModesToMountOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(r *csi.NodePublishVolumeRequest)
		want map[string]string
	}{
		{"attributes; allow_other by default", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeContext["prefix"] = "app"
			r.VolumeContext["fence_mode"] = "fast"
		}, map[string]string{"endpoint": "http://127.0.0.1:9000", "prefix": "app", "fence_mode": "fast", "allow_other": "true"}},
		{"the CO's own keys are ignored", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeContext["csi.storage.k8s.io/pod.name"] = "web-0"
			r.VolumeContext["csi.storage.k8s.io/ephemeral"] = "false"
		}, map[string]string{"endpoint": "http://127.0.0.1:9000", "allow_other": "true"}},
		{"mount flags, ro, and allow_other turned off", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability = mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, "uid=1000,gid=1000", "ro", "allow_other=false")
		}, map[string]string{"endpoint": "http://127.0.0.1:9000", "uid": "1000", "gid": "1000", "read_only": "true", "allow_other": "false"}},
		{"readonly publish", func(r *csi.NodePublishVolumeRequest) { r.Readonly = true },
			map[string]string{"endpoint": "http://127.0.0.1:9000", "read_only": "true", "allow_other": "true"}},
		{"a read-only access mode wins over read_only=false", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeContext["read_only"] = "false"
			r.VolumeCapability = mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)
		}, map[string]string{"endpoint": "http://127.0.0.1:9000", "read_only": "true", "allow_other": "true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parsePublish(publishReq(tc.edit), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Options) != len(tc.want) {
				t.Errorf("options %v; want %v", s.Options, tc.want)
			}
			for k, v := range tc.want {
				if s.Options[k] != v {
					t.Errorf("option %s=%q; want %q (all: %v)", k, s.Options[k], v, s.Options)
				}
			}
			if s.Bucket != "data" {
				t.Errorf("bucket %q", s.Bucket)
			}
		})
	}
}

func TestCredentialsReachOnlyTheEnvironment(t *testing.T) {
	req := publishReq(func(r *csi.NodePublishVolumeRequest) { r.Secrets[SecretSessionToken] = "FwoGZXIvYXdzEXAMPLETOKEN" })
	s, err := parsePublish(req, []string{"AWS_ACCESS_KEY_ID=driver-key", "AWS_SECRET_ACCESS_KEY=driver-secret"})
	if err != nil {
		t.Fatal(err)
	}
	wantEnv := []string{"AWS_ACCESS_KEY_ID=AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI-secret", "AWS_SESSION_TOKEN=FwoGZXIvYXdzEXAMPLETOKEN"}
	if strings.Join(s.Env, " ") != strings.Join(wantEnv, " ") {
		t.Errorf("env %q; want %q (the volume's secret, not the driver's)", s.Env, wantEnv)
	}
	shown := strings.Join(s.mountArgs("/c", "/l"), " ") + " " + s.Identity()
	for _, v := range req.Secrets {
		if strings.Contains(shown, v) {
			t.Errorf("the command line or identity shows a credential: %s", shown)
		}
	}
}

func TestAVolumeWithoutASecretUsesTheDriversCredentials(t *testing.T) {
	s, err := parsePublish(publishReq(func(r *csi.NodePublishVolumeRequest) { r.Secrets = nil }),
		[]string{"HOME=/root", "AWS_ACCESS_KEY_ID=driver-key", "AWS_SECRET_ACCESS_KEY=driver-secret", "AWS_REGION=eu-west-1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(s.Env, " "); got != "AWS_ACCESS_KEY_ID=driver-key AWS_SECRET_ACCESS_KEY=driver-secret" {
		t.Errorf("env %q; want the driver's two credential variables only", got)
	}
}

func TestIdentityDiffersForEveryArgumentButTheSecret(t *testing.T) {
	base, err := parsePublish(publishReq(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(r *csi.NodePublishVolumeRequest)
		same bool
	}{
		{"another secret", func(r *csi.NodePublishVolumeRequest) { r.Secrets[SecretSecretAccessKey] = "other-secret" }, true},
		{"the CO's pod keys", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["csi.storage.k8s.io/pod.uid"] = "u" }, true},
		{"another volume id", func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "vol-2" }, false},
		{"another bucket", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[AttrBucket] = "logs" }, false},
		{"another attribute", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["meta_ttl"] = "9s" }, false},
		{"read-only", func(r *csi.NodePublishVolumeRequest) { r.Readonly = true }, false},
		{"another access mode", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability = mountCap(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parsePublish(publishReq(tc.edit), nil)
			if err != nil {
				t.Fatal(err)
			}
			if (s.Identity() == base.Identity()) != tc.same {
				t.Errorf("identity %s vs %s: same=%v, want %v", s.Identity(), base.Identity(), !tc.same, tc.same)
			}
		})
	}
}

func TestMountFailureCodeFollowsWhatFencefsPrinted(t *testing.T) {
	for _, tc := range []struct {
		exit int
		line string
		want codes.Code
	}{
		{2, "fencefs: mount: -o fenc_mode: unknown mount option (accepted: …)", codes.InvalidArgument},
		{1, `fencefs: mount: access denied to bucket "data" at http://127.0.0.1:9000 (check the access key and secret; credentials from $AWS_ACCESS_KEY_ID)`, codes.PermissionDenied},
		{1, "fencefs: mount: cannot reach http://127.0.0.1:1: connection refused", codes.Unavailable},
		{1, `fencefs: mount: bucket "nope" does not exist at http://127.0.0.1:9000`, codes.NotFound},
		{1, "fencefs: mount: cannot mount at /x: /dev/fuse is missing", codes.Internal},
		{-1, "", codes.Internal},
	} {
		if got := mountFailureCode(tc.exit, tc.line); got != tc.want {
			t.Errorf("exit %d %q: %v; want %v", tc.exit, tc.line, got, tc.want)
		}
	}
}

func TestPidOfMountSummary(t *testing.T) {
	for _, tc := range []struct {
		line string
		pid  int
		ok   bool
	}{
		{"mounted data at /t (no token: writes fail with EROFS until one is bound; pid 4242); stop with: fusermount3 -u /t; log: /l\n", 4242, true},
		{"mounted data/app at /t (read-only; pid 7); stop with: fusermount3 -u /t; no log", 7, true},
		{"mounted data at /t", 0, false},
		{"; pid 0); stop with: ", 0, false},
	} {
		pid, ok := PidOfMountSummary(tc.line)
		if pid != tc.pid || ok != tc.ok {
			t.Errorf("%q: %d %v; want %d %v", tc.line, pid, ok, tc.pid, tc.ok)
		}
	}
}

func TestSocketPathAcceptsUnixEndpointsOnly(t *testing.T) {
	for _, tc := range []struct {
		endpoint, path string
		ok             bool
	}{
		{"unix:///csi/csi.sock", "/csi/csi.sock", true},
		{"unix:/csi/csi.sock", "/csi/csi.sock", true},
		{"unix://csi/csi.sock", "", false},
		{"unix:csi.sock", "", false},
		{"tcp://127.0.0.1:10000", "", false},
		{"/csi/csi.sock", "", false},
	} {
		path, ok := socketPath(tc.endpoint)
		if path != tc.path || ok != tc.ok {
			t.Errorf("%q: %q %v; want %q %v", tc.endpoint, path, ok, tc.path, tc.ok)
		}
	}
}

func TestProcStartTellsALiveProcessFromAnEndedOneAndNone(t *testing.T) {
	start, ended, ok := procStart(os.Getpid())
	if !ok || ended || start == 0 {
		t.Fatalf("own process: start %d ended %v ok %v", start, ended, ok)
	}
	if !(record{Pid: os.Getpid(), Start: start}).alive() {
		t.Error("own process is not alive")
	}
	if (record{Pid: os.Getpid(), Start: start + 1}).alive() {
		t.Error("a reused pid (another start time) is alive")
	}
	if _, _, ok := procStart(0); ok {
		t.Error("pid 0 exists")
	}
	// A child that exited and is not reaped yet is a zombie: ended.
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, ended, ok := procStart(cmd.Process.Pid)
		if ok && ended {
			break
		}
		if !ok || time.Now().After(deadline) {
			t.Fatalf("an exited child not yet reaped: ended %v ok %v", ended, ok)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
