package fencing

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// keyIntent is this Guard's intent for one target key: the bases ("" =
// absent) a commit of ours to the key may be conditioned on, kept as an
// entry of the binding's journal (journal.go). All fields are
// GUARDED_BY(intentJournal.mu).
type keyIntent struct {
	key         string
	epoch       uint64
	claim       string
	bases       map[string]bool // wanted: the union of every base asked for
	written     map[string]bool // in the journal as of its last successful write
	writtenOnce bool
	refs        int  // commits using it
	orphan      bool // an outcome is unknown: never drop it ourselves
	gen         int  // bumped whenever refs drops to 0
	// validated holds the bases named by a successful journal write (itself
	// the validation, see journal.go): a commit on such a base needs no
	// round of its own.
	validated map[string]bool
	// round is the last journal write whose content names
	// roundBases for this key; a caller needing one of them waits for it
	// instead of queueing another write.
	round      *batchRun[error]
	roundBases map[string]bool
}

// intentJournal is a Guard's intent journal: the intents of its
// mutations in flight (keyIntent, by key) and the journal object of the
// current binding that names them (journal.go), written in group commits.
// It reads and writes the bucket through objects and asks the Guard only
// what the Guard alone knows (journalGuard). A mutation takes an intent
// with ensure (or cover, on one it holds) and gives it back with settle;
// Bind drops every intent (dropAll) and creates the next binding's journal
// (createJournal); Close ends it (markClosed, then closeJournal).
//
// Concurrency: every method is safe for concurrent use. mu guards the
// intents, the journal's mutable fields and the bookkeeping below; it is
// never held across I/O nor while calling the Guard. Lock order: the
// Guard's mu, then mu. What must change atomically with the Guard's token
// state does so under both: Bind drops every intent of the old binding in
// the critical section (of the Guard's mu) in which it changes the token,
// Reserve takes its references in the one in which it checked the binding
// (refAll), and Close marks the journal closed in the one in which it
// closes the Guard. ensure checks under mu that the caller's binding is
// still the journal's before it takes a reference (boundLocked). The check that a write's Guard is fenced (journalGuard
// fenced) is made just before the write fixes its content, not atomically
// with it: it only keeps a fenced writer from contending with a seal, and
// safety rests on the seal (see journal.go).
type intentJournal struct {
	objects               // the store, the key layout, the clock, the holder id
	linger  time.Duration // Config.IntentLinger
	timeout time.Duration // Config.OpTimeout
	log     *slog.Logger
	bg      context.Context // the Guard's: ends when it closes
	wg      *sync.WaitGroup // the Guard's background work (Close waits for it)
	guard   journalGuard

	writes batch[error] // journal writes

	mu   sync.Mutex
	live map[string]*keyIntent // live intents by target key; GUARDED_BY(mu)
	// jr is the journal of the current binding (strict mode; nil before it
	// is created). GUARDED_BY(mu)
	jr   *journal
	trim bool // a journal trim is scheduled; GUARDED_BY(mu)
	// regChecked is when a journal write last started a background
	// register read (see regCheckEvery). GUARDED_BY(mu)
	regChecked time.Time
	closed     bool // the Guard is closing: no drops, no trims; GUARDED_BY(mu)
}

// journalGuard is what the intent journal asks of its Guard. Each is
// called without the journal's mu held.
type journalGuard struct {
	// fenced returns why the Guard is latched fenced while bound to epoch
	// (ok=false: it is not).
	fenced func(epoch uint64) (reason string, ok bool)
	// latch latches the binding (token, claim) fenced (Guard.latchFenced).
	latch func(token uint64, claim, reason string)
	// validate checks with a register read that ts's binding is still the
	// newest (Guard.validate).
	validate func(ctx context.Context, ts tokenState, key string) error
	// seen caches a register a journal write read (Guard.noteRegister).
	seen func(reg Register, etag string)
	// idleFenced waits until the Guard, bound to (token, claim), is
	// latched fenced with no mutation in flight (Guard.idleFenced).
	idleFenced func(ctx context.Context, token uint64, claim string) bool
}

