package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencefs/fencefs/fencing"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	rl "k8s.io/client-go/tools/leaderelection/resourcelock"
)

// kubeLock is the resourcelock.Interface that client-go's leader elector
// drives for a KubernetesElection. It does what resourcelock.LeaseLock does
// (the same Lease fields, so that any client-go holder of the Lease and
// fencefs take it from each other by the same rules), and besides:
//
//   - it keeps the resourceVersion of the write that made this process the
//     holder: the token (kubeToken);
//   - it turns a refusal by RBAC (403) or of the credentials (401) into a
//     fatal error, which ends the campaign at once with one line, instead
//     of the elector's endless retries;
//   - it keeps the start time of the last write that showed this process
//     as the holder (Held's deadline);
//   - once this process led, a Get showing another holder, or the Lease
//     gone, is a loss; it never re-creates a Lease it held (a deletion ends
//     the leadership), never claims it again after the holding ended, and
//     never writes a release over another holder's record;
//   - it logs, once per holder, a holder that is not a fencefs.
type kubeLock struct {
	client   coordinationv1client.LeasesGetter
	ns, name string
	id       string        // holderIdentity: "fencefs:" + holder + ":" + random
	timeout  time.Duration // of a request whose ctx has no deadline (the release)
	log      *slog.Logger
	onRenew  func() // after each write showing this process as the holder

	mu        sync.Mutex
	lease     *coordinationv1.Lease // GUARDED_BY(mu): last read or written
	token     uint64                // GUARDED_BY(mu): 0 until this process led
	uid       types.UID             // GUARDED_BY(mu): the Lease's, when token was taken
	renewed   time.Time             // GUARDED_BY(mu): start of the last write as holder
	ended     bool                  // GUARDED_BY(mu): lost or released: claim no more
	released  bool                  // GUARDED_BY(mu): a release was written
	relErr    error                 // GUARDED_BY(mu): the last release write's error
	foreign   string                // GUARDED_BY(mu): the last foreign holder logged
	fatalErr  error                 // GUARDED_BY(mu)
	lostErr   error                 // GUARDED_BY(mu)
	fatal     chan struct{}         // closed with fatalErr set
	lost      chan struct{}         // closed with lostErr set
	fatalOnce sync.Once
	lostOnce  sync.Once
}

// fencefsHolderPrefix starts the holderIdentity of every fencefs: a Lease
// whose holder lacks it is held by something else.
const fencefsHolderPrefix = "fencefs:"

func newKubeLock(client coordinationv1client.LeasesGetter, ns, name, id string, timeout time.Duration, log *slog.Logger) *kubeLock {
	return &kubeLock{client: client, ns: ns, name: name, id: id, timeout: timeout, log: log,
		onRenew: func() {}, fatal: make(chan struct{}), lost: make(chan struct{})}
}

// Describe names the Lease: NAMESPACE/NAME.
func (k *kubeLock) Describe() string { return k.ns + "/" + k.name }

// Identity is this process's holderIdentity.
func (k *kubeLock) Identity() string { return k.id }

// RecordEvent records nothing: fencefs logs instead.
func (k *kubeLock) RecordEvent(string) {}

// Get reads the Lease.
func (k *kubeLock) Get(ctx context.Context) (*rl.LeaderElectionRecord, []byte, error) {
	ctx, cancel := k.bound(ctx)
	defer cancel()
	lease, err := k.client.Leases(k.ns).Get(ctx, k.name, metav1.GetOptions{})
	if err != nil {
		k.refused("get", err)
		if apierrors.IsNotFound(err) {
			k.mu.Lock()
			led := k.token != 0
			k.mu.Unlock()
			if led {
				k.lose(fmt.Errorf("%w: the Lease %s was deleted", ErrLost, k.Describe()))
			}
		}
		return nil, nil, err
	}
	k.mu.Lock()
	k.lease = lease
	led := k.token != 0 && !k.ended
	uid := k.uid
	k.mu.Unlock()
	rec := rl.LeaseSpecToLeaderElectionRecord(&lease.Spec)
	switch {
	case led && lease.UID != uid:
		k.lose(fmt.Errorf("%w: the Lease %s was deleted and created again", ErrLost, k.Describe()))
	case led && rec.HolderIdentity != k.id:
		k.lose(fmt.Errorf("%w: the Lease %s is now held by %q", ErrLost, k.Describe(), rec.HolderIdentity))
	}
	k.noteHolder(rec.HolderIdentity)
	raw, err := json.Marshal(*rec)
	if err != nil {
		return nil, nil, err
	}
	return rec, raw, nil
}

