package fencing

import (
	"context"
	"errors"
	"maps"
	"time"
)

// A strict Guard keeps its intents in one journal object per binding,
// intents/<N>/<claim>-<id>, instead of one object per key (docs/DECISIONS.md
// "Intent journals"). The journal is created when the binding's sweep is
// done and before the validation that makes the Guard active; from then on
// only this Guard writes it, each time with If-Match on the ETag of its own
// previous write. A binder of a newer epoch seals every older journal it
// lists — a compare-and-swap that marks it sealed — before it raises the
// register, and again after (for journals created meanwhile), and sweeps
// the keys the sealed content names. So a journal write that succeeds
// happened before any seal: whoever takes over later sweeps every key it
// names. A write after a seal fails its precondition, and this Guard learns
// that it is fenced. The successful write is therefore the validation of
// the bases it names, and a commit needs one round trip before it instead
// of two (intent PUT, then register GET).
//
// Writes are group commits: callers join the next write that has not
// started, so any number of concurrent commits share one request.

// journal is the intent journal of one binding: the object's storage
// protocol (journalio.go) needs only the bucket (objects). All fields are
// GUARDED_BY(g.mu) except the constants objects, name, epoch and claim.
type journal struct {
	objects
	name  string
	epoch uint64
	claim string

	etag string // ETag of our last successful write
	seq  uint64 // sequence number of our last successful write
	// next is the last sequence number handed to a write: never reused,
	// so that a write whose outcome was unknown is never mistaken for a
	// later one with other content.
	next uint64
	// orphans are entries whose commit outcome is unknown: they stay in
	// every later write, for the next sweep.
	orphans map[string]map[string]bool
	// dead is set once the journal cannot be written any more (sealed by
	// a newer binder, replaced by a new binding, or gone).
	dead error
}

// createJournal creates the journal of binding ts (strict mode), empty,
// with If-None-Match:*. LOCKS_EXCLUDED(g.mu)
func (g *Guard) createJournal(ctx context.Context, ts tokenState) error {
	g.mu.Lock()
	if jr := g.jr; jr != nil && jr.epoch == ts.token && jr.claim == ts.claim && jr.dead == nil {
		g.mu.Unlock()
		return nil // a re-run of this binding's sweep keeps its journal
	}
	g.mu.Unlock()
	jr := &journal{
		objects: g.objects,
		name:    g.lay.intent(ts.token, ts.claim[:min(8, len(ts.claim))]+"-"+randomID(8)),
		epoch:   ts.token,
		claim:   ts.claim,
		orphans: map[string]map[string]bool{},
	}
	etag, err := jr.create(ctx, jr.doc(0, nil))
	if err != nil {
		return err
	}
	jr.etag = etag
	g.mu.Lock()
	g.jr = jr
	g.mu.Unlock()
	return nil
}

// doc is the content of jr's write number seq: every live intent's key
// and bases (live maps key → bases; nil means none) plus the orphans.
// LOCKS_REQUIRED(g.mu) (jr.orphans) unless jr is not shared yet.
func (jr *journal) doc(seq uint64, live map[string]map[string]bool) intentDoc {
	keys := map[string]map[string]bool{}
	for k, bs := range jr.orphans {
		keys[k] = maps.Clone(bs)
	}
	for k, bs := range live {
		if keys[k] == nil {
			keys[k] = map[string]bool{}
		}
		maps.Copy(keys[k], bs)
	}
	doc := intentDoc{Format: FormatVersion, Epoch: jr.epoch, Holder: jr.holder, ClaimID: jr.claim,
		Journal: true, Seq: seq, Written: jr.now().UTC(), Keys: []intentEntry{}}
	for _, k := range sortedKeys(keys) {
		doc.Keys = append(doc.Keys, intentEntry{Key: k, Bases: sortedKeys(keys[k])})
	}
	return doc
}