// newIntentJournal returns the (empty) intent journal of a Guard over o
// configured by cfg, whose background work runs under bg and counts in wg.
func newIntentJournal(o objects, cfg Config, log *slog.Logger, bg context.Context, wg *sync.WaitGroup, guard journalGuard) *intentJournal {
	return &intentJournal{objects: o, linger: cfg.IntentLinger, timeout: cfg.OpTimeout, log: log,
		bg: bg, wg: wg, guard: guard, live: map[string]*keyIntent{}}
}

// opCtx is the context of one background operation (opContext).
func (ij *intentJournal) opCtx() (context.Context, context.CancelFunc) {
	return opContext(ij.bg, ij.timeout)
}

// ensure makes sure the journal names (key, base) (written and validated)
// and takes a reference on the key's intent; the caller must call settle.
// Concurrent callers share journal writes.
//
// ts must still be the binding of the journal (boundLocked), checked under
// the same hold of mu as the reference is taken; otherwise ensure fails
// with ErrUnverified and changes nothing. A mutation's ts cannot be stale
// (Bind waits for the mutations in flight); the check keeps it so should a
// caller ever read the binding earlier: taking a reference under an old
// binding would replace a newer binding's intent in live (refLocked), and
// every later journal write would leave the key out while its commit is in
// flight, so that a newer binder's seal would not name it.
func (ij *intentJournal) ensure(ctx context.Context, ts tokenState, key, base string) (*keyIntent, error) {
	ij.mu.Lock()
	if !ij.boundLocked(ts) {
		ij.mu.Unlock()
		return nil, unverifiedErr("the intent for %s is of epoch %d, no longer the binding of the intent journal", key, ts.token)
	}
	ki := ij.refLocked(ts, key)
	ij.mu.Unlock()
	if err := ij.cover(ctx, ki, base); err != nil {
		ij.settle(ki, true)
		return nil, err
	}
	return ki, nil
}

// boundLocked reports whether ts is the binding of the current journal:
// Bind changes both under the Guard's mu and ij.mu (dropAll, then
// createJournal before the Guard is active). LOCKS_REQUIRED(ij.mu)
func (ij *intentJournal) boundLocked(ts tokenState) bool {
	jr := ij.jr
	return jr != nil && jr.epoch == ts.token && jr.claim == ts.claim
}

// refLocked returns the live intent for key under ts's binding (a new one
// if there is none, or if the live one is of another binding) with a
// reference taken for the caller. ts must be the current binding, checked
// in the same critical section (boundLocked, or the Guard's token state
// under its mu for refAll): only then is an intent it replaces one of an
// older binding, which dropAll already took out of every journal write.
// LOCKS_REQUIRED(ij.mu)
func (ij *intentJournal) refLocked(ts tokenState, key string) *keyIntent {
	ki := ij.live[key]
	if ki == nil || ki.epoch != ts.token || ki.claim != ts.claim {
		ki = &keyIntent{
			key:     key,
			epoch:   ts.token,
			claim:   ts.claim,
			bases:   map[string]bool{},
			written: map[string]bool{},
		}
		ij.live[key] = ki
	}
	ki.refs++
	return ki
}

// wantBaseLocked adds base to what ki's entry must name (the next journal
// write includes it). LOCKS_REQUIRED(ij.mu)
func (ij *intentJournal) wantBaseLocked(ki *keyIntent, base string) {
	ki.bases[base] = true
	if ki.orphan {
		// No longer a live entry: the journal keeps it among its orphans.
		ij.orphanLocked(ki, base)
	}
}

// orphanLocked adds bases of ki to the orphans of the journal of ki's
// binding (if it is the current one). LOCKS_REQUIRED(ij.mu)
func (ij *intentJournal) orphanLocked(ki *keyIntent, bases ...string) {
	jr := ij.jr
	if jr == nil || jr.epoch != ki.epoch || jr.claim != ki.claim {
		return
	}
	if jr.orphans[ki.key] == nil {
		jr.orphans[ki.key] = map[string]bool{}
	}
	for _, b := range bases {
		jr.orphans[ki.key][b] = true
	}
}

