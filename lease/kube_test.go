package lease

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore/memstore"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The token of a Kubernetes Lease at its boundaries: a resourceVersion is
// a token when apimachinery's CompareResourceVersion would compare it (a
// positive decimal integer, no leading zero) and it fits an int64.
func TestKubernetesTokenIsAWellFormedResourceVersionFromOneToTheLargest(t *testing.T) {
	src := KubernetesSource("team", "leader")
	for _, tc := range []struct {
		rv   string
		want uint64
		why  string // in the refusal
	}{
		{"1", 1, ""},
		{"42", 42, ""},
		{"9223372036854775807", fencing.MaxToken, ""},
		{"9223372036854775808", 0, "above the largest int64"},
		{"99999999999999999999999", 0, "above the largest int64"},
		{"0", 0, "zero or a leading zero"},
		{"007", 0, "zero or a leading zero"},
		{"", 0, "empty"},
		{"-1", 0, "not a decimal integer"},
		{"+5", 0, "not a decimal integer"},
		{" 5", 0, "not a decimal integer"},
		{"5a", 0, "not a decimal integer"},
		{"MTIz", 0, "not a decimal integer"}, // an opaque, non-etcd storage's
	} {
		got, err := kubeToken(src, tc.rv)
		if tc.why == "" {
			if err != nil || got != tc.want {
				t.Errorf("kubeToken(%q) = %d, %v; want %d", tc.rv, got, err, tc.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("kubeToken(%q) = %d; want a refusal (%s)", tc.rv, got, tc.why)
			continue
		}
		msg := err.Error()
		if !errors.Is(err, fencing.ErrBadToken) || strings.Contains(msg, "\n") ||
			!strings.Contains(msg, tc.why) || !strings.Contains(msg, "Kubernetes Lease team/leader") {
			t.Errorf("kubeToken(%q): %q; want one ErrBadToken line naming the Lease and %q", tc.rv, msg, tc.why)
		}
	}
}

// The bucket's epoch refuses a resourceVersion not above it (another
// cluster, or an etcd restored from a backup), in one line that names the
// Lease.
func TestKubernetesTokenNotAboveTheEpochIsRefusedNamingTheLease(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	g, err := fencing.New(store, fencing.Config{Mode: fencing.ModeStrict})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(ctx)
	if _, err := g.Bind(ctx, 500); err != nil {
		t.Fatal(err)
	}
	src := KubernetesSource("team", "leader")
	if err := CheckTokenFrom(ctx, store, "", src, 501); err != nil {
		t.Errorf("501 above epoch 500: %v", err)
	}
	for _, tok := range []uint64{500, 3} {
		err := CheckTokenFrom(ctx, store, "", src, tok)
		if !errors.Is(err, ErrTokenSource) {
			t.Fatalf("token %d: %v; want ErrTokenSource", tok, err)
		}
		msg := err.Error()
		for _, want := range []string{"the resourceVersion of Kubernetes Lease team/leader", "epoch 500", "another Kubernetes cluster", "--kubernetes-lease"} {
			if !strings.Contains(msg, want) || strings.Contains(msg, "\n") {
				t.Errorf("token %d: %q; want one line with %q", tok, msg, want)
			}
		}
	}
}

func TestKubernetesRefusalsNameTheVerbAndTheResource(t *testing.T) {
	gr := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	forbidden := apierrors.NewForbidden(gr, "leader", errors.New(`User "restricted" cannot update resource "leases" in API group "coordination.k8s.io" in the namespace "team"`))
	err := explainKubeRefusal("update", "team", "leader", forbidden)
	if !errors.Is(err, ErrKubernetesForbidden) {
		t.Fatalf("forbidden: %v; want ErrKubernetesForbidden", err)
	}
	for _, want := range []string{"RBAC forbids update on leases (coordination.k8s.io) in namespace team", `User "restricted" cannot update`, "grant get, create and update"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if err := explainKubeRefusal("get", "team", "leader", apierrors.NewUnauthorized("no")); !errors.Is(err, ErrKubernetesForbidden) || !strings.Contains(err.Error(), "401") {
		t.Errorf("unauthorized: %v", err)
	}
	for _, other := range []error{apierrors.NewConflict(gr, "leader", errors.New("changed")), apierrors.NewNotFound(gr, "leader"), context.DeadlineExceeded} {
		if err := explainKubeRefusal("update", "team", "leader", other); err != nil {
			t.Errorf("%v is retried, not fatal: got %v", other, err)
		}
	}
}

func TestKubernetesHolderIdentitiesAreFencefsAndUniquePerCampaign(t *testing.T) {
	a, b := kubeIdentity("host:1"), kubeIdentity("host:1")
	if a == b || !strings.HasPrefix(a, fencefsHolderPrefix+"host:1:") {
		t.Errorf("identities %q, %q; want distinct, starting %q", a, b, fencefsHolderPrefix+"host:1:")
	}
}
