package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/lease"
	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// `fencefs run --kubernetes-lease`: the leader is elected by a Kubernetes
// Lease, whose resourceVersion after the write that made this process the
// holder is the token bound on the mount; everything else (the
// supervision of COMMAND, the exit statuses, /healthz, the metrics) is
// run.go's.

// checkKubeTTL refuses a --ttl that a Lease's leaseDurationSeconds cannot
// carry.
func checkKubeTTL(ttl time.Duration) error {
	if ttl < 2*time.Second || ttl%time.Second != 0 {
		return usageErrorf("--ttl %v: a Kubernetes Lease lasts whole seconds, at least 2 (accepted with --kubernetes-lease: 2s, 3s, 15s, …)", ttl)
	}
	return nil
}

// kubeRestConfig finds the cluster as kubectl does (--kubeconfig, else
// KUBECONFIG, else ~/.kube/config), else the pod's in-cluster config, and
// the Lease's namespace: the flag's, else the context's (or the pod's),
// else "default".
func kubeRestConfig(kc *config.Kubernetes) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kc.Kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kc.Context})
	rc, err := cc.ClientConfig()
	switch {
	case clientcmd.IsEmptyConfig(err):
		return nil, "", usageErrorf("no Kubernetes cluster for --kubernetes-lease: not in a pod (no in-cluster service account), and no kubeconfig (--kubeconfig, KUBECONFIG or ~/.kube/config)")
	case err != nil:
		return nil, "", usageErrorf("kubeconfig for --kubernetes-lease: %v", err)
	}
	ns := kc.Namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, "", usageErrorf("kubeconfig for --kubernetes-lease: %v", err)
		}
	}
	if ns == "" {
		ns = "default"
	}
	rc.WarningHandler = rest.NoWarnings{}
	rc.UserAgent = "fencefs/" + versionString()
	return rc, ns, nil
}

// openKube connects to the API server and checks, within the dial
// timeout, that it answers a read of the Lease and that RBAC lets this
// user create and update it, so that an unreachable cluster or a missing
// grant is one line before anything starts.
func openKube(ctx context.Context, kc *config.Kubernetes) (*kubeClients, string, string, error) {
	rc, ns, err := kubeRestConfig(kc)
	if err != nil {
		return nil, "", "", err
	}
	cs, err := newKubeClients(rc)
	if err != nil {
		return nil, "", "", usageErrorf("kubeconfig for --kubernetes-lease: %v", err)
	}
	pctx, cancel := context.WithTimeout(ctx, kc.DialTimeout)
	defer cancel()
	_, err = cs.coordination.Leases(ns).Get(pctx, kc.Name, metav1.GetOptions{})
	switch {
	case err == nil, apierrors.IsNotFound(err):
	case ctx.Err() != nil:
		return nil, "", "", ctx.Err()
	case lease.ExplainKubernetesRefusal("get", ns, kc.Name, err) != nil:
		return nil, "", "", lease.ExplainKubernetesRefusal("get", ns, kc.Name, err)
	case errors.Is(err, context.DeadlineExceeded) || pctx.Err() != nil:
		return nil, "", "", fmt.Errorf("the Kubernetes API server at %s did not answer within %v (kubernetes.dial_timeout)", rc.Host, kc.DialTimeout)
	default:
		return nil, "", "", fmt.Errorf("cannot reach the Kubernetes API server at %s (kubernetes.dial_timeout %v): %v", rc.Host, kc.DialTimeout, unwrapKubeErr(err))
	}
	if err := checkLeaseAccess(pctx, cs, ns, kc.Name); err != nil {
		return nil, "", "", err
	}
	return cs, ns, rc.Host, nil
}

// kubeClients are the typed clients fencefs uses: only these API groups,
// not a whole clientset's (which would more than double the binary).
type kubeClients struct {
	coordination   coordinationv1client.CoordinationV1Interface
	authorization  authorizationv1client.AuthorizationV1Interface
	authentication authenticationv1client.AuthenticationV1Interface
}

func newKubeClients(rc *rest.Config) (*kubeClients, error) {
	var c kubeClients
	var err error
	if c.coordination, err = coordinationv1client.NewForConfig(rc); err != nil {
		return nil, err
	}
	if c.authorization, err = authorizationv1client.NewForConfig(rc); err != nil {
		return nil, err
	}
	if c.authentication, err = authenticationv1client.NewForConfig(rc); err != nil {
		return nil, err
	}
	return &c, nil
}

// checkLeaseAccess asks the API server (SelfSubjectAccessReview) whether
// this user may create and update the Lease; a review that cannot be made
// proves nothing (the writes tell later).
func checkLeaseAccess(ctx context.Context, cs *kubeClients, ns, name string) error {
	for _, verb := range []string{"create", "update"} {
		attrs := &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: "coordination.k8s.io", Resource: "leases"}
		if verb != "create" {
			attrs.Name = name
		}
		r, err := cs.authorization.SelfSubjectAccessReviews().Create(ctx,
			&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: attrs}}, metav1.CreateOptions{})
		if err != nil || r.Status.Allowed {
			continue
		}
		user := "this user"
		if sr, err := cs.authentication.SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); err == nil && sr.Status.UserInfo.Username != "" {
			user = fmt.Sprintf("User %q", sr.Status.UserInfo.Username)
		}
		return lease.KubernetesForbidden(verb, ns, fmt.Sprintf("%s cannot %s resource \"leases\" in API group \"coordination.k8s.io\" in the namespace %q", user, verb, ns))
	}
	return nil
}

// unwrapKubeErr drops the "Get "URL": dial tcp …:" wrapping of a transport
// error.
func unwrapKubeErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		err = ue.Err
	}
	return unwrapNet(err)
}

// campaignKubernetes connects to the API server and campaigns for the
// Lease; once held, its resourceVersion is bound on the mount at mp. The
// election owns its client: the returned function has nothing to close.
func campaignKubernetes(ctx context.Context, kc *config.Kubernetes, env *adminEnv, o runOptions, mp string, reg prometheus.Registerer) (lease.Leader, func(), error) {
	cs, ns, host, err := openKube(ctx, kc)
	if err != nil {
		return nil, nil, err
	}
	env.log.Info("campaigning for the Kubernetes Lease", "lease", ns+"/"+kc.Name, "server", host, "lease_duration", o.ttl,
		"bucket", env.cfg.S3.Bucket, "domain", env.cfg.DomainKeyPrefix(), "mount", mp)
	e, err := lease.CampaignKubernetes(ctx, kc.Name, lease.KubernetesOptions{
		Client:     cs.coordination,
		Namespace:  ns,
		TTL:        o.ttl,
		Holder:     env.cfg.Fence.Holder,
		Bind:       coordinatorBinder(env, mp, lease.KubernetesSource(ns, kc.Name)),
		Logger:     env.log,
		Registerer: reg,
	})
	if err != nil {
		return nil, nil, err
	}
	return e, func() {}, nil
}
