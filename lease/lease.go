package lease

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/internal/ctxsleep"
	"github.com/fencefs/fencefs/objstore"
	"github.com/prometheus/client_golang/prometheus"
)

// Errors. Errors from this package wrap one of these, a context error, or a
// storage error (objstore sentinels).
var (
	// ErrLost: the lease is no longer held: it could not be renewed within
	// its TTL (minus the safety margin), or someone else took it over, or
	// its object was removed. The message says which.
	ErrLost = errors.New("lease lost")
	// ErrReleased: Err after a successful Release.
	ErrReleased = errors.New("lease released")
	// ErrBadName: an invalid lease name (see ValidName).
	ErrBadName = errors.New("invalid lease name")
	// ErrFormat: the lease object is in a format this package does not
	// understand (written by a newer fencefs).
	ErrFormat = errors.New("unknown lease object format")
	// ErrToken: the token bound for the lease is not above the one the
	// previous holder recorded, so tokens would not be monotonic.
	ErrToken = errors.New("fencing token not above the previous holder's")
)

// DefaultTTL is the TTL when Options.TTL is zero.
const DefaultTTL = 15 * time.Second

// MinTTL is the smallest accepted TTL.
const MinTTL = 100 * time.Millisecond

// Options configures Acquire. The zero value is a lease with DefaultTTL, in
// the bucket's fence domain, without a token.
type Options struct {
	// TTL is how long the lease lasts without renewal; the holder renews at
	// TTL/3 and gives up at TTL*4/5 without a successful renewal. Zero means
	// DefaultTTL; below MinTTL is refused.
	TTL time.Duration
	// Domain is the fence domain's key prefix ("" for the whole bucket, else
	// ending in "/"), as in fencing.Config.Domain.
	Domain string
	// Holder describes this holder in the lease object (for people reading
	// it); empty means "hostname:pid". Identity is a random id per Acquire.
	Holder string
	// Guard, if set, is bound to the register's next epoch
	// (Guard.Bind(ctx, 0)) once the lease is held, and the token recorded.
	Guard *fencing.Guard
	// Bind, if set instead of Guard, binds a fencing token once the lease is
	// held and returns it (fencefs run sets the mount's root xattr). Its ctx
	// is cancelled if the lease is lost meanwhile.
	Bind func(ctx context.Context) (uint64, error)
	// Poll is how often a waiting contender re-reads the lease; zero means
	// TTL/4, at most 1 s.
	Poll time.Duration
	// Logger receives progress and warnings; nil discards them.
	Logger *slog.Logger
	// Registerer receives the lease's metrics (fencefs_lease_*, labelled
	// by lease name); nil records none.
	Registerer prometheus.Registerer
}

// Acquisition says how a lease was acquired.
type Acquisition struct {
	// How is HowCreated, HowReleased or HowExpired.
	How string
	// PrevHolder is the previous holder, when there was one. PrevToken is
	// the highest token recorded through the lease before (carried over
	// holders that bound none); the new holder's token must exceed it.
	PrevHolder string
	PrevToken  uint64
}

// Lease is a held lease. Create with Acquire; end with Release. Safe for
// concurrent use.
type Lease struct {
	holding // Name, Lost, Err

	// Constant after Acquire.
	store objstore.Store
	key   string
	id    string
	ttl   time.Duration
	acq   Acquisition

	stop     chan struct{}      // closed to stop the renewer
	done     chan struct{}      // closed when the renewer has exited
	bg       context.Context    // renewals run under it; cancelled by stopRenewer
	cancelBG context.CancelFunc //
	stopOnce sync.Once

	// wmu serializes writes of the lease object (held across I/O).
	wmu  sync.Mutex
	pend pending // GUARDED_BY(wmu)

	mu       sync.Mutex
	cur      current // GUARDED_BY(mu); changed only with wmu held too
	token    uint64  // GUARDED_BY(mu): the token to record (0: none)
	released bool    // GUARDED_BY(mu)
}

// current is the holder's knowledge of the object version that is its own.
type current struct {
	etag string
	rec  record
	// basis is the start of the earliest write attempt that may have
	// produced etag: the deadline is computed from it.
	basis time.Time
}

// pending remembers a write whose outcome is not known yet, so that a
// later read recognising it (our id, its seq) can adopt it with the right
// basis.
type pending struct {
	seq   uint64 // 0: none
	start time.Time
}

