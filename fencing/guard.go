package fencing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// Defaults for Config fields left zero.
const (
	DefaultSignedRequestValidity = 15 * time.Minute
	defaultOpTimeout             = 30 * time.Second
)

// Guard is the single door for mutations of the bucket: it binds a fencing
// token, runs the takeover sweep, and makes every Put, Copy and Delete
// conditional on both the object's base version and a validated epoch (see
// the package documentation).
//
// Concurrency: all methods are safe for concurrent use. Mutations run in
// parallel; Bind waits until the mutations in flight have finished and
// holds new ones (they wait, bounded by their context) until the sweep is
// done. Lock order: bindMu, then mu, then intents.mu, a batch's own mutex
// or tombs.mu (the reaper's round mutex, tombs.runMu, comes before mu).
// No lock is held across I/O (but the reaper's round mutex, which only
// orders its own rounds).
//
// The Guard keeps the binding and admission state and composes the parts
// that need only the bucket (objects), a few settings and a few answers
// from it: the intent journal (intentJournal, intents.go and journal.go),
// the takeover sweep (sweeper, sweep.go) and the tombstone reaper (reaper,
// reaper.go).
type Guard struct {
	// Dependencies and configuration: constant after New.
	objects // the store, the key layout, the clock, the holder id
	cfg     Config
	log     *slog.Logger
	met     *metrics
	bg      context.Context // cancelled by Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup // background goroutines (intent deletion, journal trims)

	bindMu sync.Mutex // serialises Bind

	mu       sync.Mutex
	state    State         // GUARDED_BY(mu)
	token    uint64        // bound token; GUARDED_BY(mu)
	claim    string        // claim id of the binding; GUARDED_BY(mu)
	line     uint64        // the binding's line (binding.go, followsDirectly); GUARDED_BY(mu)
	reg      Register      // newest register seen; GUARDED_BY(mu)
	regETag  string        // ETag of reg ("" = none read); GUARDED_BY(mu)
	reason   string        // why fenced; GUARDED_BY(mu)
	sweepErr error         // last failed sweep, while state is sweeping; GUARDED_BY(mu)
	binding  bool          // a Bind is draining or claiming; GUARDED_BY(mu)
	inflight int           // mutations in flight; GUARDED_BY(mu)
	changed  chan struct{} // closed and replaced on every change above; GUARDED_BY(mu)
	closed   bool          // GUARDED_BY(mu)
	notify   chan struct{} // Changed's channel, made for shown; GUARDED_BY(mu)
	shown    shown         // GUARDED_BY(mu)
	// reported is the state this Guard counts itself in for the shared
	// state gauge ("" once closed). GUARDED_BY(mu)
	reported State
	// busy counts the mutations in flight by key; reaping holds the keys
	// whose tombstone the reaper removes unconditionally right now
	// (begin waits for them). GUARDED_BY(mu)
	busy    map[string]int
	reaping map[string]bool

	// The parts the Guard composes, each with its own lock (taken after
	// mu, never held while calling back into the Guard): constant after New.
	intents *intentJournal // the intents of mutations in flight and their journal (intents.go, journal.go)
	tombs   *reaper        // tombstones to remove (reaper.go)

	vals batch[valResult] // validation rounds (register reads)
}

// tokenState is what a mutation captured at its start.
type tokenState struct {
	mode  Mode
	token uint64
	claim string
}

