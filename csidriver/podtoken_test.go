package csidriver

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A token as kubelet gives them: a JWT, which must never show.
const podToken = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6ZGVmYXVsdDphcHAifQ.c2lnbmF0dXJl"

// tokensJSON is the volume context value of tokens by audience.
func tokensJSON(byAudience map[string]string) string {
	m := map[string]map[string]string{}
	for aud, tok := range byAudience {
		m[aud] = map[string]string{"token": tok, "expirationTimestamp": "2030-01-01T00:00:00Z"}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// podPublishReq is a valid publish of a volume mounted with its pod's
// token for audience sts, changed by edit.
func podPublishReq(edit func(r *csi.NodePublishVolumeRequest)) *csi.NodePublishVolumeRequest {
	return publishReq(func(r *csi.NodePublishVolumeRequest) {
		r.Secrets = nil
		r.VolumeContext[AttrAuthenticationSource] = AuthPod
		r.VolumeContext["role_arn"] = "arn:minio:iam:::role/x"
		r.VolumeContext[tokensKey] = tokensJSON(map[string]string{"sts": podToken})
		if edit != nil {
			edit(r)
		}
	})
}

func TestAPodTokenVolumeRefusesWithOneLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(r *csi.NodePublishVolumeRequest)
		code codes.Code
		want string
	}{
		{"no tokenRequests in the CSIDriver", func(r *csi.NodePublishVolumeRequest) { delete(r.VolumeContext, tokensKey) },
			codes.FailedPrecondition, "asks for its pod's service-account token (authenticationSource: pod) but the publish carries none"},
		{"tokens that are not JSON", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[tokensKey] = `{"sts": ` + podToken },
			codes.InvalidArgument, "is not JSON of the form"},
		{"tokens of the wrong shape", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[tokensKey] = `{"sts": "` + podToken + `"}` },
			codes.InvalidArgument, "is not JSON of the form"},
		{"the audience asked is not given", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[AttrTokenAudience] = "minio" },
			codes.FailedPrecondition, `token for audience "minio" is not in the publish (it has: sts)`},
		{"two audiences and none asked", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeContext[tokensKey] = tokensJSON(map[string]string{"sts": podToken, "vault": podToken + "x"})
		}, codes.InvalidArgument, "holds tokens for 2 audiences (sts, vault): give the volume a tokenAudience"},
		{"an empty token", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeContext[tokensKey] = tokensJSON(map[string]string{"sts": " "})
		},
			codes.InvalidArgument, `the token for audience "sts" is empty`},
		{"a secret as well", func(r *csi.NodePublishVolumeRequest) {
			r.Secrets = map[string]string{SecretAccessKeyID: "AKIDEXAMPLE", SecretSecretAccessKey: "wJalrXUtnFEMI-secret"}
		}, codes.InvalidArgument, "is mounted with its pod's service-account token: give it no secret"},
		{"another source", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[AttrAuthenticationSource] = "node" },
			codes.InvalidArgument, `authenticationSource "node" is not accepted (accepted: driver, pod)`},
		{"an audience without the pod source", func(r *csi.NodePublishVolumeRequest) {
			r.VolumeContext[AttrAuthenticationSource] = AuthDriver
			r.VolumeContext[AttrTokenAudience] = "sts"
		}, codes.InvalidArgument, "tokenAudience is given without authenticationSource: pod"},
		{"a token file of the volume's choosing", func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["web_identity_token_file"] = "/etc/shadow" },
			codes.InvalidArgument, "web_identity_token_file is not accepted: the driver writes the pod's service-account token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parsePublish(podPublishReq(tc.edit), []string{"AWS_ACCESS_KEY_ID=driver-key", "AWS_SECRET_ACCESS_KEY=driver-secret"})
			st, _ := status.FromError(err)
			if st.Code() != tc.code || !strings.Contains(st.Message(), tc.want) {
				t.Fatalf("got %v %q; want %v with %q", st.Code(), st.Message(), tc.code, tc.want)
			}
			if strings.Contains(st.Message(), "\n") || strings.Contains(st.Message(), "eyJ") {
				t.Errorf("the message is not one line without the token: %q", st.Message())
			}
		})
	}
}