// syncJournal returns once a journal write that started after this call
// has succeeded. Errors: ErrFenced (sealed or removed by a newer binder;
// the Guard latches), ErrUnverified (the journal could not be written or
// read).
func (g *Guard) syncJournal(ctx context.Context) error {
	// A write in progress that has not taken its content yet includes the
	// caller's change too.
	err, werr := g.jWrites.join(&g.wg, true, g.writeJournal).wait(ctx)
	if werr != nil {
		return werr
	}
	return err
}

// writeJournal writes the journal's current content (run r).
func (g *Guard) writeJournal(r *batchRun[error]) error {
	ctx, cancel := g.opCtx()
	defer cancel()
	g.mu.Lock()
	// Under g.mu: a caller that changed an intent before this point is in
	// the content below; one after it sees fixed and waits for the next run.
	r.fixed.Store(true)
	jr := g.jr
	if jr == nil {
		g.mu.Unlock()
		return unverifiedErr("no intent journal: the token is not bound in strict mode")
	}
	if jr.dead != nil {
		g.mu.Unlock()
		return jr.dead
	}
	if g.state == StateFenced && g.token == jr.epoch {
		// Stop writing: a binder may be trying to seal this journal.
		err := fencedErr("intent", jr.name, g.reason)
		g.mu.Unlock()
		return err
	}
	live := map[string]map[string]bool{}
	snap := map[*keyIntent]map[string]bool{}
	for k, ki := range g.intents {
		if ki.epoch != jr.epoch || ki.claim != jr.claim {
			continue
		}
		live[k] = maps.Clone(ki.bases)
		snap[ki] = live[k]
		ki.round, ki.roundBases = r, live[k] // cover may wait for r
	}
	jr.next = max(jr.next, jr.seq) + 1
	seq := jr.next
	doc := jr.doc(seq, live)
	prev := jr.etag
	check := g.cfg.Now().Sub(g.regChecked) >= regCheckEvery
	if check {
		g.regChecked = g.cfg.Now()
	}
	ts := tokenState{mode: g.cfg.Mode, token: jr.epoch, claim: jr.claim}
	g.mu.Unlock()
	if check {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			ctx, cancel := g.opCtx()
			defer cancel()
			_ = g.validate(ctx, ts, "", jr.name) // latches fenced on a newer epoch
		}()
	}

	etag, err := jr.cas(ctx, prev, doc, g.noteRegister)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		if errors.Is(err, ErrFenced) {
			g.latchFencedLocked(jr.epoch, jr.claim, fencedReason(err))
			if jr.dead == nil {
				jr.dead = err
			}
		}
		return err
	}
	if jr.seq < seq {
		jr.etag, jr.seq = etag, seq
	}
	for ki, bases := range snap {
		ki.written = bases
		ki.writtenOnce = true
		if ki.validated == nil {
			ki.validated = map[string]bool{}
		}
		maps.Copy(ki.validated, bases)
	}
	return nil
}

// attempt.
var errSealContended = errors.New("its writer keeps writing")

// regCheckEvery is how often a Guard writing its journal also reads the
// register (in the background, not waited for): a newer epoch then latches
// it fenced and stops its journal writes, so that the newer binder's seal
// gets through. Safety does not depend on it (the seal does).
const regCheckEvery = 50 * time.Millisecond

// scheduleJournalTrimLocked arranges for one journal write after the
// deletion batch delay, dropping the entries of intents that settled.
// LOCKS_REQUIRED(g.mu)
func (g *Guard) scheduleJournalTrimLocked() {
	if g.jTrim || g.closed {
		return
	}
	g.jTrim = true
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		select {
		case <-time.After(deleteBatchDelay):
		case <-g.bg.Done():
		}
		g.mu.Lock()
		g.jTrim = false
		closed := g.closed
		g.mu.Unlock()
		if closed {
			return
		}
		ctx, cancel := g.opCtx()
		defer cancel()
		if err := g.syncJournal(ctx); err != nil {
			g.log.Debug("trimming the intent journal failed; the next write or sweep handles it", "err", err)
		}
	}()
}
