package integration

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/fencefs/fencefs/integration/kubeserver"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// End-to-end tests of `fencefs run --kubernetes-lease`: the real binary,
// real FUSE mounts, the real gateway and a real kube-apiserver over a real
// etcd (bin/kube-apiserver, built from tools/kube-apiserver). The
// supervised COMMAND is the lease child of lease_test.go.

const kubeTTL = 2 * time.Second

// kubeconfig returns the path of the kubeconfig of user on srv.
func kubeconfig(t *testing.T, srv *kubeserver.Server, user string) string {
	t.Helper()
	path, err := srv.Kubeconfig(user)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// kubeClient is a client of srv as user.
func kubeClient(t *testing.T, srv *kubeserver.Server, user string) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig(t, srv, user))
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kubeHolder returns the Lease default/name's holder ("" when free or
// missing) and resourceVersion.
func kubeHolder(t *testing.T, c kubernetes.Interface, name string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.CoordinationV1().Leases("default").Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(l.Spec.HolderIdentity, ""), l.ResourceVersion
}

// kubeArgs are fencefs run's flags electing by the Lease default/leader as
// the admin.
func kubeArgs(t *testing.T, srv *kubeserver.Server, extra ...string) []string {
	return append([]string{"--kubernetes-lease", "default/leader", "--kubeconfig", kubeconfig(t, srv, kubeserver.Admin), "--ttl", kubeTTL.String()}, extra...)
}

func TestRunKubernetesContendersRunOneCommandAtATime(t *testing.T) {
	gw := gateway.ForTest(t)
	srv := kubeserver.ForTest(t)
	admin := kubeClient(t, srv, kubeserver.Admin)
	contendersTakeTurns(t, gw, coordinator{
		args: func(extra ...string) []string { return kubeArgs(t, srv, extra...) },
		// The holder, if any: every run wrote the Lease free on exit.
		candidates: func() map[string]int64 {
			out := map[string]int64{}
			if h, rv := kubeHolder(t, admin, "leader"); h != "" {
				n, _ := strconv.ParseInt(rv, 10, 64)
				out[h] = n
			}
			return out
		},
	})
}

// A leader frozen past the Lease's duration: a waiting contender takes the
// Lease over with a higher token and writes; when the old leader wakes,
// the storage refuses its writes (EROFS) and its fencefs run exits 75.
func TestRunKubernetesFrozenLeaderIsFencedAndStopped(t *testing.T) {
	gw := gateway.ForTest(t)
	srv := kubeserver.ForTest(t)
	admin := kubeClient(t, srv, kubeserver.Admin)
	bucket := gateway.NewBucket(t, gw)
	ma := harness.Mount(t, gw, bucket)
	mb := harness.Mount(t, gw, bucket)
	dir := t.TempDir()
	logA, logB := dir+"/a.log", dir+"/b.log"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addrB := metricsAddr(t)
	args := kubeArgs(t, srv, "--grace", "5s")

	runA, startA := startWritingLeader(ctx, t, gw, ma.Dir, logA, args...)
	if h, rv := kubeHolder(t, admin, "leader"); !strings.HasPrefix(h, "fencefs:") {
		t.Fatalf("the Lease is held by %q (resourceVersion %s); want A, a fencefs", h, rv)
	}
	runB := startRun(t, gw, "B", "leader", mb.Dir, []string{"LEASE_CHILD_LOG=" + logB, "LEASE_CHILD_MODE=loop"}, append(args, "--metrics-addr", addrB)...)
	waitUntil(ctx, t, "B campaigns", func() bool { return strings.Contains(runB.output(), "campaigning for the Kubernetes Lease") })
	time.Sleep(kubeTTL) // B has seen A renew
	wantHealth(t, addrB, 503, "waiting for lease leader")
	if evs := readChildLog(t, logB); len(evs) != 0 {
		t.Fatalf("B's command started while A leads: %v", evs)
	}

	frozenLeaderIsReplaced(ctx, t, gw, bucket, ma, runA, startA, logA, logB, addrB, []string{
		"the Lease default/leader was not renewed", "the Lease default/leader is now held by", "could not be renewed in time", "the mount at"})

	stopLeaderCleanly(ctx, t, runB, logB)
	if h, _ := kubeHolder(t, admin, "leader"); h != "" {
		t.Errorf("the Lease is held by %q after B exited; want it written free", h)
	}
}