// Create creates the Lease with rec, unless this process held it before
// (then it was deleted: a loss, not a fresh start).
func (k *kubeLock) Create(ctx context.Context, rec rl.LeaderElectionRecord) error {
	k.mu.Lock()
	led, ended := k.token != 0, k.ended
	k.mu.Unlock()
	if led {
		err := fmt.Errorf("%w: the Lease %s was deleted", ErrLost, k.Describe())
		k.lose(err)
		return err
	}
	if ended {
		return errHoldingEnded
	}
	ctx, cancel := k.bound(ctx)
	defer cancel()
	start := time.Now()
	lease, err := k.client.Leases(k.ns).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: k.name, Namespace: k.ns},
		Spec:       rl.LeaderElectionRecordToLeaseSpec(&rec),
	}, metav1.CreateOptions{})
	if err != nil {
		k.refused("create", err)
		if apierrors.IsNotFound(err) { // the namespace
			k.setFatal(fmt.Errorf("cannot create the Lease %s: %v", k.Describe(), err))
		}
		return err
	}
	return k.wrote(lease, rec, start)
}

var errHoldingEnded = errors.New("the leadership has ended: not claiming the Lease again")

// Update writes rec over the Lease last read or written (the API server
// refuses it with a conflict if the Lease changed since).
func (k *kubeLock) Update(ctx context.Context, rec rl.LeaderElectionRecord) error {
	k.mu.Lock()
	if k.lease == nil {
		k.mu.Unlock()
		return errors.New("the Lease was not read yet")
	}
	cur := k.lease.DeepCopy()
	ended := k.ended
	k.mu.Unlock()
	release := rec.HolderIdentity == ""
	switch {
	case release && (cur.Spec.HolderIdentity == nil || *cur.Spec.HolderIdentity != k.id):
		return fmt.Errorf("not releasing the Lease %s: it is not held by this process", k.Describe())
	case !release && ended:
		return errHoldingEnded
	}
	cur.Spec = rl.LeaderElectionRecordToLeaseSpec(&rec)
	ctx, cancel := k.bound(ctx)
	defer cancel()
	start := time.Now()
	lease, err := k.client.Leases(k.ns).Update(ctx, cur, metav1.UpdateOptions{})
	if release {
		k.mu.Lock()
		k.relErr = err
		k.released = k.released || err == nil
		k.mu.Unlock()
	}
	if err != nil {
		k.refused("update", err)
		return err
	}
	return k.wrote(lease, rec, start)
}

// wrote records a successful write of rec, started at start, that the API
// server answered with lease. The first write showing this process as the
// holder gives the token: its resourceVersion.
func (k *kubeLock) wrote(lease *coordinationv1.Lease, rec rl.LeaderElectionRecord, start time.Time) error {
	k.mu.Lock()
	k.lease = lease
	if rec.HolderIdentity != k.id {
		k.mu.Unlock()
		return nil
	}
	k.renewed = start
	first := k.token == 0
	if first {
		tok, err := kubeToken(KubernetesSource(k.ns, k.name), lease.ResourceVersion)
		if err != nil {
			k.mu.Unlock()
			k.setFatal(err)
			return err
		}
		k.token, k.uid = tok, lease.UID
	}
	k.mu.Unlock()
	if !first {
		k.onRenew()
	}
	return nil
}

// bound gives ctx the lock's request timeout when it has no deadline.
func (k *kubeLock) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, k.timeout)
}

// refused makes an RBAC or credentials refusal of verb fatal.
func (k *kubeLock) refused(verb string, err error) {
	if ferr := explainKubeRefusal(verb, k.ns, k.name, err); ferr != nil {
		k.setFatal(ferr)
	}
}

// explainKubeRefusal describes err, the API server's answer to verb on
// the Lease NS/NAME, when it is a refusal that retrying cannot cure: 403
// (RBAC) or 401 (credentials). It returns nil for any other error.
func explainKubeRefusal(verb, ns, name string, err error) error {
	switch {
	case apierrors.IsForbidden(err):
		why := err.Error()
		if _, after, ok := strings.Cut(why, "is forbidden: "); ok {
			why = after
		}
		return KubernetesForbidden(verb, ns, why)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%w: the Kubernetes API server refused the credentials (401 Unauthorized) to %s the Lease %s/%s: check the kubeconfig's user or the service account token", ErrKubernetesForbidden, verb, ns, name)
	}
	return nil
}

