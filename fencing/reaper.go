package fencing

// The tombstone reaper: the active Guard removes the tombstones it knows of
// once they can no longer refuse anything an older writer may still send
// (see "Tombstones" in the package documentation).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// Reap says when an active Guard removes tombstones by itself.
type Reap string

// Reap settings.
const (
	// ReapAuto (the default, also ""): remove tombstones with a DELETE
	// conditioned on their ETag, where the store honours If-Match on
	// DELETE (Config.TombstoneDeletes unset); keep them for gc elsewhere.
	ReapAuto Reap = "auto"
	// ReapAlways: as ReapAuto, and also on stores whose DELETE ignores
	// If-Match, by HEAD, validation and an unconditional DELETE (the
	// window this leaves is in the package documentation).
	ReapAlways Reap = "always"
	// ReapOff: never; tombstones stay until `fencefs gc`.
	ReapOff Reap = "off"
)

const (
	// maxKnownTombstones caps the tombstones one Guard tracks (and its
	// ledger); further ones are left to gc.
	maxKnownTombstones = 10000
	// reapMaxWait: the reaper wakes at least this often (the oldest-age
	// gauge stays current).
	reapMaxWait = 30 * time.Second
	// ledgerGap spaces ledger rewrites (a burst of deletes costs one write
	// per gap, not one per delete).
	ledgerGap = time.Second
	// ledgersDir holds one ledger per binding that has tombstones to reap.
	ledgersDir = "tombstones/"
)

func (l layout) ledgersPrefix() string { return l.base + ledgersDir }
func (l layout) ledger(n uint64, claim string) string {
	return l.base + ledgersDir + epochName(n) + "-" + claim
}

// parseLedgerName returns the epoch of a ledger name (without prefix).
func parseLedgerName(s string) (uint64, bool) {
	if len(s) < 22 || s[20] != '-' {
		return 0, false
	}
	return parseEpochName(s[:20])
}

// tombEntry is one tombstone a Guard knows of.
type tombEntry struct {
	Key     string    `json:"key"`
	ETag    string    `json:"etag"`
	Written time.Time `json:"written"`
	// Due is when it may go: SignedRequestValidity after it was written
	// and after every entry of its ETag-ABA record.
	Due time.Time `json:"due"`
}

// ledgerDoc is the content of tombstones/<N>-<claim>: the tombstones the
// binding (N, claim) knows of and has not removed, so that a successor
// adopts them when this instance dies.
type ledgerDoc struct {
	Format     int         `json:"format"`
	Epoch      uint64      `json:"epoch"`
	Holder     string      `json:"holder"`
	ClaimID    string      `json:"claim_id"`
	Written    time.Time   `json:"written"`
	Tombstones []tombEntry `json:"tombstones"`
}

// reaper is the tombstone reaper of one Guard: the tombstones it knows of
// (by the sweep and by Delete), its ledger in the bucket, and its
// background loop. It reads and writes the bucket through objects and asks
// the Guard only what the Guard alone knows (reaperGuard): whether a
// binding is active, a validation round of it, and a hold on a key that
// keeps the Guard's own mutations of it back.
//
// Concurrency: every method is safe for concurrent use. mu guards the
// known set and the ledger bookkeeping; it is a leaf lock, never held
// across I/O nor while calling the Guard. runMu serialises rounds (and the
// last ledger write of stop) and is held across their I/O and their calls
// to the Guard (which take the Guard's mu). Lock order: runMu, then the
// Guard's mu, then mu (Bind calls start holding the Guard's mu).
type reaper struct {
	objects  // the store, the key layout, the clock, the holder id
	mode     Mode
	reap     Reap          // Config.ReapTombstones
	tombDel  bool          // Config.TombstoneDeletes
	validity time.Duration // Config.SignedRequestValidity
	log      *slog.Logger
	met      *metrics
	bg       context.Context // the loop's parent: ends when the Guard closes
	guard    reaperGuard

	mu        sync.Mutex
	known     map[string]tombEntry // by key; GUARDED_BY(mu)
	dirty     bool                 // known changed since the ledger write; GUARDED_BY(mu)
	ledger    string               // the ledger in the bucket ("" none); GUARDED_BY(mu)
	adopted   string               // the ledger name whose binding adopted its predecessors'; GUARDED_BY(mu)
	lastWrite time.Time            // of the ledger, wall clock; GUARDED_BY(mu)
	warned    bool                 // the cap was logged; GUARDED_BY(mu)
	reported  int                  // count in the shared gauge; GUARDED_BY(mu)

	runMu  sync.Mutex // serialises rounds
	kick   chan struct{}
	once   sync.Once
	cancel context.CancelFunc // stops the loop; GUARDED_BY(mu)
	done   chan struct{}      // closed when the loop ends; GUARDED_BY(mu)
}