// Acquire blocks until it holds the lease name (or ctx is done), then, when
// Options.Guard or Options.Bind is set, binds a fencing token and records it.
// ctx bounds the wait and the bind, not the lease's life: the returned lease
// is renewed in the background until Release or loss.
//
// Errors: ErrBadName; ctx's error while waiting; ErrFormat; storage errors
// that retrying cannot fix (objstore.ErrAuth, ErrNoBucket, ErrInvalid);
// the bind's error, ErrToken, or ErrLost during binding (the lease is then
// released). Transient storage errors while waiting are logged and retried.
func Acquire(ctx context.Context, store objstore.Store, name string, opts Options) (*Lease, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	if opts.TTL < MinTTL {
		return nil, fmt.Errorf("lease %q: TTL %v is below the minimum %v", name, opts.TTL, MinTTL)
	}
	if opts.Guard != nil && opts.Bind != nil {
		return nil, fmt.Errorf("lease %q: Options.Guard and Options.Bind are exclusive", name)
	}
	if opts.Domain != "" && !strings.HasSuffix(opts.Domain, "/") {
		return nil, fmt.Errorf("lease %q: domain %q must be empty or end with \"/\"", name, opts.Domain)
	}
	if opts.Poll <= 0 {
		opts.Poll = defaultPoll(opts.TTL)
	}
	if opts.Holder == "" {
		opts.Holder = defaultHolder()
	}
	l := &Lease{
		holding: holding{
			name:    name,
			log:     orDiscard(opts.Logger).With("lease", name),
			met:     newMetrics(opts.Registerer, name),
			lostMsg: "lease lost",
			lost:    make(chan struct{}),
		},
		store: store,
		key:   Key(opts.Domain, name),
		id:    randomID(),
		ttl:   opts.TTL,
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	if err := l.acquire(ctx, opts); err != nil {
		return nil, err
	}
	l.met.acquired(l.acq.How)
	l.bg, l.cancelBG = context.WithCancel(context.Background())
	go l.renewLoop()

	if err := l.bindAndRecord(ctx, opts); err != nil {
		return nil, err
	}
	l.log.Info("lease acquired", "how", l.acq.How, "previous_holder", l.acq.PrevHolder,
		"previous_token", l.acq.PrevToken, "token", l.Token())
	return l, nil
}

// bindAndRecord binds a fencing token for the lease just acquired, when
// Options.Guard or Options.Bind is set, and records it in the lease object
// (else the next renewal records it). On an error the lease is released.
func (l *Lease) bindAndRecord(ctx context.Context, opts Options) error {
	bind := opts.Bind
	if opts.Guard != nil {
		g := opts.Guard
		bind = func(ctx context.Context) (uint64, error) { return g.Bind(ctx, 0) }
	}
	if bind == nil {
		return nil
	}
	tok, err := l.bindToken(ctx, bind)
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.ttl)
		defer cancel()
		if rerr := l.Release(rctx); rerr != nil && !errors.Is(rerr, ErrLost) {
			l.log.Warn("releasing the lease after a failed bind", "err", rerr)
		}
		return fmt.Errorf("lease %q: binding a fencing token: %w", l.name, err)
	}
	if err := l.RecordToken(ctx, tok); err != nil {
		if errors.Is(err, ErrLost) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.ttl)
			defer cancel()
			_ = l.Release(rctx)
			return fmt.Errorf("lease %q: recording the token: %w", l.name, err)
		}
		// The renewer records it with its next renewal.
		l.log.Warn("could not record the token yet; the next renewal will", "token", tok, "err", err)
	}
	return nil
}

