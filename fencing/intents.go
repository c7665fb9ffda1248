package fencing

import (
	"context"
	"errors"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// keyIntent is this Guard's intent for one target key: the bases ("" =
// absent) a commit of ours to the key may be conditioned on, kept as an
// entry of the binding's journal (journal.go). All fields are
// GUARDED_BY(g.mu).
type keyIntent struct {
	key         string
	epoch       uint64
	claim       string
	bases       map[string]bool // wanted: the union of every base asked for
	written     map[string]bool // in the journal as of its last successful write
	writtenOnce bool
	refs        int       // commits using it
	orphan      bool      // an outcome is unknown: never drop it ourselves
	keepUntil   time.Time // PrepareBase keeps it at least until then
	gen         int       // bumped whenever refs drops to 0
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

// ensureIntent makes sure the journal names (key, base) (written and
// validated) and takes a reference on the key's intent; the caller must
// call settle. Concurrent callers share journal writes.
func (g *Guard) ensureIntent(ctx context.Context, ts tokenState, key, base string) (*keyIntent, error) {
	g.mu.Lock()
	ki := g.refIntentLocked(ts, key)
	g.mu.Unlock()
	if err := g.cover(ctx, ki, base); err != nil {
		g.settle(ki, true)
		return nil, err
	}
	return ki, nil
}

// refIntentLocked returns the live intent for key under ts's binding
// (a new one if there is none) with a reference taken for the caller.
// LOCKS_REQUIRED(g.mu)
func (g *Guard) refIntentLocked(ts tokenState, key string) *keyIntent {
	ki := g.intents[key]
	if ki == nil || ki.epoch != ts.token || ki.claim != ts.claim {
		ki = &keyIntent{
			key:     key,
			epoch:   ts.token,
			claim:   ts.claim,
			bases:   map[string]bool{},
			written: map[string]bool{},
		}
		g.intents[key] = ki
	}
	ki.refs++
	return ki
}

// wantBaseLocked adds base to what ki's entry must name (the next journal
// write includes it). LOCKS_REQUIRED(g.mu)
func (g *Guard) wantBaseLocked(ki *keyIntent, base string) {
	ki.bases[base] = true
	if ki.orphan {
		// No longer a live entry: the journal keeps it among its orphans.
		if jr := g.jr; jr != nil && jr.epoch == ki.epoch && jr.claim == ki.claim {
			if jr.orphans[ki.key] == nil {
				jr.orphans[ki.key] = map[string]bool{}
			}
			jr.orphans[ki.key][base] = true
		}
	}
}

// cover makes the journal name base for ki's key, unless it already does.
func (g *Guard) cover(ctx context.Context, ki *keyIntent, base string) error {
	g.mu.Lock()
	if ki.written[base] {
		g.mu.Unlock()
		return nil
	}
	if r := ki.round; r != nil && ki.roundBases[base] {
		// A write naming base is in flight (or done): wait for it rather
		// than queue another; if it failed, a new write tries again.
		g.mu.Unlock()
		werr, err := r.wait(ctx)
		if err != nil {
			return err
		}
		if errors.Is(werr, ErrFenced) {
			return werr
		}
		g.mu.Lock()
		if ki.written[base] {
			g.mu.Unlock()
			return nil
		}
	}
	g.wantBaseLocked(ki, base)
	g.mu.Unlock()
	if err := g.syncJournal(ctx); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
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

// settle drops a reference taken by ensureIntent. definitive=false means
// the commit's outcome is unknown (it may still land): the entry then stays
// in the journal for the next sweep (among its orphans), and a fresh
// intent is used from now on.
func (g *Guard) settle(ki *keyIntent, definitive bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ki.refs--
	if !definitive && ki.writtenOnce && !ki.orphan {
		ki.orphan = true
		if jr := g.jr; jr != nil && jr.epoch == ki.epoch && jr.claim == ki.claim {
			if jr.orphans[ki.key] == nil {
				jr.orphans[ki.key] = map[string]bool{}
			}
			for b := range ki.bases {
				jr.orphans[ki.key][b] = true
			}
		}
	}
	if ki.orphan {
		if g.intents[ki.key] == ki {
			delete(g.intents, ki.key)
		}
		return
	}
	if ki.refs == 0 {
		g.scheduleDrop(ki)
	}
}

// scheduleDrop arranges for an idle intent to leave the journal after the
// linger. LOCKS_REQUIRED(g.mu)
func (g *Guard) scheduleDrop(ki *keyIntent) {
	ki.gen++
	gen := ki.gen
	delay := g.cfg.IntentLinger
	if d := time.Until(ki.keepUntil); d > delay {
		delay = d
	}
	if delay <= 0 {
		g.dropIdleLocked(ki, gen)
		return
	}
	time.AfterFunc(delay, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.dropIdleLocked(ki, gen)
	})
}

// dropIdleLocked removes an idle intent from the journal's live entries
// (they leave the object with its next write, or a trim).
// LOCKS_REQUIRED(g.mu)
func (g *Guard) dropIdleLocked(ki *keyIntent, gen int) {
	if g.closed || ki.refs > 0 || ki.gen != gen || ki.orphan || g.intents[ki.key] != ki {
		return
	}
	delete(g.intents, ki.key)
	if ki.writtenOnce {
		g.scheduleJournalTrimLocked()
	}
}

// deleteBatchDelay is how long a journal trim waits for more settled
// intents: entries of files written in a burst leave the journal in one
// write instead of one each.
const deleteBatchDelay = 50 * time.Millisecond

// dropAllIntents forgets every live intent and the journal (after a
// rebind their entries are under the previous epoch): a journal that names
// nothing in flight and no orphan is deleted; otherwise it stays for the
// sweep. LOCKS_REQUIRED(g.mu)
func (g *Guard) dropAllIntentsLocked() {
	busy := false
	for k, ki := range g.intents {
		delete(g.intents, k)
		if ki.refs > 0 || ki.orphan {
			ki.orphan = true
			busy = true
		}
	}
	jr := g.jr
	g.jr = nil
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
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		ctx, cancel := g.opCtx()
		defer cancel()
		_ = g.store.Delete(ctx, name, objstore.Condition{})
	}()
}

// liveIntentNames returns the name of this Guard's journal, which a sweep
// by this same Guard must not treat as an older writer's.
func (g *Guard) liveIntentNames() map[string]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]bool{}
	if g.jr != nil && g.jr.dead == nil {
		out[g.jr.name] = true
	}
	return out
}

