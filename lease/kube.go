package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"
)

// Leader election by a Kubernetes Lease (coordination.k8s.io/v1): client-go's
// leader elector (tools/leaderelection), the one every controller uses, over
// kubeLock, a LeaseLock that keeps the resourceVersion of the write that
// made this process the holder. That resourceVersion is the token; doc.go
// says why it grows with leadership.

// KubernetesOptions configures CampaignKubernetes.
type KubernetesOptions struct {
	// Client reaches the API server (a clientset's CoordinationV1()).
	// Required.
	Client coordinationv1client.LeasesGetter
	// Namespace of the Lease. Required.
	Namespace string
	// TTL is the Lease's leaseDurationSeconds, a whole number of seconds:
	// a contender takes the Lease over after seeing it unchanged that
	// long. The holder renews every TTL/3 and counts itself lost without
	// a renewal for 4/5 of it. Zero means DefaultTTL.
	TTL time.Duration
	// Holder describes this process in the Lease's holderIdentity (which
	// is "fencefs:" + Holder + ":" + a random suffix, unique per
	// campaign); empty means "hostname:pid".
	Holder string
	// Bind binds token, the Lease's resourceVersion after the write that
	// made this process its holder. Its ctx is cancelled if the
	// leadership is lost meanwhile. Required.
	Bind func(ctx context.Context, token uint64) error
	// Logger receives progress and warnings; nil discards them.
	Logger *slog.Logger
	// Registerer receives the fencefs_lease_* metrics, labelled by the
	// Lease's name; nil records none.
	Registerer prometheus.Registerer
}

// KubernetesElection is a Kubernetes Lease held: the leadership lasts
// while client-go's elector renews the Lease in time and nobody else
// holds it. Create with CampaignKubernetes; end with Release. Safe for
// concurrent use.
type KubernetesElection struct {
	holding // Name, Lost, Err
	watcher // the loss watch, Release once
	lock    *kubeLock
	ttl     time.Duration
	token   uint64

	stopRun func()        // cancels the elector's Run (it then releases)
	runDone chan struct{} // closed when Run has returned
}

var _ Leader = (*KubernetesElection)(nil)

// CampaignKubernetes waits until this process holds the Lease
// NAMESPACE/name (creating it if missing), then binds the resourceVersion
// of the write that made it the holder as the fencing token through
// opts.Bind. ctx bounds the wait and the bind, not the leadership: it
// lasts until Release or a loss.
//
// Errors: ErrBadName; ErrKubernetesForbidden (RBAC forbids a verb on
// leases, or the credentials are refused); fencing.ErrBadToken (a
// resourceVersion that is not a positive integer); ctx's error while
// waiting; the bind's error (the Lease is then released).
func CampaignKubernetes(ctx context.Context, name string, opts KubernetesOptions) (*KubernetesElection, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if opts.Bind == nil || opts.Client == nil || opts.Namespace == "" {
		return nil, errors.New("lease: CampaignKubernetes needs KubernetesOptions.Bind, Client and Namespace")
	}
	ttl := cmpOr(opts.TTL, DefaultTTL)
	if ttl < 2*time.Second || ttl%time.Second != 0 {
		return nil, fmt.Errorf("Kubernetes Lease duration %v is not a whole number of seconds from 2s (accepted: 2s, 3s, …)", ttl)
	}
	log := orDiscard(opts.Logger).With("lease", opts.Namespace+"/"+name)
	met := newMetrics(opts.Registerer, name)
	e := &KubernetesElection{ttl: ttl, runDone: make(chan struct{})}
	e.lock = newKubeLock(opts.Client, opts.Namespace, name, kubeIdentity(cmpOr(opts.Holder, defaultHolder())), ttl/2, log)
	e.lock.onRenew = func() { met.wrote(); met.renewal("ok") } // before the elector runs
	if err := e.campaign(ctx, log); err != nil {
		met.ended(false)
		return nil, err
	}
	e.start(name, log, met, HowElected)
	e.startWatch(e.watch)
	log.Info("elected", "token", e.token, "holder", e.lock.id, "lease_duration", ttl)
	if err := bindElected(ctx, e, &e.holding, e.token, opts.Bind, ttl); err != nil {
		return nil, err
	}
	return e, nil
}

// kubeIdentity is a holderIdentity unique to this campaign: two processes
// given the same holder must not both believe they hold the Lease.
func kubeIdentity(holder string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return fencefsHolderPrefix + holder + ":" + hex.EncodeToString(b)
}

