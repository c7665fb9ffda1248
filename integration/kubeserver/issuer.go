package kubeserver

// The API server as an OIDC issuer: its service-account tokens, its
// discovery document and JWKS, which an identity provider outside the
// cluster (MinIO's OpenID configuration, AWS IAM's OIDC provider) fetches
// anonymously over the server's own CA.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Client is a client of the server as user (Admin or Restricted).
func (s *Server) Client(user string) (kubernetes.Interface, error) {
	path, err := s.Kubeconfig(user)
	if err != nil {
		return nil, err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}

// ServeIssuerAnonymously lets anyone read the server's OIDC discovery
// document and JWKS (the system:service-account-issuer-discovery role
// bound to system:unauthenticated, as a cluster serving its issuer to an
// outside identity provider does) and returns the discovery document's
// URL once it answers anonymously, its keys at the same server.
func (s *Server) ServeIssuerAnonymously(ctx context.Context) (string, error) {
	kc, err := s.Client(Admin)
	if err != nil {
		return "", err
	}
	_, err = kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "service-account-issuer-discovery-anonymous"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:service-account-issuer-discovery"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:unauthenticated"}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("bind the issuer discovery role to system:unauthenticated: %w", err)
	}
	ca, err := os.ReadFile(s.CAFile)
	if err != nil {
		return "", err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	discovery := s.URL + "/.well-known/openid-configuration"
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
					return "", fmt.Errorf("discovery document %s: %v", body, err)
				}
				if !strings.HasPrefix(doc.JWKSURI, s.URL+"/") {
					return "", fmt.Errorf("discovery document's jwks_uri %q is not at %s: an identity provider could not fetch the keys", doc.JWKSURI, s.URL)
				}
				return discovery, nil
			}
			last = resp.Status + ": " + strings.TrimSpace(string(body))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("anonymous GET %s: %s", discovery, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ServiceAccountToken creates the service account namespace/name if it is
// missing and returns a token of it for audience, valid for ttl
// (TokenRequest, as kubelet gets them for projected volumes and for a
// CSIDriver's tokenRequests).
func (s *Server) ServiceAccountToken(ctx context.Context, namespace, name, audience string, ttl time.Duration) (string, error) {
	kc, err := s.Client(Admin)
	if err != nil {
		return "", err
	}
	_, err = kc.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create service account %s/%s: %w", namespace, name, err)
	}
	secs := int64(ttl / time.Second)
	tr, err := kc.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("TokenRequest of %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}