// PrepareBase is a hint that a handle on key became dirty and will commit
// conditioned on base (the version the handle was opened on; the zero
// Version for a create): in strict mode the intent for (key, base) is
// written now, in the background, so that the commit at close does not pay
// for it (a commit on another base writes the intent again). PrepareBase
// never blocks and never fails; a Put on key waits for the write it
// started.
func (g *Guard) PrepareBase(key string, base Version) {
	g.mu.Lock()
	ok := g.cfg.Mode == ModeStrict && g.state == StateActive && !g.binding && !g.closed && g.checkKey(key) == nil
	ts := tokenState{mode: g.cfg.Mode, token: g.token, claim: g.claim}
	g.mu.Unlock()
	if !ok {
		return
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		ctx, cancel := g.opCtx()
		defer cancel()
		ki, err := g.ensureIntent(ctx, ts, key, base.ETag)
		if err != nil {
			g.log.Debug("writing an intent early failed; the commit writes it", "key", key, "err", err)
			return
		}
		g.mu.Lock()
		if k := g.cfg.Now().Add(prepareLinger); k.After(ki.keepUntil) {
			ki.keepUntil = k
		}
		g.mu.Unlock()
		// The journal write was the validation too (journal.go): a newer
		// binder seals the journal and sweeps the key, however late the
		// commit comes.
		g.settle(ki, true)
	}()
}

// Intent names a coming mutation for Reserve: its key and the version it
// will be conditioned on (the zero Version for a create).
type Intent struct {
	Key  string
	Base Version
}

// Reserve writes, in strict mode, the intents of several mutations the
// caller is about to make in one journal write, and keeps them until
// release is called: each of those mutations then finds its intent written
// and validated, and needs no journal write of its own (a rename's copy to
// the destination and delete of the source: one write instead of two; a
// directory rename: one per batch of files). Like PrepareBase it is a hint:
// it never fails; when it cannot write (another mode, not bound, fenced,
// storage errors) the mutations write their own intents and meet the
// error themselves. release must be called exactly once, after the
// mutations returned; it never blocks. Safe for concurrent use.
func (g *Guard) Reserve(ctx context.Context, intents ...Intent) (release func()) {
	g.mu.Lock()
	ok := g.cfg.Mode == ModeStrict && g.state == StateActive && !g.binding && !g.closed
	ts := tokenState{mode: g.cfg.Mode, token: g.token, claim: g.claim}
	var kis []*keyIntent
	write := false
	for _, in := range intents {
		if !ok || g.checkKey(in.Key) != nil {
			continue
		}
		ki := g.refIntentLocked(ts, in.Key)
		if !ki.written[in.Base.ETag] {
			g.wantBaseLocked(ki, in.Base.ETag)
			write = true
		}
		kis = append(kis, ki)
	}
	g.mu.Unlock()
	if write {
		if err := g.syncJournal(ctx); err != nil {
			g.log.Debug("reserving intents failed; each mutation writes its own", "keys", len(kis), "err", err)
		}
	}
	return func() {
		for _, ki := range kis {
			g.settle(ki, true) // a reservation commits nothing itself
		}
	}
}