// campaign runs client-go's elector until it leads, the lock meets a
// fatal refusal, or ctx ends (then the elector is stopped, and releases
// the Lease if it had just taken it).
func (e *KubernetesElection) campaign(ctx context.Context, log *slog.Logger) error {
	won := make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            e.lock,
		Name:            e.lock.Describe(),
		LeaseDuration:   e.ttl,
		RetryPeriod:     e.ttl / 3,
		RenewDeadline:   e.ttl * 7 / 15, // RetryPeriod + RenewDeadline = 4/5 of the TTL
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(won) },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("Kubernetes leader election: %w", err)
	}
	// The elector logs through klog: fencefs reports for it.
	runCtx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	e.stopRun = cancel
	go func() {
		defer close(e.runDone)
		le.Run(runCtx)
	}()
	log.Info("campaigning for the Kubernetes Lease", "holder", e.lock.id, "lease_duration", e.ttl)
	stop := func(err error) error {
		e.lock.end()
		cancel()
		<-e.runDone
		return err
	}
	select {
	case <-won:
	case <-e.lock.fatal:
		return stop(e.lock.fatalError())
	case <-ctx.Done():
		return stop(ctx.Err())
	}
	if err := e.lock.fatalError(); err != nil { // the token did not parse
		return stop(err)
	}
	e.token, _ = e.lock.acquired()
	return nil
}

// deadline is when the leadership counts as lost without a renewal: 4/5
// of the TTL after the start of the last write as holder (a contender
// takes over a full TTL after it saw that write land).
func (e *KubernetesElection) deadline() time.Time {
	_, renewed := e.lock.acquired()
	return renewed.Add(e.ttl - e.ttl/5)
}

// watch ends the leadership when the lock sees another holder or the
// Lease gone, when the elector stops renewing, or when no renewal landed
// by the deadline.
func (e *KubernetesElection) watch(ctx context.Context) {
	for {
		wait := time.Until(e.deadline())
		if wait <= 0 {
			e.lock.end()
			e.lose(fmt.Errorf("%w: the Lease %s was not renewed for %v (4/5 of its duration): the Kubernetes API server did not answer in time", ErrLost, e.lock.Describe(), e.ttl-e.ttl/5))
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-e.lock.lost:
			t.Stop()
			e.lose(e.lock.lostError())
			return
		case <-e.lock.fatal: // RBAC revoked, or the credentials, mid-run
			t.Stop()
			e.lock.end()
			e.lose(fmt.Errorf("%w: renewing the Lease: %v", ErrLost, e.lock.fatalError()))
			return
		case <-e.runDone:
			t.Stop()
			e.lock.end()
			e.lose(fmt.Errorf("%w: the Lease %s could not be renewed in time (client-go's elector stopped leading)", ErrLost, e.lock.Describe()))
			return
		case <-t.C:
		}
	}
}

// Token returns the fencing token: the Lease's resourceVersion after the
// write that made this process its holder.
func (e *KubernetesElection) Token() uint64 { return e.token }

// Identity returns this process's holderIdentity in the Lease.
func (e *KubernetesElection) Identity() string { return e.lock.id }

// Held reports whether the leadership is still this process's by its own
// reckoning: not lost or released, and renewed within 4/5 of the TTL.
func (e *KubernetesElection) Held() bool {
	return e.Err() == nil && time.Now().Before(e.deadline())
}

// Confirm reads the Lease: the leadership is confirmed while its holder is
// this process, and lost when another holds it or it is gone
// (Leader.Confirm).
func (e *KubernetesElection) Confirm(ctx context.Context) error {
	if err := e.Err(); err != nil {
		return err
	}
	lease, err := e.lock.client.Leases(e.lock.ns).Get(ctx, e.lock.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		e.lock.end()
		e.lose(fmt.Errorf("%w: the Lease %s was deleted", ErrLost, e.lock.Describe()))
		return e.Err()
	case err != nil:
		return fmt.Errorf("confirming the leadership with the Kubernetes API server: %w", err)
	}
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	if holder != e.lock.id || lease.UID != e.lock.uid {
		e.lock.end()
		e.lose(fmt.Errorf("%w: the Lease %s is now held by %q", ErrLost, e.lock.Describe(), holder))
		return e.Err()
	}
	return nil
}

// Release stops the elector, which then writes the Lease free (empty
// holder, so that a waiting contender takes it at once). It returns nil,
// an error wrapping ErrLost when the leadership had been lost, or the
// release's error (the Lease then expires after its duration).
// Idempotent.
func (e *KubernetesElection) Release(ctx context.Context) error {
	return e.release(&e.holding, func(lostErr error) error {
		e.stopRun()
		select {
		case <-e.runDone:
		case <-ctx.Done():
			return fmt.Errorf("releasing the Kubernetes Lease %s: %w", e.lock.Describe(), ctx.Err())
		}
		e.lock.end()
		if lostErr != nil {
			return lostErr
		}
		if ok, err := e.lock.releaseResult(); !ok {
			if err == nil {
				err = errors.New("the elector wrote no release")
			}
			return fmt.Errorf("releasing the Kubernetes Lease %s: %w", e.lock.Describe(), err)
		}
		return nil
	})
}