// cover makes the journal name base for ki's key, unless it already does.
func (ij *intentJournal) cover(ctx context.Context, ki *keyIntent, base string) error {
	ij.mu.Lock()
	if ki.written[base] {
		ij.mu.Unlock()
		return nil
	}
	if r := ki.round; r != nil && ki.roundBases[base] {
		// A write naming base is in flight (or done): wait for it rather
		// than queue another; if it failed, a new write tries again.
		ij.mu.Unlock()
		werr, err := r.wait(ctx)
		if err != nil {
			return err
		}
		if errors.Is(werr, ErrFenced) {
			return werr
		}
		ij.mu.Lock()
		if ki.written[base] {
			ij.mu.Unlock()
			return nil
		}
	}
	ij.wantBaseLocked(ki, base)
	ij.mu.Unlock()
	if err := ij.syncJournal(ctx); err != nil {
		return err
	}
	ij.mu.Lock()
	defer ij.mu.Unlock()
	if ki.orphan && !ki.written[base] {
		ki.written[base] = true // written as an orphan entry
		if ki.validated == nil {
			ki.validated = map[string]bool{}
		}
		ki.validated[base] = true
	}
	if !ki.written[base] {
		return unverifiedErr("the intent journal was written without the intent for %s (the binding changed?)", ki.key)
	}
	return nil
}

// settle drops a reference taken by ensure. definitive=false means the
// commit's outcome is unknown (it may still land): the entry then stays in
// the journal for the next sweep (among its orphans), and a fresh intent is
// used from now on.
func (ij *intentJournal) settle(ki *keyIntent, definitive bool) {
	ij.mu.Lock()
	defer ij.mu.Unlock()
	ij.settleLocked(ki, definitive)
}

// settleLocked is settle for a caller holding mu. LOCKS_REQUIRED(ij.mu)
func (ij *intentJournal) settleLocked(ki *keyIntent, definitive bool) {
	ki.refs--
	if !definitive && ki.writtenOnce && !ki.orphan {
		ki.orphan = true
		ij.orphanLocked(ki, sortedKeys(ki.bases)...)
	}
	if ki.orphan {
		if ij.live[ki.key] == ki {
			delete(ij.live, ki.key)
		}
		return
	}
	if ki.refs == 0 {
		ij.scheduleDropLocked(ki)
	}
}

// scheduleDropLocked arranges for an idle intent to leave the journal
// after the linger. LOCKS_REQUIRED(ij.mu)
func (ij *intentJournal) scheduleDropLocked(ki *keyIntent) {
	ki.gen++
	gen := ki.gen
	delay := ij.linger
	if delay <= 0 {
		ij.dropIdleLocked(ki, gen)
		return
	}
	time.AfterFunc(delay, func() {
		ij.mu.Lock()
		defer ij.mu.Unlock()
		ij.dropIdleLocked(ki, gen)
	})
}

// dropIdleLocked removes an idle intent from the journal's live entries
// (they leave the object with its next write, or a trim).
// LOCKS_REQUIRED(ij.mu)
func (ij *intentJournal) dropIdleLocked(ki *keyIntent, gen int) {
	if ij.closed || ki.refs > 0 || ki.gen != gen || ki.orphan || ij.live[ki.key] != ki {
		return
	}
	delete(ij.live, ki.key)
	if ki.writtenOnce {
		ij.scheduleTrimLocked()
	}
}

// deleteBatchDelay is how long a journal trim waits for more settled
// intents: entries of files written in a burst leave the journal in one
// write instead of one each.
const deleteBatchDelay = 50 * time.Millisecond

// dropAll forgets every live intent and the journal (after a rebind their
// entries are under the previous epoch): a journal that names nothing in
// flight and no orphan is deleted; otherwise it stays for the sweep.
// LOCKS_REQUIRED(Guard.mu): Bind calls it where it changes the binding.
// LOCKS_EXCLUDED(ij.mu)
func (ij *intentJournal) dropAll() {
	ij.mu.Lock()
	defer ij.mu.Unlock()
	busy := false
	for k, ki := range ij.live {
		delete(ij.live, k)
		if ki.refs > 0 || ki.orphan {
			ki.orphan = true
			busy = true
		}
	}
	jr := ij.jr
	ij.jr = nil
	if jr == nil {
		return
	}
	if jr.dead == nil {
		jr.dead = unverifiedErr("the intent journal of epoch %d was replaced by a new binding", jr.epoch)
	}
	if busy || len(jr.orphans) > 0 {
		return
	}
	name := jr.name
	ij.wg.Add(1)
	go func() {
		defer ij.wg.Done()
		ctx, cancel := ij.opCtx()
		defer cancel()
		_ = ij.store.Delete(ctx, name, objstore.Condition{})
	}()
}

