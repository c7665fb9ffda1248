package integration

// Web identity end to end (issue 42): a real kube-apiserver is the OIDC
// issuer — its service-account tokens, its discovery document and JWKS,
// served anonymously over its own CA — and a real MinIO, configured with
// it as an OpenID provider, exchanges a projected-style token for
// temporary credentials (AssumeRoleWithWebIdentity) under a role policy.
// Both a store and the mount binary use those credentials only: no keys.

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/fencefs/fencefs/integration/kubeserver"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/s3"
	"github.com/minio/minio-go/v7"
)

// webIdentityAudience is the audience of the service-account token and
// MinIO's OpenID client ID: MinIO accepts a token whose aud holds it.
const webIdentityAudience = "fencefs-minio"

// kubeIssuer starts kube-apiserver, lets anyone read its OIDC discovery
// document and JWKS, and returns the server and the discovery document's
// URL once it answers anonymously.
func kubeIssuer(t *testing.T, ctx context.Context) (*kubeserver.Server, string) {
	t.Helper()
	srv := kubeserver.ForTest(t)
	discovery, err := srv.ServeIssuerAnonymously(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return srv, discovery
}

// serviceAccountToken creates the service account name in default and
// returns a token of it for audience (TokenRequest, as the kubelet's
// projected volumes and the CSI driver's tokenRequests get them).
func serviceAccountToken(t *testing.T, ctx context.Context, srv *kubeserver.Server, name, audience string) string {
	t.Helper()
	tok, err := srv.ServiceAccountToken(ctx, "default", name, audience, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// minioTrusting starts MinIO with the discovery document's issuer as its
// OpenID provider (client ID webIdentityAudience, role policy readwrite),
// trusting caFile for it.
func minioTrusting(t *testing.T, ctx context.Context, discovery, caFile string) *gateway.Gateway {
	t.Helper()
	if _, err := gateway.FindMinIO(); err != nil {
		gateway.SkipOrFail(t, "%v", err)
	}
	gw, err := gateway.StartMinIO(ctx, gateway.MinIOOptions{Dir: t.TempDir(), Env: []string{
		// MinIO's root CAs are the system's (SSL_CERT_FILE replaces them)
		// and those in its certs directory's CAs/.
		"SSL_CERT_FILE=" + caFile,
		"MINIO_IDENTITY_OPENID_CONFIG_URL=" + discovery,
		"MINIO_IDENTITY_OPENID_CLIENT_ID=" + webIdentityAudience,
		"MINIO_IDENTITY_OPENID_ROLE_POLICY=readwrite",
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

func TestWebIdentityWithKubeServiceAccountTokenOnMinIO(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, discovery := kubeIssuer(t, ctx)
	gw := minioTrusting(t, ctx, discovery, srv.CAFile)
	bucket := gateway.NewBucket(t, gw)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(serviceAccountToken(t, ctx, srv, "app", webIdentityAudience)), 0o600); err != nil {
		t.Fatal(err)
	}
	role := gateway.MinIORoleARN(gw.Region, webIdentityAudience)
	waitWebIdentity(t, gw, tokenFile, role)
	for _, e := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "MINIO_ROOT_USER", "MINIO_ACCESS_KEY"} {
		t.Setenv(e, "")
	}

	t.Run("store", func(t *testing.T) {
		s, err := s3.New(ctx, s3.Config{
			Endpoint: gw.Endpoint, Bucket: bucket, Region: gw.Region, PathStyle: true,
			WebIdentityTokenFile: tokenFile, RoleARN: role, STSEndpoint: gw.Endpoint,
		})
		if err != nil {
			t.Fatalf("s3.New with web identity: %v\nMinIO log:\n%s", err, minioLog(gw))
		}
		defer s.Close()
		if src := s.CredentialsSource(); !strings.Contains(src, "web identity") {
			t.Errorf("credentials source %q, want web identity", src)
		}
		body := "written with a service-account token"
		if _, err := s.Put(ctx, "k", strings.NewReader(body), int64(len(body)), objstore.PutOptions{Cond: objstore.Condition{IfNoneMatch: true}}); err != nil {
			t.Fatalf("put with web identity credentials: %v\nMinIO log:\n%s", err, minioLog(gw))
		}
		if got := rootRead(t, ctx, gw, bucket, "k"); got != body {
			t.Fatalf("object k holds %q, want %q", got, body)
		}
	})

	// MinIO checks the token, not only its shape: one for another
	// audience (the default, the API server's own) is refused.
	t.Run("another audience", func(t *testing.T) {
		other := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(other, []byte(serviceAccountToken(t, ctx, srv, "other", "https://kubernetes.default.svc.cluster.local")), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := s3.New(ctx, s3.Config{
			Endpoint: gw.Endpoint, Bucket: bucket, Region: gw.Region, PathStyle: true,
			WebIdentityTokenFile: other, RoleARN: role, STSEndpoint: gw.Endpoint,
		})
		if err == nil {
			s.Close()
			t.Fatal("a token for another audience was accepted")
		}
		if !strings.Contains(err.Error(), "must match configured OpenID Client ID") {
			t.Fatalf("refused with %v, want MinIO's audience check", err)
		}
	})

	t.Run("mount", func(t *testing.T) {
		fs := harness.MountWith(t, gw, bucket, harness.Options{Env: []string{
			"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=",
			"AWS_WEB_IDENTITY_TOKEN_FILE=" + tokenFile, "AWS_ROLE_ARN=" + role, "AWS_ENDPOINT_URL_STS=" + gw.Endpoint,
		}}, "--token", "1")
		if log := fs.Log(); !strings.Contains(log, "web identity (token "+tokenFile) {
			t.Fatalf("the mount does not say it uses web identity with %s; log:\n%s", tokenFile, log)
		}
		body := "written through FUSE with a service-account token\n"
		if err := os.WriteFile(fs.Path("report.txt"), []byte(body), 0o644); err != nil {
			t.Fatalf("write through the mount: %v\nlog:\n%s", err, fs.Log())
		}
		if err := fs.Unmount(); err != nil {
			t.Fatal(err)
		}
		if tok, _ := os.ReadFile(tokenFile); strings.Contains(fs.Log(), string(tok)) {
			t.Error("the mount's log holds the service-account token")
		}
		if got := rootRead(t, ctx, gw, bucket, "report.txt"); got != body {
			t.Fatalf("report.txt holds %q, want %q", got, body)
		}
	})
}

// waitWebIdentity waits until MinIO's STS exchanges the token in
// tokenFile (gateway.WaitWebIdentity).
func waitWebIdentity(t *testing.T, gw *gateway.Gateway, tokenFile, role string) {
	t.Helper()
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.WaitWebIdentity(context.Background(), string(tok), role); err != nil {
		t.Fatalf("%v\nMinIO log:\n%s", err, minioLog(gw))
	}
}

// rootRead reads key with the root keys, as any S3 tool would.
func rootRead(t *testing.T, ctx context.Context, gw *gateway.Gateway, bucket, key string) string {
	t.Helper()
	o, err := gw.Client().GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return string(b)
}

func minioLog(gw *gateway.Gateway) string {
	b, _ := os.ReadFile(gw.LogPath)
	return string(b)
}
