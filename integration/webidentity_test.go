package integration

// Web identity end to end (issue 42): a real kube-apiserver is the OIDC
// issuer — its service-account tokens, its discovery document and JWKS,
// served anonymously over its own CA — and a real MinIO, configured with
// it as an OpenID provider, exchanges a projected-style token for
// temporary credentials (AssumeRoleWithWebIdentity) under a role policy.
// Both a store and the mount binary use those credentials only: no keys.

import (
	"context"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
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
	"github.com/minio/minio-go/v7/pkg/credentials"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// webIdentityAudience is the audience of the service-account token and
// MinIO's OpenID client ID: MinIO accepts a token whose aud holds it.
const webIdentityAudience = "fencefs-minio"

// minioRoleARN is the role ARN MinIO gives an OpenID provider configured
// with a role policy: arn:minio:iam:REGION::role/ followed by the
// unpadded base64url SHA-1 of the client ID (MinIO's
// internal/config/identity/openid, LookupConfig).
func minioRoleARN(region, clientID string) string {
	h := sha1.Sum([]byte(clientID))
	return "arn:minio:iam:" + region + "::role/" + base64.RawURLEncoding.EncodeToString(h[:])
}

// kubeIssuer starts kube-apiserver, lets anyone read its OIDC discovery
// document and JWKS (the system:service-account-issuer-discovery role
// bound to system:unauthenticated, as a cluster serving its issuer to
// an outside identity provider does), and returns the server, an admin
// client and the discovery document's URL once it answers anonymously.
func kubeIssuer(t *testing.T, ctx context.Context) (*kubeserver.Server, kubernetes.Interface, string) {
	t.Helper()
	srv := kubeserver.ForTest(t)
	path, err := srv.Kubeconfig(kubeserver.Admin)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	kc := kubernetes.NewForConfigOrDie(rc)
	_, err = kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "service-account-issuer-discovery-anonymous"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:service-account-issuer-discovery"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:unauthenticated"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("bind the issuer discovery role to system:unauthenticated: %v", err)
	}
	ca, err := os.ReadFile(srv.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	discovery := srv.URL + "/.well-known/openid-configuration"
	// RBAC's cache takes the new binding within a second or so.
	var last string
	for deadline := time.Now().Add(15 * time.Second); ; {
		resp, err := client.Get(discovery)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				var doc struct {
					JWKSURI string `json:"jwks_uri"`
				}
				if err := json.Unmarshal(body, &doc); err != nil {
					t.Fatalf("discovery document %s: %v", body, err)
				}
				if !strings.HasPrefix(doc.JWKSURI, srv.URL+"/") {
					t.Fatalf("discovery document's jwks_uri %q is not at %s: MinIO could not fetch the keys", doc.JWKSURI, srv.URL)
				}
				return srv, kc, discovery
			}
			last = resp.Status + ": " + strings.TrimSpace(string(body))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("anonymous GET %s: %s", discovery, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// serviceAccountToken creates the service account name in default and
// returns a token of it for audience (TokenRequest, as the kubelet's
// projected volumes and the CSI driver's tokenRequests get them).
func serviceAccountToken(t *testing.T, ctx context.Context, kc kubernetes.Interface, name, audience string) string {
	t.Helper()
	if _, err := kc.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service account: %v", err)
	}
	tr, err := kc.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest: %v", err)
	}
	return tr.Status.Token
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
	srv, kc, discovery := kubeIssuer(t, ctx)
	gw := minioTrusting(t, ctx, discovery, srv.CAFile)
	bucket := gateway.NewBucket(t, gw)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(serviceAccountToken(t, ctx, kc, "app", webIdentityAudience)), 0o600); err != nil {
		t.Fatal(err)
	}
	role := minioRoleARN(gw.Region, webIdentityAudience)
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
		if err := os.WriteFile(other, []byte(serviceAccountToken(t, ctx, kc, "other", "https://kubernetes.default.svc.cluster.local")), 0o600); err != nil {
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

// waitWebIdentity waits (20 s at most) until MinIO's STS exchanges the
// token: MinIO loads its IAM subsystem, and with it the OpenID provider's
// discovery document and JWKS, in the background after it starts serving
// S3, and retries a provider it could not reach.
func waitWebIdentity(t *testing.T, gw *gateway.Gateway, tokenFile, role string) {
	t.Helper()
	p := &credentials.STSWebIdentity{
		Client:      &http.Client{Timeout: 5 * time.Second},
		STSEndpoint: gw.Endpoint,
		RoleARN:     role,
		GetWebIDTokenExpiry: func() (*credentials.WebIdentityToken, error) {
			b, err := os.ReadFile(tokenFile)
			return &credentials.WebIdentityToken{Token: string(b)}, err
		},
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		_, err := p.Retrieve()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("MinIO's STS does not exchange the service-account token: %v\nMinIO log:\n%s", err, minioLog(gw))
		}
		time.Sleep(200 * time.Millisecond)
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
