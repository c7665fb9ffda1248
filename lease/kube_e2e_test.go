package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/kubeserver"
	"github.com/fencefs/fencefs/lease"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// Elections by a Lease on a real kube-apiserver (bin/kube-apiserver, built
// from tools/kube-apiserver), with the race detector on this side.

// kubeTTL leaves a loaded machine room for renewals (every TTL/3, due within
// 4/5 of it): the first test checks that A keeps the Lease for 1.5 TTL.
const kubeTTL = 6 * time.Second

func kubeAdmin(t *testing.T, srv *kubeserver.Server) kubernetes.Interface {
	t.Helper()
	path, err := srv.Kubeconfig(kubeserver.Admin)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(rc)
}

func kubeOpts(c kubernetes.Interface, b binds) lease.KubernetesOptions {
	return lease.KubernetesOptions{Client: c.CoordinationV1(), Namespace: "default", TTL: kubeTTL, Bind: b.bind}
}

func TestKubernetesLeadersTakeTurnsWithGrowingTokens(t *testing.T) {
	srv := kubeserver.ForTest(t)
	c := kubeAdmin(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := binds{ch: make(chan uint64, 4)}
	a, err := lease.CampaignKubernetes(ctx, "leader", kubeOpts(c, b))
	if err != nil {
		t.Fatal(err)
	}
	if !a.Held() || a.Token() == 0 || <-b.ch != a.Token() || a.Confirm(ctx) != nil {
		t.Fatalf("A: held %v, token %d, confirm %v; want held with its token bound", a.Held(), a.Token(), a.Confirm(ctx))
	}
	won := make(chan *lease.KubernetesElection, 1)
	go func() {
		e, err := lease.CampaignKubernetes(ctx, "leader", kubeOpts(c, b))
		if err != nil {
			t.Error(err)
		}
		won <- e
	}()
	time.Sleep(kubeTTL + kubeTTL/2) // A renews meanwhile: B must keep waiting
	select {
	case <-won:
		t.Fatal("B won while A held the Lease")
	default:
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	bl := <-won
	if bl == nil {
		t.FailNow()
	}
	defer bl.Release(ctx)
	if bl.Token() <= a.Token() || <-b.ch != bl.Token() {
		t.Errorf("B's token %d is not above A's %d", bl.Token(), a.Token())
	}
	if a.Held() || !errors.Is(a.Err(), lease.ErrReleased) {
		t.Errorf("A after Release: held %v, err %v", a.Held(), a.Err())
	}
}

func TestKubernetesLeadershipIsLostWhenTheLeaseIsDeletedOrTakenOver(t *testing.T) {
	srv := kubeserver.ForTest(t)
	c := kubeAdmin(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leases := c.CoordinationV1().Leases("default")
	for _, tc := range []struct {
		name, want string
		do         func(name string) error
	}{
		{"deleted", "was deleted", func(name string) error { return leases.Delete(ctx, name, metav1.DeleteOptions{}) }},
		{"taken over", `is now held by "someone-else"`, func(name string) error {
			// The holder renews meanwhile: read again on a conflict.
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				l, err := leases.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				l.Spec.HolderIdentity = ptr.To("someone-else")
				_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
				return err
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ReplaceAll(tc.name, " ", "-")
			e, err := lease.CampaignKubernetes(ctx, name, kubeOpts(c, binds{ch: make(chan uint64, 1)}))
			if err != nil {
				t.Fatal(err)
			}
			defer e.Release(ctx)
			if err := tc.do(name); err != nil {
				t.Fatal(err)
			}
			select {
			case <-e.Lost():
			case <-time.After(20 * time.Second): // the next renewal sees it, within TTL/3
				t.Fatal("still leading")
			}
			if !errors.Is(e.Err(), lease.ErrLost) || !strings.Contains(e.Err().Error(), tc.want) || e.Held() {
				t.Errorf("err %v, held %v; want a loss saying %q", e.Err(), e.Held(), tc.want)
			}
			if err := e.Confirm(ctx); !errors.Is(err, lease.ErrLost) {
				t.Errorf("Confirm after the loss: %v; want ErrLost", err)
			}
		})
	}
}