// reaperGuard is what the reaper asks of its Guard. Each is called without
// the reaper's mu held.
type reaperGuard struct {
	// active returns the binding if the Guard is active (not closed or
	// rebinding, fencing not off).
	active func() (tokenState, bool)
	// validate checks with a register read that ts's binding is still the
	// newest (Guard.validate: latches fenced on a newer epoch).
	validate func(ctx context.Context, ts tokenState) error
	// hold keeps the Guard's own mutations of key back (they wait) until
	// release is called; errKeyBusy while one is in flight or key is held.
	hold func(key string) (release func(), err error)
}

// newReaper returns the reaper of a Guard over o configured by cfg. It
// does no I/O and starts nothing (see start).
func newReaper(o objects, cfg Config, log *slog.Logger, met *metrics, bg context.Context, guard reaperGuard) *reaper {
	return &reaper{
		objects: o, mode: cfg.Mode, reap: cfg.ReapTombstones, tombDel: cfg.TombstoneDeletes,
		validity: cfg.SignedRequestValidity, log: log, met: met, bg: bg, guard: guard,
		known: map[string]tombEntry{}, kick: make(chan struct{}, 1),
	}
}

// enabled reports whether this Guard removes tombstones by itself, or
// follows their removal by the bucket lifecycle rule.
func (r *reaper) enabled() bool {
	switch r.reap {
	case ReapOff:
		return false
	case ReapAlways:
		return true
	}
	return !r.tombDel || r.byLifecycle()
}

// byLifecycle reports whether the bucket lifecycle rule removes this
// Guard's tombstones (tombstone.go): the reaper then only checks that they
// went.
func (r *reaper) byLifecycle() bool {
	ok, _ := r.expiry.state()
	return ok
}

// note records that a tombstone with etag now stands at key,
// carrying record rec. Safe for concurrent use; no I/O.
func (r *reaper) note(key, etag string, rec record) {
	if r.mode == ModeOff || etag == "" {
		return
	}
	now := r.now()
	due := now.Add(r.validity)
	for _, e := range rec {
		if d := e.At.Add(r.validity); d.After(due) {
			due = d
		}
	}
	r.add([]tombEntry{{Key: key, ETag: objstore.NormalizeETag(etag), Written: now, Due: due}})
}

// add merges entries into the known set (a newer entry of a key
// replaces the older one) and wakes the loop. Where the lifecycle rule
// removes tombstones, an entry is due when the rule removes it.
func (r *reaper) add(entries []tombEntry) {
	lifecycle := r.byLifecycle()
	r.mu.Lock()
	for _, e := range entries {
		if lifecycle {
			if d := r.expiry.due(e.Written); d.After(e.Due) {
				e.Due = d
			}
		}
		old, ok := r.known[e.Key]
		if ok && !e.Written.After(old.Written) {
			continue
		}
		if !ok && len(r.known) >= maxKnownTombstones {
			if !r.warned {
				r.warned = true
				r.log.Warn("too many tombstones to track: further ones are left to fencefs gc", "limit", maxKnownTombstones)
			}
			continue
		}
		r.known[e.Key] = e
		r.dirty = true
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// forget drops key's entry if it still names etag.
func (r *reaper) forget(key, etag string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.known[key]; ok && e.ETag == etag {
		delete(r.known, key)
		r.dirty = true
	}
}

// committed is told of every mutation that landed: a Put or Copy replaced
// whatever tombstone this Guard knew of at its key.
func (r *reaper) committed(m *mutation) {
	if m.kind != kindPut {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.known[m.key]; ok {
		delete(r.known, m.key)
		r.dirty = true
	}
}

// start starts the background loop once (at the first activation).
func (r *reaper) start() {
	r.once.Do(func() {
		ctx, cancel := context.WithCancel(r.bg)
		done := make(chan struct{})
		r.mu.Lock()
		r.cancel, r.done = cancel, done
		r.mu.Unlock()
		go r.loop(ctx, done)
	})
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *reaper) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-t.C:
		}
		wait := r.reapOnce(ctx)
		t.Reset(wait)
	}
}

// stop stops the loop, writes the ledger one last
// time if the Guard is still active, and withdraws its gauge count.
func (r *reaper) stop(ctx context.Context) {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if cancel != nil {
		// Everything the loop does is bound by its context: it ends
		// promptly, and must have ended before Close waits for the
		// background work its validations add to.
		cancel()
		<-done
	}
	if ts, ok := r.guard.active(); ok && r.enabled() {
		r.runMu.Lock()
		r.writeLedger(ctx, ts, true)
		r.runMu.Unlock()
	}
	r.mu.Lock()
	r.met.tombstones(-r.reported, 0, 0)
	r.reported = 0
	r.mu.Unlock()
}

