package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// DefaultEtcdPrefix is the etcd key prefix of fencefs elections when
// ElectionOptions.Prefix is empty: the election NAME campaigns under
// DefaultEtcdPrefix + NAME + "/" (one key per candidate, named by its
// etcd lease).
const DefaultEtcdPrefix = "/fencefs/elections/"

// HowElected is the Acquisition.How (and the acquisitions_total label) of
// an etcd election won.
const HowElected = "elected"

// ElectionOptions configures Campaign.
type ElectionOptions struct {
	// Prefix is the etcd key prefix of the elections ("" means
	// DefaultEtcdPrefix); the election NAME lives under Prefix + NAME + "/".
	Prefix string
	// TTL is the session's etcd lease TTL, a whole number of seconds (etcd
	// leases have a one-second granularity; the server raises TTLs below
	// its minimum, 2 s with default timings). Zero means DefaultTTL.
	TTL time.Duration
	// Holder is the value campaigned with (for people reading etcd); empty
	// means "hostname:pid".
	Holder string
	// Bind binds token, the leader key's create revision, once elected:
	// on a fencefs mount, set its root xattr user.fencefs.token to it; in
	// a program, Guard.Bind(ctx, token). Its ctx is cancelled if the
	// session ends meanwhile. Required.
	Bind func(ctx context.Context, token uint64) error
	// Logger receives progress and warnings; nil discards them.
	Logger *slog.Logger
	// Registerer receives the election's metrics: the fencefs_lease_*
	// metrics of Lease, labelled by election name; nil records none.
	Registerer prometheus.Registerer
}

// Election is an etcd election won: the leadership lasts as long as the
// etcd session (the client keeps its lease alive) and the leader key
// exist. Create with Campaign; end with Release. Safe for concurrent use.
type Election struct {
	holding // Name, Lost, Err
	session *concurrency.Session
	elec    *concurrency.Election
	token   uint64

	watcher // the loss watch, Release once
}

// Campaign blocks until it wins the election name in etcd (or ctx is
// done), then binds the leader key's create revision as the fencing token
// through opts.Bind. Revisions only grow within one etcd cluster, and a
// later leader's key is created after an earlier leader's, so each leader's
// token is above every earlier leader's. ctx bounds the wait and the bind,
// not the leadership: it lasts until Release or the session's end.
//
// Errors: ErrBadName; ctx's error while waiting; etcd's errors (unreachable
// endpoints surface as ctx's deadline); the bind's error (the election is
// then resigned).
func Campaign(ctx context.Context, client *clientv3.Client, name string, opts ElectionOptions) (*Election, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if opts.Bind == nil {
		return nil, errors.New("lease: Campaign needs ElectionOptions.Bind")
	}
	ttl := opts.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if ttl < time.Second || ttl%time.Second != 0 {
		return nil, fmt.Errorf("etcd session TTL %v is not a whole number of seconds (accepted: 1s, 2s, …)", ttl)
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultEtcdPrefix
	}
	holder := opts.Holder
	if holder == "" {
		holder = defaultHolder()
	}
	log := orDiscard(opts.Logger).With("election", name)
	met := newMetrics(opts.Registerer, name)

	e, err := campaign(ctx, client, prefix+name, holder, int(ttl/time.Second), log)
	if err != nil {
		met.ended(false)
		return nil, err
	}
	e.start(name, log, met, HowElected)
	e.startWatch(e.watch)
	log.Info("elected", "token", e.token, "key", e.elec.Key())
	if err := bindElected(ctx, e, &e.holding, e.token, opts.Bind, ttl); err != nil {
		return nil, err
	}
	return e, nil
}

// campaign wins the election under pfx with a new session, starting over
// with a new session when the one campaigning ends before winning (its key
// is gone: a "win" then would not be a leadership).
func campaign(ctx context.Context, client *clientv3.Client, pfx, holder string, ttlSec int, log *slog.Logger) (*Election, error) {
	for {
		s, err := concurrency.NewSession(client, concurrency.WithTTL(ttlSec))
		if err != nil {
			return nil, fmt.Errorf("creating an etcd session: %w", err)
		}
		elec := concurrency.NewElection(s, pfx)
		cctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-s.Done():
				cancel()
			case <-cctx.Done():
			}
		}()
		log.Info("campaigning", "prefix", pfx, "ttl_s", ttlSec)
		err = elec.Campaign(cctx, holder)
		cancel()
		if err == nil {
			var resp *clientv3.GetResponse
			resp, err = client.Get(ctx, elec.Key())
			if err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision == elec.Rev() && sessionAlive(s) {
				tok, terr := coordinatorToken(EtcdSource, elec.Rev())
				if terr != nil {
					closeSession(s, ttlSec)
					return nil, terr
				}
				return &Election{session: s, elec: elec, token: tok}, nil
			}
		}
		alive := sessionAlive(s)
		closeSession(s, ttlSec)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil && alive {
			return nil, fmt.Errorf("campaigning in etcd: %w", err)
		}
		log.Warn("the etcd session ended while campaigning; starting over with a new one")
	}
}