// acquire waits for the lease and writes it as ours.
func (l *Lease) acquire(ctx context.Context, opts Options) error {
	var (
		obs      observation
		attempts = map[uint64]time.Time{} // seq of our writes → first attempt start
		waiting  string                   // last holder logged as waited for
	)
	for {
		v, err := readView(ctx, l.store, l.key)
		now := time.Now()
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return fmt.Errorf("lease %q: waiting: %w", l.name, cerr)
			}
			if permanent(err) {
				return fmt.Errorf("lease %q: %w", l.name, err)
			}
			l.log.Warn("reading the lease failed; retrying", "err", err)
			if err := ctxsleep.Sleep(ctx, jitter(opts.Poll)); err != nil {
				return fmt.Errorf("lease %q: waiting: %w", l.name, err)
			}
			continue
		}
		if v.rec != nil && v.rec.ID == l.id {
			// A write of ours whose response was lost landed after all.
			start, ok := attempts[v.rec.Seq]
			if !ok {
				return fmt.Errorf("lease %q: found a version with our id but an unknown seq %d", l.name, v.rec.Seq)
			}
			l.cur = current{etag: v.etag, rec: *v.rec, basis: start}
			return nil
		}
		d := decide(&obs, v, opts.TTL, now)
		if d.act == actWait {
			if who := v.describe(); who != waiting {
				l.log.Info("waiting for the lease", "holder", who)
				waiting = who
			}
			if err := ctxsleep.Sleep(ctx, min(d.wait, jitter(opts.Poll))); err != nil {
				return fmt.Errorf("lease %q: waiting for %s: %w", l.name, v.describe(), err)
			}
			continue
		}

		rec, acq, cond := l.claim(opts.Holder, d, v)
		start := time.Now()
		if _, ok := attempts[rec.Seq]; !ok {
			attempts[rec.Seq] = start
		}
		info, err := l.put(ctx, rec, cond)
		if err == nil {
			l.cur = current{etag: objstore.NormalizeETag(info.ETag), rec: rec, basis: attempts[rec.Seq]}
			l.acq = acq
			return nil
		}
		switch {
		case errors.Is(err, objstore.ErrPrecondition):
			// Someone else wrote first; read again.
		case ctx.Err() != nil:
			l.abandon(ctx, attempts)
			return fmt.Errorf("lease %q: waiting: %w", l.name, ctx.Err())
		case permanent(err):
			return fmt.Errorf("lease %q: %w", l.name, err)
		default:
			// Outcome unknown: the next read tells (our id and seq).
			l.log.Warn("writing the lease failed; retrying", "err", err)
			if err := ctxsleep.Sleep(ctx, jitter(opts.Poll)); err != nil {
				l.abandon(ctx, attempts)
				return fmt.Errorf("lease %q: waiting: %w", l.name, err)
			}
		}
	}
}

// claim returns the record that claims the lease as decided by d over the
// version v read (a create, or a take-over conditioned on v's ETag), what
// Acquisition reports for it, and the write's condition.
func (l *Lease) claim(holder string, d decision, v view) (record, Acquisition, objstore.Condition) {
	rec := record{
		Format:    FormatVersion,
		Name:      l.name,
		Holder:    holder,
		ID:        l.id,
		TTLMillis: l.ttl.Milliseconds(),
		Seq:       1,
	}
	acq := Acquisition{How: d.how}
	cond := objstore.Condition{IfNoneMatch: true}
	if d.act == actTake {
		cond = objstore.Condition{IfMatch: v.etag}
		if v.rec != nil {
			rec.Seq = v.rec.Seq + 1
			rec.PrevToken = v.rec.maxToken()
			acq.PrevHolder, acq.PrevToken = v.rec.Holder, v.rec.maxToken()
		}
	}
	wall := time.Now().UTC().Round(0)
	rec.AcquiredAt, rec.RenewedAt = wall, wall
	return rec, acq, cond
}

// abandon releases the lease if a write of ours whose outcome is unknown
// landed after all, so that others need not wait a TTL for it (best effort,
// bounded).
func (l *Lease) abandon(ctx context.Context, attempts map[uint64]time.Time) {
	if len(attempts) == 0 {
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(l.ttl, 5*time.Second))
	defer cancel()
	v, err := readView(actx, l.store, l.key)
	if err != nil || v.rec == nil || v.rec.ID != l.id {
		return
	}
	r := *v.rec
	r.Seq++
	r.Released = true
	r.RenewedAt = time.Now().UTC().Round(0)
	if _, err := l.put(actx, r, objstore.Condition{IfMatch: v.etag}); err != nil {
		l.log.Warn("could not release an abandoned acquisition; it expires after its TTL", "err", err)
	}
}