func TestAPodTokenVolumeIsMountedByWebIdentityAndNeverShowsTheToken(t *testing.T) {
	s, err := parsePublish(podPublishReq(nil), []string{"AWS_ACCESS_KEY_ID=driver-key", "AWS_SECRET_ACCESS_KEY=driver-secret"})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Env) != 0 || s.Token != podToken || s.Audience != "*" {
		t.Fatalf("env %q, token %q, audience %q: want no keys (not the driver's either), the pod's token, any audience", s.Env, s.Token, s.Audience)
	}
	if s.Options["role_arn"] != "arn:minio:iam:::role/x" {
		t.Errorf("options %v: want the role_arn attribute passed on", s.Options)
	}
	for k := range s.Options {
		if podAuthAttrs[k] || strings.Contains(k, "/") {
			t.Errorf("option %s is not a fencefs -o option", k)
		}
	}
	s.TokenFile = "/state/volumes/v/token"
	args := strings.Join(s.mountArgs("/c", "/l"), " ")
	if !strings.Contains(args, ",web_identity_token_file=/state/volumes/v/token") {
		t.Errorf("the command line %q does not name the token file", args)
	}
	if strings.Contains(args+s.Identity(), podToken) {
		t.Errorf("the command line or identity shows the token: %s %s", args, s.Identity())
	}

	// A publish again with a fresh token is the same publish; with the
	// driver's credentials, or another audience, it is not.
	fresh, err := parsePublish(podPublishReq(func(r *csi.NodePublishVolumeRequest) {
		r.VolumeContext[tokensKey] = tokensJSON(map[string]string{"sts": podToken + "fresh"})
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if fresh.Identity() != s.Identity() || fresh.Token == s.Token {
		t.Errorf("a fresh token: identity %s vs %s, token changed %v; want the same publish with the new token", fresh.Identity(), s.Identity(), fresh.Token != s.Token)
	}
	other, err := parsePublish(podPublishReq(func(r *csi.NodePublishVolumeRequest) { r.VolumeContext[AttrTokenAudience] = "sts" }), nil)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := parsePublish(publishReq(func(r *csi.NodePublishVolumeRequest) { r.VolumeContext["role_arn"] = "arn:minio:iam:::role/x" }), nil)
	if err != nil {
		t.Fatal(err)
	}
	if other.Identity() == s.Identity() || keys.Identity() == s.Identity() {
		t.Errorf("identities %s, %s and %s: want three publishes", s.Identity(), other.Identity(), keys.Identity())
	}
}

func TestTheTokenFileIsReplacedWholeAndReadableByRootOnly(t *testing.T) {
	dir := t.TempDir()
	if _, err := checkTokenFile(dir); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("no token file: %v; want FailedPrecondition", err)
	}
	for _, tok := range []string{podToken, podToken + ".renewed"} {
		if err := writeTokenFile(dir, tok); err != nil {
			t.Fatal(err)
		}
		path, err := checkTokenFile(dir)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || string(b) != tok {
			t.Fatalf("the token file holds %q (%v); want the token written", b, err)
		}
		fi, _ := os.Stat(path)
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("the token file's mode is %v; want 0600", fi.Mode())
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if err := os.Chmod(filepath.Join(dir, tokenFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := checkTokenFile(dir); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a token file others can read: %v; want FailedPrecondition", err)
	}
}

func TestAClassAskingForPodTokensIsCheckedAndPassedOn(t *testing.T) {
	params := map[string]string{ParamBucket: "data", AttrAuthenticationSource: AuthPod, AttrTokenAudience: "sts.amazonaws.com", "role_arn": "arn:aws:iam::1:role/r"}
	p, err := parseClassParams(params)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{AttrAuthenticationSource, AttrTokenAudience, "role_arn"} {
		if p.Attrs[k] != params[k] {
			t.Errorf("attribute %s=%q; want %q passed on to the volume", k, p.Attrs[k], params[k])
		}
	}
	params[AttrAuthenticationSource] = "serviceAccount"
	if err := CheckClassParameters(params); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "parameter authenticationSource") {
		t.Errorf("an unknown source: %v; want InvalidArgument naming the parameter", err)
	}
}