func sessionAlive(s *concurrency.Session) bool {
	select {
	case <-s.Done():
		return false
	default:
		return true
	}
}

// closeSession revokes the session's lease (bounded by its TTL: after that
// it expires anyway).
func closeSession(s *concurrency.Session, ttlSec int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(ttlSec)*time.Second)
	defer cancel()
	_, _ = s.Client().Revoke(ctx, s.Lease())
	s.Orphan()
}

// watch ends the leadership when the session ends (its keepalives were not
// answered within the TTL: etcd unreachable, the lease expired or revoked)
// or the leader key is deleted, and counts the session's keepalives in the
// renewal metrics. Each is watched apart: opening the key watch blocks
// while etcd is unreachable.
func (e *Election) watch(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for resp := range e.session.Client().Watch(ctx, e.elec.Key(), clientv3.WithRev(e.elec.Rev()+1)) {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					e.lose(fmt.Errorf("%w: the leader key %s is gone (its etcd lease expired or was revoked, or the key was deleted)", ErrLost, e.elec.Key()))
					return
				}
			}
		}
	}()
	wg.Add(1)
	go func() { // the renewal metrics: every answered keepalive
		defer wg.Done()
		kach, err := e.session.Client().KeepAlive(ctx, e.session.Lease())
		if err != nil {
			return
		}
		for range kach {
			e.met.wrote()
			e.met.renewal("ok")
		}
	}()
	select {
	case <-ctx.Done():
	case <-e.session.Done():
		e.lose(fmt.Errorf("%w: the etcd session ended (its keepalives went unanswered for the TTL, or its lease expired or was revoked)", ErrLost))
	}
}

// Token returns the fencing token: the leader key's create revision.
func (e *Election) Token() uint64 { return e.token }

// Key returns the leader key in etcd.
func (e *Election) Key() string { return e.elec.Key() }

// Held reports whether the leadership is still this process's by its own
// reckoning: not lost or released, and the session alive (the client
// closes it when no keepalive was answered for the TTL). A true result may
// be stale by the time the caller acts on it: writes rely on the token.
func (e *Election) Held() bool {
	return e.Err() == nil && sessionAlive(e.session)
}

// Confirm reads the leader key (a linearizable read): the leadership is
// confirmed while the key exists with this election's create revision, and
// lost when it is gone (its lease expired, or it was deleted) or the
// session has ended (Leader.Confirm).
func (e *Election) Confirm(ctx context.Context) error {
	if err := e.Err(); err != nil {
		return err
	}
	if !sessionAlive(e.session) {
		e.lose(fmt.Errorf("%w: the etcd session ended (its keepalives went unanswered for the TTL, or its lease expired or was revoked)", ErrLost))
		return e.Err()
	}
	resp, err := e.session.Client().Get(ctx, e.elec.Key())
	if err != nil {
		return fmt.Errorf("confirming the leadership in etcd: %w", err)
	}
	if len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != e.elec.Rev() {
		e.lose(fmt.Errorf("%w: the leader key %s is gone (its etcd lease expired or was revoked, or the key was deleted)", ErrLost, e.elec.Key()))
		return e.Err()
	}
	return nil
}

// Release resigns (deletes the leader key, so that the next candidate wins
// at once) and revokes the session's lease. It returns nil, an error
// wrapping ErrLost when the leadership had been lost, or etcd's error (the
// key then goes with the lease, within the TTL). Idempotent.
func (e *Election) Release(ctx context.Context) error {
	return e.release(&e.holding, func(lostErr error) error {
		err := lostErr
		if err == nil {
			if rerr := e.elec.Resign(ctx); rerr != nil {
				err = fmt.Errorf("resigning from etcd election %s: %w", e.name, rerr)
			}
		}
		if sessionAlive(e.session) { // else it expired, or etcd is unreachable
			if _, rerr := e.session.Client().Revoke(ctx, e.session.Lease()); rerr != nil && err == nil && !errors.Is(rerr, rpctypes.ErrLeaseNotFound) {
				err = fmt.Errorf("revoking the etcd session of election %s: %w", e.name, rerr)
			}
		}
		e.session.Orphan()
		return err
	})
}