// bindToken runs bind under a context cancelled if the lease is lost, and
// checks the result.
func (l *Lease) bindToken(ctx context.Context, bind func(context.Context) (uint64, error)) (uint64, error) {
	bctx, cancel := l.whileHeld(ctx)
	defer cancel()
	tok, err := bind(bctx)
	if err == nil && tok == 0 {
		err = errors.New("the bind returned no token")
	}
	if !l.Held() {
		// Lost while binding: the token is worthless.
		if lerr := l.Err(); lerr != nil {
			return 0, lerr
		}
		return 0, fmt.Errorf("%w: the lease expired while binding", ErrLost)
	}
	if err != nil {
		return 0, err
	}
	if tok <= l.acq.PrevToken {
		return 0, fmt.Errorf("%w: bound %d, previous holder %s recorded %d", ErrToken, tok, l.acq.PrevHolder, l.acq.PrevToken)
	}
	return tok, nil
}

// put writes rec at the lease key under cond.
func (l *Lease) put(ctx context.Context, rec record, cond objstore.Condition) (objstore.ObjectInfo, error) {
	body := rec.encode()
	return l.store.Put(ctx, l.key, bytes.NewReader(body), int64(len(body)), objstore.PutOptions{
		Cond:        cond,
		ContentType: "application/json",
		Shape:       objstore.ShapePlain,
	})
}

// permanent reports storage errors that retrying will not fix.
func permanent(err error) bool {
	return errors.Is(err, objstore.ErrAuth) || errors.Is(err, objstore.ErrNoBucket) ||
		errors.Is(err, objstore.ErrInvalid) || errors.Is(err, ErrFormat)
}

// writeLocked writes the next version of the lease object: the current
// record with the desired token (and Released when release is set), the
// next seq and a fresh renewed_at, If-Match on the current ETag. A write
// whose outcome is unknown, or refused, is resolved by reading the object:
// our id with the seq we tried means it landed.
//
// Errors: ErrLost (someone else's version is there, or none); otherwise a
// transient error after which the state is unchanged and a retry is safe.
// LOCKS_REQUIRED(l.wmu)
func (l *Lease) writeLocked(ctx context.Context, release bool) error {
	for {
		l.mu.Lock()
		cur, tok := l.cur, l.token
		l.mu.Unlock()
		want := func(r *record) {
			if tok != 0 {
				r.Token = tok
			}
			if release {
				r.Released = true
			}
		}
		next := cur.rec
		want(&next)
		next.Seq = cur.rec.Seq + 1
		next.RenewedAt = time.Now().UTC().Round(0)
		if l.pend.seq != next.Seq {
			l.pend = pending{seq: next.Seq, start: time.Now()}
		}
		info, err := l.put(ctx, next, objstore.Condition{IfMatch: cur.etag})
		if err == nil {
			l.adopt(objstore.NormalizeETag(info.ETag), next, l.pend.start)
			return nil
		}
		if ctx.Err() != nil || permanent(err) {
			return err
		}
		v, rerr := readView(ctx, l.store, l.key)
		if rerr != nil {
			return fmt.Errorf("%w (and reading the lease back: %v)", err, rerr)
		}
		switch {
		case !v.exists:
			return fmt.Errorf("%w: the lease object %s was removed", ErrLost, l.key)
		case v.rec != nil && v.rec.ID == l.id && v.rec.Seq == l.pend.seq:
			l.adopt(v.etag, *v.rec, l.pend.start)
			check := *v.rec
			want(&check)
			if check == *v.rec {
				return nil
			}
			// An earlier write (a renewal) landed; write the desired state.
		case v.etag == cur.etag:
			return err // nothing changed: our write did not land
		case v.rec != nil && v.rec.Released:
			return fmt.Errorf("%w: released by %s", ErrLost, v.rec.Holder)
		case v.rec != nil && v.rec.ID == l.id:
			return fmt.Errorf("%w: the lease object holds an unexpected version of ours (seq %d)", ErrLost, v.rec.Seq)
		default:
			return fmt.Errorf("%w: taken over by %s", ErrLost, v.describe())
		}
	}
}

// adopt records a version of the object as ours.
// LOCKS_REQUIRED(l.wmu)
func (l *Lease) adopt(etag string, rec record, basis time.Time) {
	l.mu.Lock()
	l.cur = current{etag: etag, rec: rec, basis: basis}
	l.mu.Unlock()
	l.pend = pending{}
	l.met.wrote()
}

func randomID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("lease: crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// jitter spreads d by ±20% so that contenders do not poll in lockstep.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*mrand.Float64()))
}