// reapOnce is one round of the loop: adopt predecessors' ledgers (once per
// binding), remove the tombstones that are due, write the ledger. It does
// nothing while the Guard is not active. It returns how long to wait
// before the next round.
func (r *reaper) reapOnce(ctx context.Context) time.Duration {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	defer r.report()
	ts, active := r.guard.active()
	if !active || !r.enabled() {
		return reapMaxWait
	}
	name := r.lay.ledger(ts.token, ts.claim)
	r.mu.Lock()
	adopt := r.adopted != name
	r.mu.Unlock()
	if adopt {
		r.adoptLedgers(ctx, ts, name)
	}
	now := r.now()
	var due []tombEntry
	r.mu.Lock()
	for _, e := range r.known {
		if !now.Before(e.Due) {
			due = append(due, e)
		}
	}
	r.mu.Unlock()
	left := 0
	if len(due) > 0 {
		left = r.reapDue(ctx, ts, due)
	}
	r.writeLedger(ctx, ts, false)
	wait := r.nextReap(r.now())
	if left > 0 && wait < time.Second {
		wait = time.Second // kept for now (busy key, storage error): not a busy loop
	}
	return wait
}

// nextReap is the wait until the earliest due entry, or the next ledger
// write, within [10ms, reapMaxWait].
func (r *reaper) nextReap(now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	wait := reapMaxWait
	for _, e := range r.known {
		if d := e.Due.Sub(now); d < wait {
			wait = d
		}
	}
	if r.dirty {
		if d := ledgerGap - time.Since(r.lastWrite); d < wait {
			wait = d
		}
	}
	return max(wait, 10*time.Millisecond)
}

// reapDue removes the due tombstones (or, where the lifecycle rule removes
// them, checks that they went); it returns how many it had to keep.
func (r *reaper) reapDue(ctx context.Context, ts tokenState, due []tombEntry) int {
	exact := !r.tombDel
	lifecycle := !exact && r.reap == ReapAuto && r.byLifecycle()
	if !exact && !lifecycle {
		// Only the leader removes tombstones unconditionally; the window
		// from here to the DELETE is in the package documentation.
		if err := r.guard.validate(ctx, ts); err != nil {
			r.log.Debug("tombstone reaper: not removing", "err", err)
			return len(due)
		}
	}
	var mu sync.Mutex
	left, removed := 0, 0
	_ = forEach(ctx, len(due), func(ctx context.Context, i int) error {
		e := due[i]
		var gone bool
		var err error
		switch {
		case exact:
			gone, err = r.reapExact(ctx, e)
		case lifecycle:
			gone, err = r.expired(ctx, e)
		default:
			gone, err = r.reapUnconditional(ctx, e)
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			left++
			r.log.Debug("tombstone reaper: kept for now", "key", e.Key, "err", err)
		case gone:
			removed++
			r.forget(e.Key, e.ETag)
		default:
			r.forget(e.Key, e.ETag) // replaced or removed by someone else
		}
		return nil
	})
	if removed > 0 {
		r.met.tombstonesRemoved(removed)
		r.log.Info("removed tombstones", "count", removed, "kept", left)
	}
	return left
}

// reapExact deletes e conditioned on its ETag: a newer write of the key is
// never deleted. gone=false with no error: the key holds something else.
func (r *reaper) reapExact(ctx context.Context, e tombEntry) (bool, error) {
	err := r.store.Delete(ctx, e.Key, objstore.Condition{IfMatch: e.ETag}) // the store retries transient failures
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, objstore.ErrPrecondition), errors.Is(err, objstore.ErrNotFound):
		return false, nil
	}
	return false, err
}

// errKeyBusy: a mutation of this Guard on the key is in flight.
var errKeyBusy = errors.New("a mutation of the key is in flight")

// reapUnconditional removes e on a store whose DELETE ignores If-Match: it
// holds back this Guard's own mutations of the key (begin waits), checks
// with a HEAD that the key still holds e's tombstone, and deletes.
func (r *reaper) reapUnconditional(ctx context.Context, e tombEntry) (bool, error) {
	release, err := r.guard.hold(e.Key)
	if err != nil {
		return false, err
	}
	defer release()
	info, exists, err := r.head(ctx, e.Key)
	if err != nil {
		return false, err
	}
	if !exists || !isTombstone(info) || objstore.NormalizeETag(info.ETag) != e.ETag {
		return false, nil
	}
	if err := r.store.Delete(ctx, e.Key, objstore.Condition{}); err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return false, err
	}
	return true, nil
}