// grantLeases gives the restricted user verbs on leases in "default".
func grantLeases(ctx context.Context, t *testing.T, admin kubernetes.Interface, verbs ...string) {
	t.Helper()
	rbac := admin.RbacV1()
	_ = rbac.RoleBindings("default").Delete(ctx, "fencefs", metav1.DeleteOptions{})
	_ = rbac.Roles("default").Delete(ctx, "fencefs", metav1.DeleteOptions{})
	if len(verbs) == 0 {
		return
	}
	if _, err := rbac.Roles("default").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "fencefs"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: verbs}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "fencefs"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "fencefs"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: kubeserver.Restricted}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestRunKubernetesBadClusterRBACOrTokenSourceIsOneLineAndStartsNothing(t *testing.T) {
	gw := gateway.ForTest(t)
	srv := kubeserver.ForTest(t)
	admin := kubeClient(t, srv, kubeserver.Admin)
	m := harness.Mount(t, gw, gateway.NewBucket(t, gw))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	restricted := kubeconfig(t, srv, kubeserver.Restricted)
	as := func(kc string, extra ...string) []string {
		return append([]string{"--kubernetes-lease", "default/leader", "--kubeconfig", kc, "--ttl", kubeTTL.String(), "--kubernetes-dial-timeout", "5s"}, extra...)
	}

	// Nothing listens where the kubeconfig points.
	port, err := gateway.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dead := srv.Dir + "/dead.kubeconfig"
	writeKubeconfigTo(t, dead, "https://127.0.0.1:"+strconv.Itoa(port))
	fenced := gateway.NewBucket(t, gw) // a token far above any resourceVersion here
	if out, err := harness.Run(ctx, t, gw, nil, "epoch", "raise", fenced, "1000000000"); err != nil {
		t.Fatalf("epoch raise: %v\n%s", err, out)
	}
	mf := harness.Mount(t, gw, fenced)
	wantBadRunsRefused(ctx, t, gw, []badRun{
		{"nothing listens", m.Dir, nil, as(dead), "cannot reach the Kubernetes API server at https://127.0.0.1:" + strconv.Itoa(port) + " (kubernetes.dial_timeout 5s): connect: connection refused"},
		{"token source mismatch", mf.Dir, nil, as(kubeconfig(t, srv, kubeserver.Admin)), "the resourceVersion of Kubernetes Lease default/leader"},
	})
	if out, _ := harness.Run(ctx, t, gw, nil, "epoch", "show", fenced); !strings.Contains(out, "1000000000") {
		t.Logf("epoch show: %s", out)
	}

	// RBAC: each missing verb is named, with the resource.
	for _, tc := range []struct {
		grant []string
		want  string
	}{
		{nil, "Kubernetes RBAC forbids get on leases (coordination.k8s.io) in namespace default: User \"restricted\" cannot get resource \"leases\""},
		{[]string{"get"}, "Kubernetes RBAC forbids create on leases (coordination.k8s.io) in namespace default: User \"restricted\" cannot create resource \"leases\""},
		{[]string{"get", "create"}, "Kubernetes RBAC forbids update on leases (coordination.k8s.io) in namespace default: User \"restricted\" cannot update resource \"leases\""},
	} {
		grantLeases(ctx, t, admin, tc.grant...)
		wantBadRunsRefused(ctx, t, gw, []badRun{{"granted " + strings.Join(tc.grant, ","), m.Dir, nil, as(restricted), tc.want}})
	}
	grantLeases(ctx, t, admin, "get", "create", "update")
	out, err := harness.Run(ctx, t, gw, nil, append(append([]string{"run", "--mount", m.Dir}, as(restricted)...), "--", "/bin/sh", "-c", "echo token=$FENCEFS_TOKEN")...)
	if err != nil || !strings.Contains(out, "token=") {
		t.Errorf("granted get, create, update: fencefs run: %v; output:\n%s", err, out)
	}
	if strings.Contains(out, "token: ") || strings.Contains(out, "Bearer") {
		t.Errorf("a credential shows in the output:\n%s", out)
	}
}

