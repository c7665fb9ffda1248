package kubeserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/kubeserver"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func client(t *testing.T, s *kubeserver.Server, user string) kubernetes.Interface {
	t.Helper()
	path, err := s.Kubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(rc)
}

// The admin may read leases; the restricted user, granted nothing, may not.
func TestServerAuthenticatesBothUsersAndAuthorizesByRBAC(t *testing.T) {
	s := kubeserver.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client(t, s, kubeserver.Admin).CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("admin: %v", err)
	}
	if _, err := client(t, s, kubeserver.Restricted).CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("restricted: %v; want Forbidden", err)
	}
}