// adoptLedgers merges the ledgers of older bindings (a crashed or fenced
// predecessor, this Guard's own previous binding) into the known set,
// writes this binding's ledger, and deletes theirs. Ledgers that cannot be
// read stay for the next binder.
func (r *reaper) adoptLedgers(ctx context.Context, ts tokenState, name string) {
	prefix := r.lay.ledgersPrefix()
	var names []string
	err := r.store.List(ctx, prefix, "", func(e objstore.Entry) error {
		if n, ok := parseLedgerName(strings.TrimPrefix(e.Key, prefix)); ok && !e.IsPrefix && e.Key != name && n <= ts.token {
			names = append(names, e.Key)
		}
		return nil
	})
	if err != nil {
		if ctx.Err() == nil { // else the Guard is closing: nothing failed
			r.log.Warn("tombstone reaper: listing ledgers failed; retrying later", "err", err)
		}
		return
	}
	etags := map[string]string{}
	for _, n := range names {
		doc, etag, err := r.readLedger(ctx, n)
		if errors.Is(err, objstore.ErrNotFound) {
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("tombstone reaper: cannot read a ledger; leaving it", "ledger", n, "err", err)
			}
			continue
		}
		r.add(doc.Tombstones)
		etags[n] = etag
	}
	if len(etags) > 0 {
		if err := r.writeLedger(ctx, ts, true); err != nil {
			return // theirs stay until ours holds their entries
		}
		for n, etag := range etags {
			cond := objstore.Condition{}
			if !r.tombDel {
				cond.IfMatch = etag
			}
			if err := r.store.Delete(ctx, n, cond); err != nil && !errors.Is(err, objstore.ErrNotFound) {
				r.log.Debug("tombstone reaper: deleting an adopted ledger failed", "ledger", n, "err", err)
			}
		}
		r.log.Info("adopted the tombstones of earlier mounts", "ledgers", len(etags))
	}
	r.mu.Lock()
	r.adopted = name
	r.mu.Unlock()
}

func (r *reaper) readLedger(ctx context.Context, key string) (ledgerDoc, string, error) {
	var doc ledgerDoc
	etag, err := r.readDoc(ctx, key, "tombstone ledger", 64<<20, &doc, func() int { return doc.Format })
	if err != nil {
		return ledgerDoc{}, "", err
	}
	return doc, etag, nil
}

// writeLedger writes this binding's ledger if the known set changed (and,
// unless force, the last write is ledgerGap old), or deletes it as soon as
// the set is empty. LOCKS_REQUIRED(r.runMu)
func (r *reaper) writeLedger(ctx context.Context, ts tokenState, force bool) error {
	name := r.lay.ledger(ts.token, ts.claim)
	r.mu.Lock()
	// An empty set deletes the ledger at once; rewrites keep the gap.
	if (!r.dirty && r.ledger == name) || (!force && len(r.known) > 0 && time.Since(r.lastWrite) < ledgerGap) {
		r.mu.Unlock()
		return nil
	}
	entries := make([]tombEntry, 0, len(r.known))
	for _, e := range r.known {
		entries = append(entries, e)
	}
	old := r.ledger
	r.dirty = false
	r.mu.Unlock()
	if len(entries) == 0 && old == "" {
		return nil
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Key < entries[j].Key })
	var err error
	if len(entries) == 0 {
		err = r.store.Delete(ctx, old, objstore.Condition{})
		if errors.Is(err, objstore.ErrNotFound) {
			err = nil
		}
	} else {
		err = r.putDoc(ctx, name, ledgerDoc{Format: FormatVersion, Epoch: ts.token, Holder: r.holder,
			ClaimID: ts.claim, Written: r.now().UTC(), Tombstones: entries})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.dirty = true
		if ctx.Err() == nil {
			r.log.Warn("tombstone reaper: writing the ledger failed; retrying", "err", err)
		}
		return fmt.Errorf("writing the tombstone ledger: %w", err)
	}
	r.lastWrite = time.Now()
	r.ledger = ""
	if len(entries) > 0 {
		r.ledger = name
	}
	return nil
}

// report updates the gauges: how many tombstones this Guard
// knows of, the age of the oldest, and the time until the next is due to
// go (-1: none goes by itself, they wait for fencefs gc).
func (r *reaper) report() {
	now := r.now()
	enabled := r.enabled()
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.statusLocked(now, enabled)
	age, next := 0.0, 0.0
	if !st.Oldest.IsZero() {
		age = max(now.Sub(st.Oldest).Seconds(), 0)
	}
	switch {
	case !enabled && st.Known > 0:
		next = -1
	case !st.NextRemoval.IsZero():
		next = max(st.NextRemoval.Sub(now).Seconds(), 0)
	}
	r.met.tombstones(len(r.known)-r.reported, age, next)
	r.reported = len(r.known)
}