// writeKubeconfigTo writes a kubeconfig for server without credentials.
func writeKubeconfigTo(t *testing.T, path, server string) {
	t.Helper()
	body := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"" + server + "\", insecure-skip-tls-verify: true}}]\n" +
		"users: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A Lease held by something that is not a fencefs (a controller's
// client-go, here written by hand and never renewed): fencefs run says so,
// waits for it to expire, takes it over and runs.
func TestRunKubernetesLeaseOfAnotherHolderIsNamedAndTakenOverAfterItExpires(t *testing.T) {
	gw := gateway.ForTest(t)
	srv := kubeserver.ForTest(t)
	admin := kubeClient(t, srv, kubeserver.Admin)
	m := harness.Mount(t, gw, gateway.NewBucket(t, gw))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	now := metav1.NewMicroTime(time.Now())
	if _, err := admin.CoordinationV1().Leases("default").Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "leader"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("some-controller-7f9c"), LeaseDurationSeconds: ptr.To[int32](3),
			AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To[int32](4)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err := harness.Run(ctx, t, gw, nil, append(append([]string{"run", "--mount", m.Dir, "--log-level", "info"}, kubeArgs(t, srv)...), "--", "/bin/sh", "-c", "echo token=$FENCEFS_TOKEN")...)
	if err != nil || !strings.Contains(out, "token=") {
		t.Fatalf("fencefs run: %v; output:\n%s", err, out)
	}
	if !strings.Contains(out, `the Lease default/leader is held by \"some-controller-7f9c\", which is not a fencefs`) {
		t.Errorf("fencefs run did not name the foreign holder; output:\n%s", out)
	}
}

// The API server killed and started again under a running leader (etcd
// keeps the Lease): the leader rides it out if the server is back within
// 4/5 of the Lease's duration, or else loses before the contender takes
// over; either way one command runs at a time, with growing tokens.
func TestRunKubernetesAPIServerRestartedMidRunKeepsOneLeader(t *testing.T) {
	gw := gateway.ForTest(t)
	srv := kubeserver.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	ma := harness.Mount(t, gw, bucket)
	mb := harness.Mount(t, gw, bucket)
	logPath := t.TempDir() + "/children.log"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Long enough for a restart on a loaded machine (about 3 s).
	const ttl = 10 * time.Second
	args := append([]string{"--kubernetes-lease", "default/leader", "--kubeconfig", kubeconfig(t, srv, kubeserver.Admin)}, "--ttl", ttl.String(), "--grace", "5s")
	child := []string{"LEASE_CHILD_LOG=" + logPath, "LEASE_CHILD_MODE=loop"}

	runA := startRun(t, gw, "A", "leader", ma.Dir, child, args...)
	startA := waitLeading(ctx, t, logPath, "A's command writes through its mount")
	runB := startRun(t, gw, "B", "leader", mb.Dir, child, args...)
	waitUntil(ctx, t, "B campaigns", func() bool { return strings.Contains(runB.output(), "campaigning for the Kubernetes Lease") })

	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl + ttl/2) // a loss, and B's takeover, would have happened by now

	inside, starts, last := "", 0, uint64(0)
	for _, e := range readChildLog(t, logPath) {
		switch e.kind {
		case "start":
			if inside != "" {
				t.Errorf("%s started while %s was still running", e.name, inside)
			}
			if e.token <= last {
				t.Errorf("%s: token %d after %d; want growing tokens", e.name, e.token, last)
			}
			inside, last, starts = e.name, e.token, starts+1
		case "end", "term":
			inside = ""
		}
	}
	if inside == "" {
		t.Errorf("no command runs after the restart (%d started); A's run:\n%s\nB's run:\n%s", starts, runA.output(), runB.output())
	}
	t.Logf("after the restart %s leads (%d commands started; A's token %d)", inside, starts, startA.token)
	for _, r := range []*runProc{runB, runA} {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		r.wait(ctx, t)
	}
}