// liveNames returns the name of this Guard's journal, which a sweep by
// this same Guard must not treat as an older writer's.
func (ij *intentJournal) liveNames() map[string]bool {
	ij.mu.Lock()
	defer ij.mu.Unlock()
	out := map[string]bool{}
	if ij.jr != nil && ij.jr.dead == nil {
		out[ij.jr.name] = true
	}
	return out
}

// markClosed stops drops and trims: Close calls it where it closes the
// Guard, before it waits for the background work, and ends with
// closeJournal. LOCKS_REQUIRED(Guard.mu) LOCKS_EXCLUDED(ij.mu)
func (ij *intentJournal) markClosed() {
	ij.mu.Lock()
	ij.closed = true
	ij.mu.Unlock()
}

// closeJournal forgets every intent and deletes the journal, unless it
// names a commit whose outcome is unknown (or one still in flight).
func (ij *intentJournal) closeJournal(ctx context.Context) error {
	ij.mu.Lock()
	keep := false
	for k, ki := range ij.live {
		if ki.refs > 0 || ki.orphan {
			keep = true
		}
		delete(ij.live, k)
	}
	jr := ij.jr
	ij.jr = nil
	if jr != nil {
		keep = keep || len(jr.orphans) > 0
		if jr.dead == nil {
			jr.dead = unverifiedErr("the fencing guard is closed")
		}
	}
	ij.mu.Unlock()
	if jr == nil || keep {
		return nil
	}
	if err := ij.store.Delete(ctx, jr.name, objstore.Condition{}); err != nil && !errors.Is(err, objstore.ErrNotFound) {
		return err
	}
	return nil
}

// refAll takes a reference on the intent of every one of intents under
// binding ts for Reserve; write reports that some base is not in the
// journal yet (the caller then calls syncJournal). LOCKS_REQUIRED(Guard.mu)
// (the binding ts was checked in the same critical section: no rebind falls
// between) LOCKS_EXCLUDED(ij.mu)
func (ij *intentJournal) refAll(ts tokenState, intents []Intent) (kis []*keyIntent, write bool) {
	ij.mu.Lock()
	defer ij.mu.Unlock()
	for _, in := range intents {
		ki := ij.refLocked(ts, in.Key)
		if !ki.written[in.Base.ETag] {
			ij.wantBaseLocked(ki, in.Base.ETag)
			write = true
		}
		kis = append(kis, ki)
	}
	return kis, write
}

// Intent names a coming mutation for Reserve: its key and the version it
// will be conditioned on (the zero Version for a create).
type Intent struct {
	Key  string
	Base Version
}

// Reserve starts, in strict mode, the journal write of the intents of
// several mutations the caller is about to make, and keeps them until
// release is called: each of those mutations then finds its intent written
// (or waits for that write, which is in flight) and needs no journal write
// of its own (a rename's copy to the destination and delete of the source:
// one write instead of two; a directory rename: one per batch of files).
// Reserve does not wait for the write, so that what a mutation does before
// its commit (a copy reads its source) overlaps it. It is a hint: it never
// fails; when it cannot write (another mode, not bound, fenced, storage
// errors) the mutations write their own intents and meet the error
// themselves. release must be called exactly once, after the mutations
// returned; it never blocks. Safe for concurrent use.
func (g *Guard) Reserve(ctx context.Context, intents ...Intent) (release func()) {
	g.mu.Lock()
	ts := tokenState{mode: g.cfg.Mode, token: g.token, claim: g.claim}
	var admitted []Intent
	if g.cfg.Mode == ModeStrict && g.state == StateActive && !g.binding && !g.closed {
		for _, in := range intents {
			if g.checkKey(in.Key) == nil {
				admitted = append(admitted, in)
			}
		}
	}
	kis, write := g.intents.refAll(ts, admitted) // under g.mu, see refAll
	g.mu.Unlock()
	if write {
		g.intents.startJournalWrite(ctx)
	}
	return func() {
		for _, ki := range kis {
			g.intents.settle(ki, true) // a reservation commits nothing itself
		}
	}
}