// New returns an unbound Guard over store (mode off: a Guard that passes
// mutations through with per-object conditions only). It does no I/O.
// Errors: an unknown mode or ReapTombstones, or a Holder or Domain that cannot be used.
func New(store objstore.Store, cfg Config) (*Guard, error) {
	if store == nil {
		return nil, errors.New("fencing: nil store")
	}
	if err := pick(&cfg.Mode, "mode", ModeStrict, ModeFast, ModeOff); err != nil {
		return nil, err
	}
	if err := pick(&cfg.ReapTombstones, "tombstone reaping", ReapAuto, ReapAlways, ReapOff); err != nil {
		return nil, err
	}
	if cfg.Domain != "" && !strings.HasSuffix(cfg.Domain, "/") {
		return nil, fmt.Errorf("fencing: domain %q must end in \"/\"", cfg.Domain)
	}
	if cfg.SignedRequestValidity <= 0 {
		cfg.SignedRequestValidity = DefaultSignedRequestValidity
	}
	if cfg.ReleaseGrace == 0 {
		cfg.ReleaseGrace = DefaultReleaseGrace
	}
	if cfg.IntentLinger < 0 {
		cfg.IntentLinger = 0
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = defaultOpTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	holder := cfg.Holder
	if holder == "" {
		holder = defaultHolder()
	}
	if err := objstore.ValidateMeta(map[string]string{MetaHolder: holder}); err != nil || strings.ContainsAny(holder, ",@") {
		return nil, fmt.Errorf("fencing: holder %q: use printable ASCII without ',' '@' or surrounding blanks", holder)
	}
	bg, cancel := context.WithCancel(context.Background())
	g := &Guard{
		objects: objects{store: store, lay: newLayout(cfg.Domain), sizing: objstore.SizingOf(store),
			now: cfg.Now, holder: holder, spoolDir: cfg.SpoolDir, expiry: newTombExpiry(store, cfg)},
		cfg:     cfg,
		log:     cfg.Logger.With("component", "fencing"),
		met:     newMetrics(cfg.Registerer),
		bg:      bg,
		cancel:  cancel,
		state:   StateUnbound,
		changed: make(chan struct{}),
		notify:  make(chan struct{}),
		busy:    map[string]int{},
		reaping: map[string]bool{},
	}
	g.intents = newIntentJournal(g.objects, cfg, g.log, bg, &g.wg, journalGuard{
		fenced: g.fencedIn,
		latch:  g.latchFenced,
		validate: func(ctx context.Context, ts tokenState, key string) error {
			return g.validate(ctx, ts, "", key)
		},
		seen:       g.noteRegister,
		idleFenced: g.idleFenced,
	})
	g.tombs = newReaper(g.objects, cfg, g.log, g.met, bg, reaperGuard{
		active:   g.activeState,
		validate: func(ctx context.Context, ts tokenState) error { return g.validate(ctx, ts, "", "") },
		hold:     g.holdKey,
	})
	if cfg.Mode == ModeOff {
		g.state = StateOff
	}
	g.shown = g.shownLocked()
	g.report()
	return g, nil
}

// pick checks an enumerated setting: empty becomes the first of allowed
// (the default); anything not among allowed is an error naming what.
func pick[T ~string](v *T, what string, allowed ...T) error {
	if *v == "" {
		*v = allowed[0]
		return nil
	}
	if slices.Contains(allowed, *v) {
		return nil
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	list := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	return fmt.Errorf("fencing: unknown %s %q (%s)", what, *v, list)
}

// defaultHolder is a readable per-instance id: host name, pid and a random
// suffix.
func defaultHolder() string {
	host, _ := os.Hostname()
	var b strings.Builder
	for _, r := range host {
		if r > 0x20 && r < 0x7f && r != ',' && r != '@' {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		b.WriteString("host")
	}
	return fmt.Sprintf("%s-%d-%s", b.String(), os.Getpid(), randomID(3))
}

// Holder returns this Guard's holder id.
func (g *Guard) Holder() string { return g.holder }

// Mode returns the Guard's mode.
func (g *Guard) Mode() Mode { return g.cfg.Mode }

// Status returns a snapshot of the Guard's state. It does no I/O.
func (g *Guard) Status() Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.statusLocked()
}

// statusLocked is Status for a caller holding g.mu.
// LOCKS_REQUIRED(g.mu)
func (g *Guard) statusLocked() Status {
	st := Status{
		State:       g.state,
		Token:       g.token,
		Epoch:       g.reg.Epoch,
		Holder:      g.holder,
		EpochHolder: g.reg.Holder,
		Reason:      g.reason,
	}
	if g.state == StateSweeping && g.sweepErr != nil {
		st.Reason = "takeover sweep failed: " + g.sweepErr.Error()
	}
	return st
}

// Admit tells, without I/O, whether a mutation op may start: nil while the
// Guard is active, sweeping (the mutation will wait for the sweep) or off;
// an error wrapping ErrFenced once it is known fenced, counted as a refusal
// of op in fencefs_fencing_fenced_refusals_total (like the refusals of the
// Guard's own methods); ErrReadOnly without a bound token. It also returns
// the Status it decided on. A filesystem calls it first, so that a write(2)
// on a fenced mount fails at once with the right errno rather than at
// close; every mutation is still decided again at the storage.
func (g *Guard) Admit(op string) (Status, error) {
	st := g.Status()
	switch st.State {
	case StateActive, StateSweeping, StateOff:
		return st, nil
	case StateFenced:
		g.met.refused(op)
		return st, fmt.Errorf("%w: %s", ErrFenced, st.Reason)
	default:
		return st, fmt.Errorf("%w (state %s)", ErrReadOnly, st.State)
	}
}

// Changed returns a channel closed at the next change of what Status
// reports (State, Token, Epoch, EpochHolder or Reason: a bind, its sweep
// ending or failing, the fenced latch, a newer epoch seen in the register)
// or at Close; like lease.Leader.Lost. A watcher takes the channel, then
// reads Status, and once the channel fires calls Changed again: taken
// before Status is read, it misses no change, and it fires once however
// many changes happened, so the watcher sees the newest status. Mutations,
// refusals, and binds, refreshes or validations that change nothing never
// close it; after Close only a late change (a validation in flight
// latching fenced) does. No I/O; safe for concurrent use.
func (g *Guard) Changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.notify
}

// shown is what a Changed channel was made for (shownLocked: now).
type shown struct {
	st     Status
	closed bool
}

// LOCKS_REQUIRED(g.mu)
func (g *Guard) shownLocked() shown { return shown{g.statusLocked(), g.closed} }

// broadcast wakes everything waiting for a change of state, and the
// watchers of Changed if what Status reports changed.
// LOCKS_REQUIRED(g.mu)
func (g *Guard) broadcast() {
	close(g.changed)
	g.changed = make(chan struct{})
	g.notifyLocked()
	g.report()
}

// notifyLocked closes Changed's channel if it was made for another status.
// LOCKS_REQUIRED(g.mu)
func (g *Guard) notifyLocked() {
	if now := g.shownLocked(); now != g.shown {
		close(g.notify)
		g.notify, g.shown = make(chan struct{}), now
	}
}

// report updates the metrics to the Guard's state: it moves this Guard's
// count in the state gauge from the state it last reported to the current
// one (a closed Guard counts nowhere).
// LOCKS_REQUIRED(g.mu)
func (g *Guard) report() {
	st := g.state
	if g.closed {
		st = ""
	}
	g.met.moveState(g.reported, st)
	g.reported = st
	g.met.setTokens(g.token, g.reg.Epoch)
}

// begin admits a mutation: it waits while a Bind or sweep is in progress
// and fails when the Guard cannot mutate. On success the caller must call
// end.
func (g *Guard) begin(ctx context.Context, op, key string) (tokenState, error) {
	if err := g.checkKey(key); err != nil {
		return tokenState{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for {
		switch {
		case g.closed:
			return tokenState{}, fmt.Errorf("%w: the fencing guard is closed", ErrReadOnly)
		case g.cfg.Mode == ModeOff:
			g.inflight++
			g.busy[key]++
			return tokenState{mode: ModeOff}, nil
		case g.state == StateFenced && !g.binding:
			g.met.refused(op)
			return tokenState{}, fencedErr(op, key, g.reason)
		case g.state == StateSweeping && g.sweepErr != nil && !g.binding:
			return tokenState{}, unverifiedErr("the takeover sweep of epoch %d failed (%w); bind again to retry", g.token, g.sweepErr)
		case g.binding || g.state == StateSweeping || g.reaping[key]:
			ch := g.changed
			g.mu.Unlock()
			select {
			case <-ch:
				g.mu.Lock()
			case <-ctx.Done():
				g.mu.Lock()
				return tokenState{}, fmt.Errorf("waiting for the takeover sweep to finish: %w", ctx.Err())
			}
		case g.state == StateUnbound:
			return tokenState{}, &fenceError{sentinel: ErrReadOnly, msg: fmt.Sprintf("read-only: no fencing token bound (%s %s); bind one with a token option or setfattr -n user.fencefs.token", op, key)}
		default: // active
			if b, ok := bindingOf(ctx); ok && b.line != g.line {
				g.met.refused(op)
				return tokenState{}, supersededErr(op, key, b, g.token)
			}
			g.inflight++
			g.busy[key]++
			return tokenState{mode: g.cfg.Mode, token: g.token, claim: g.claim}, nil
		}
	}
}

// Binding returns the binding this Guard's changes are made under now, to
// be attached with Under to a change the caller holds before storing it:
// the bound token and its line, also while sweeping or fenced (a change
// made then is refused after the next bind unless that bind continues the
// line). It is the zero Binding in mode off and before the first bind. No
// I/O; safe for concurrent use.
func (g *Guard) Binding() Binding {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cfg.Mode == ModeOff {
		return Binding{}
	}
	return Binding{Token: g.token, line: g.line}
}

// activeState returns the binding if the Guard is active (and not closed
// or rebinding).
func (g *Guard) activeState() (tokenState, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ts := tokenState{mode: g.cfg.Mode, token: g.token, claim: g.claim}
	return ts, g.state == StateActive && !g.binding && g.cfg.Mode != ModeOff
}

// holdKey keeps this Guard's mutations of key back (begin waits) until
// release is called: the reaper's unconditional removal of a tombstone
// (reaperGuard.hold). errKeyBusy while a mutation of key is in flight or
// key is held already.
func (g *Guard) holdKey(key string) (release func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.busy[key] > 0 || g.reaping[key] {
		return nil, errKeyBusy
	}
	g.reaping[key] = true
	return func() {
		g.mu.Lock()
		delete(g.reaping, key)
		g.broadcast()
		g.mu.Unlock()
	}, nil
}

// end marks a mutation of key admitted by begin as finished.
func (g *Guard) end(key string) {
	g.mu.Lock()
	g.inflight--
	if g.busy[key]--; g.busy[key] <= 0 {
		delete(g.busy, key)
	}
	if g.inflight == 0 {
		g.broadcast()
	}
	g.mu.Unlock()
}

func (g *Guard) checkKey(key string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	if g.lay.isProtocolKey(key) {
		return fmt.Errorf("%w: %q is a fencefs protocol object", objstore.ErrInvalid, key)
	}
	return nil
}

// waitIdleLocked waits until no mutation is in flight, or ctx ends (its
// error). LOCKS_REQUIRED(g.mu): released while waiting, held on return.
func (g *Guard) waitIdleLocked(ctx context.Context) error {
	for g.inflight > 0 {
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			g.mu.Lock()
			return ctx.Err()
		}
		g.mu.Lock()
	}
	return nil
}

// latchFenced latches the fenced state for the binding identified by
// token/claim (a stale report about a previous binding is ignored).
func (g *Guard) latchFenced(token uint64, claim, reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.latchFencedLocked(token, claim, reason)
}

// latchFencedLocked is latchFenced for a caller holding g.mu.
// LOCKS_REQUIRED(g.mu)
func (g *Guard) latchFencedLocked(token uint64, claim, reason string) {
	if g.token != token || g.claim != claim || g.state == StateFenced {
		return
	}
	g.state = StateFenced
	g.reason = reason
	g.broadcast()
	g.intents.releaseFenced(token, claim)
	g.log.Warn("fenced: refusing every mutation from now on", "reason", reason, "token", token, "holder", g.holder)
}

// fencedIn returns why the Guard is latched fenced while bound to token
// (ok=false: it is not fenced, or bound to another token).
func (g *Guard) fencedIn(token uint64) (reason string, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reason, g.state == StateFenced && g.token == token
}

// Refresh re-reads the register now. On a bound Guard it validates the
// token (latching fenced if a newer epoch exists) and returns ErrFenced or
// ErrUnverified accordingly; on an unbound one it only updates the epoch
// shown by Status. In mode off it does nothing. Safe to call periodically.
func (g *Guard) Refresh(ctx context.Context) error {
	g.mu.Lock()
	mode, state, token, claim := g.cfg.Mode, g.state, g.token, g.claim
	g.mu.Unlock()
	switch {
	case mode == ModeOff:
		return nil
	case state == StateUnbound:
		_, _, _, err := g.readNoted(ctx)
		return err
	case state == StateFenced:
		// Keep the displayed epoch fresh; the latch stays.
		_, _, _, _ = g.readNoted(ctx)
		return g.fencedNow("refresh", "")
	}
	return g.validate(ctx, tokenState{mode: mode, token: token, claim: claim}, "refresh", "")
}

func (g *Guard) fencedNow(op, key string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return fencedErr(op, key, g.reason)
}

// readNoted reads the register (objects.readRegister) and caches what it
// found (noteRegister).
func (g *Guard) readNoted(ctx context.Context) (Register, string, bool, error) {
	reg, etag, exists, err := g.readRegister(ctx)
	if err == nil && exists {
		g.noteRegister(reg, etag)
	}
	return reg, etag, exists, err
}

// noteRegister caches reg (with its ETag) if it is at least as new as the
// cached one.
func (g *Guard) noteRegister(reg Register, etag string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.regETag == "" || reg.Epoch >= g.reg.Epoch {
		changed := reg.Epoch != g.reg.Epoch
		g.reg, g.regETag = reg, etag
		if changed {
			g.met.setTokens(g.token, g.reg.Epoch)
		}
		g.notifyLocked()
	}
}

// valResult is what one validation round (a register GET shared by every
// caller that joined it before it started) found.
type valResult struct {
	reg         Register
	notModified bool
	err         error
}

// validate checks, with a register read that starts after this call, that
// ts's binding is still the newest. It returns nil, ErrFenced (and latches)
// or ErrUnverified. Concurrent callers share rounds: a caller joins the
// next round that has not started yet, so its read always follows
// everything the caller did before calling (its intent write).
func (g *Guard) validate(ctx context.Context, ts tokenState, op, key string) error {
	r, err := g.vals.join(&g.wg, false, g.runRound).wait(ctx)
	if err != nil {
		return err
	}
	if r.err != nil {
		g.met.validation("error")
		return r.err
	}
	v, reason := classifyRegister(r.reg, ts.token, ts.claim)
	switch v {
	case verdictFenced:
		g.met.validation("fenced")
		g.latchFenced(ts.token, ts.claim, reason)
		if op != "" {
			g.met.refused(op)
		}
		return fencedErr(op, key, reason)
	case verdictUnverified:
		g.met.validation("error")
		return unverifiedErr("%s", reason)
	}
	if r.notModified {
		g.met.validation("not_modified")
	} else {
		g.met.validation("changed")
	}
	return nil
}

// runRound does one conditional GET of the register (If-None-Match on the
// cached ETag: normally a 304).
func (g *Guard) runRound(*batchRun[valResult]) valResult {
	ctx, cancel := g.opCtx()
	defer cancel()
	g.mu.Lock()
	cached, etag := g.reg, g.regETag
	g.mu.Unlock()
	b, info, err := g.getSmall(ctx, g.lay.register(), objstore.GetOptions{IfNoneMatch: etag}, 1<<20)
	switch {
	case err == nil:
	case errors.Is(err, objstore.ErrNotModified) && etag != "":
		return valResult{reg: cached, notModified: true}
	case errors.Is(err, objstore.ErrNotFound):
		return valResult{err: unverifiedErr("the epoch register %s is missing", g.lay.register())}
	default:
		return valResult{err: unverifiedErr("reading the epoch register: %w", err)}
	}
	reg, err := decodeRegister(b)
	if err != nil {
		return valResult{err: err}
	}
	g.noteRegister(reg, objstore.NormalizeETag(info.ETag))
	return valResult{reg: reg}
}

// Close waits for the mutations in flight and the background work
// (bounded by ctx), deletes the intents no commit needs any more, and
// stops. Intents of commits whose outcome is unknown are left for the next
// sweep or gc. Mutations after Close fail with ErrReadOnly.
func (g *Guard) Close(ctx context.Context) error {
	defer g.cancel()
	g.mu.Lock()
	g.closed = true
	g.intents.markClosed()
	g.broadcast()
	err := g.waitIdleLocked(ctx)
	g.mu.Unlock()
	if err != nil {
		return fmt.Errorf("closing the fencing guard: %w", err)
	}
	// The reaper stops before the wait below (its validations are
	// background work too), after the mutations whose tombstones it must
	// write into the ledger.
	g.tombs.stop(ctx)
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("closing the fencing guard: %w", ctx.Err())
	}
	// The journal goes unless it names a commit whose outcome is unknown
	// (or one still in flight after ctx ended above).
	if err := g.intents.closeJournal(ctx); err != nil {
		return fmt.Errorf("closing the fencing guard: deleting the intent journal: %w", err)
	}
	return nil
}