// KubernetesForbidden is the one line for RBAC forbidding verb on leases
// in namespace ns; why is the API server's reason.
func KubernetesForbidden(verb, ns, why string) error {
	return fmt.Errorf("%w: Kubernetes RBAC forbids %s on leases (coordination.k8s.io) in namespace %s: %s; grant get, create and update on leases to that user (a Role and a RoleBinding: see docs/CLI.md)",
		ErrKubernetesForbidden, verb, ns, why)
}

// ExplainKubernetesRefusal is explainKubeRefusal, for the callers that
// probe the API server before campaigning.
func ExplainKubernetesRefusal(verb, ns, name string, err error) error {
	return explainKubeRefusal(verb, ns, name, err)
}

// ErrKubernetesForbidden: the API server refuses this process's requests
// on the Lease (RBAC, or the credentials); retrying cannot help.
var ErrKubernetesForbidden = errors.New("refused by the Kubernetes API server")

func (k *kubeLock) setFatal(err error) {
	k.fatalOnce.Do(func() {
		k.mu.Lock()
		k.fatalErr = err
		k.mu.Unlock()
		close(k.fatal)
	})
}

func (k *kubeLock) fatalError() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.fatalErr
}

// lose records a loss seen by the lock (another holder, the Lease gone).
func (k *kubeLock) lose(err error) {
	k.lostOnce.Do(func() {
		k.mu.Lock()
		k.lostErr, k.ended = err, true
		k.mu.Unlock()
		close(k.lost)
	})
}

func (k *kubeLock) lostError() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lostErr
}

// end stops the lock from claiming the Lease again (a loss, a release).
func (k *kubeLock) end() {
	k.mu.Lock()
	k.ended = true
	k.mu.Unlock()
}

// acquired returns the token and the start of the last write as holder.
func (k *kubeLock) acquired() (token uint64, renewed time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.token, k.renewed
}

// releaseResult reports whether a release was written, and the last
// release write's error.
func (k *kubeLock) releaseResult() (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.released, k.relErr
}

// noteHolder logs a holder that is not a fencefs, once per holder.
func (k *kubeLock) noteHolder(holder string) {
	if holder == "" || holder == k.id || strings.HasPrefix(holder, fencefsHolderPrefix) {
		return
	}
	k.mu.Lock()
	seen := k.foreign == holder
	k.foreign = holder
	k.mu.Unlock()
	if !seen {
		k.log.Warn(fmt.Sprintf("the Lease %s is held by %q, which is not a fencefs: it still works as an election, but that holder binds no fencing token, so the storage does not fence its writes; waiting for it to release the Lease or let it expire", k.Describe(), holder))
	}
}

// KubernetesSource names a Kubernetes Lease's resourceVersions in
// ErrTokenSource errors.
func KubernetesSource(ns, name string) TokenSource {
	return TokenSource{Token: "the resourceVersion of Kubernetes Lease " + ns + "/" + name,
		Others: "another Kubernetes cluster", Flag: "--kubernetes-lease"}
}

// kubeToken turns the resourceVersion rv of the write that made this
// process the Lease's holder into its fencing token (see doc.go, "Leaders
// elected by a Kubernetes Lease"). It accepts what apimachinery's
// resourceversion.CompareResourceVersion accepts, a positive decimal
// integer without leading zeros, that fits an int64 (etcd's revisions
// do); anything else is refused: the API server's storage is then not
// etcd, and its versions need not be ordered.
func kubeToken(src TokenSource, rv string) (uint64, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: %s %q is not a token: %s (accepted: 1 to %d, as etcd's revisions are); is the API server's storage etcd?", fencing.ErrBadToken, src.Token, rv, why, fencing.MaxToken)
	}
	if rv == "" {
		return 0, bad("empty")
	}
	for i := 0; i < len(rv); i++ {
		if rv[i] < '0' || rv[i] > '9' {
			return 0, bad("not a decimal integer")
		}
	}
	if rv[0] == '0' {
		return 0, bad("zero or a leading zero")
	}
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		return 0, bad("above the largest int64")
	}
	return coordinatorToken(src, n)
}
