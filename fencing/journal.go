package fencing

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// A strict Guard keeps its intents in one journal object per binding,
// intents/<N>/<claim>-journal, instead of one object per key (docs/DECISIONS.md
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

// journal is the journal object of one binding: the object's storage
// protocol (journalio.go) needs only the bucket (objects). All fields are
// GUARDED_BY(intentJournal.mu) except the constants objects, name, epoch
// and claim.
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
// with If-None-Match:*. LOCKS_EXCLUDED(ij.mu)
func (ij *intentJournal) createJournal(ctx context.Context, ts tokenState) error {
	ij.mu.Lock()
	if jr := ij.jr; jr != nil && jr.epoch == ts.token && jr.claim == ts.claim && jr.dead == nil {
		ij.mu.Unlock()
		return nil // a re-run of this binding's sweep keeps its journal
	}
	ij.mu.Unlock()
	jr := &journal{
		objects: ij.objects,
		name:    ij.lay.journal(ts.token, ts.claim),
		epoch:   ts.token,
		claim:   ts.claim,
		orphans: map[string]map[string]bool{},
	}
	etag, err := jr.create(ctx, jr.doc(0, nil))
	if err != nil {
		return err
	}
	jr.etag = etag
	ij.mu.Lock()
	ij.jr = jr
	for _, ki := range ij.live {
		if ki.epoch == ts.token && ki.claim == ts.claim {
			// An intent kept from a journal of this binding that a
			// binder sealed (and lost the register after): what it wrote
			// is not in the new journal, so its next commit writes again.
			ki.written, ki.round, ki.roundBases = map[string]bool{}, nil, nil
		}
	}
	ij.mu.Unlock()
	return nil
}

// doc is the content of jr's write number seq: every live intent's key
// and bases (live maps key → bases; nil means none) plus the orphans.
// LOCKS_REQUIRED(intentJournal.mu) (jr.orphans) unless jr is not shared yet.
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
// has succeeded. A caller with an objstore.Unwaited ctx (background work
// that a later write redoes) does not make the write wait for the store to
// check the storage while it is known down. Errors: ErrFenced (sealed or removed by a newer binder;
// the Guard latches), ErrUnverified (the journal could not be written or
// read).
func (ij *intentJournal) syncJournal(ctx context.Context) error {
	// A write in progress that has not taken its content yet includes the
	// caller's change too.
	since, ok := objstore.OperationStart(ctx)
	if !ok {
		since = time.Now()
	}
	err, werr := ij.writes.joinAs(ij.wg, true, !objstore.IsUnwaited(ctx), since, ij.writeJournal).wait(ctx)
	if werr != nil {
		return werr
	}
	return err
}

// startJournalWrite starts a journal write that includes every intent
// wanted so far (or joins one that has not fixed its content yet), without
// waiting for it: the mutations that need those intents wait for it in
// cover, and meet its error there.
func (ij *intentJournal) startJournalWrite(ctx context.Context) {
	since, ok := objstore.OperationStart(ctx)
	if !ok {
		since = time.Now()
	}
	ij.writes.joinAs(ij.wg, true, true, since, ij.writeJournal)
}

// journalWrite is the content of one journal write, fixed by
// intentJournal.fix.
type journalWrite struct {
	jr   *journal
	seq  uint64
	doc  intentDoc
	prev string                         // the ETag the write is conditioned on
	snap map[*keyIntent]map[string]bool // the bases of each live intent it names
}

// writeJournal writes the journal's current content (run r).
func (ij *intentJournal) writeJournal(r *batchRun[error]) error {
	w, check, err := ij.fix(r)
	if err != nil {
		return err
	}
	// Once fixed, r's callers are final. The write is one operation since
	// the earliest of them began: queued behind another caller whose check
	// of the storage failed meanwhile, it does not wait for a second one.
	// Nobody waiting: it does not wait for a check at all, so that a
	// caller queued behind it is not held up.
	ctx := ij.bg
	if r.waited.Load() {
		ctx = objstore.WithOperationSince(ctx, r.Since())
	} else {
		ctx = objstore.Unwaited(ctx)
	}
	ctx, cancel := opContext(ctx, ij.timeout)
	defer cancel()
	if check {
		ts := tokenState{mode: ModeStrict, token: w.jr.epoch, claim: w.jr.claim}
		ij.wg.Add(1)
		go func() {
			defer ij.wg.Done()
			ctx, cancel := ij.opCtx()
			defer cancel()
			_ = ij.guard.validate(ctx, ts, w.jr.name) // latches fenced on a newer epoch
		}()
	}

	etag, err := w.jr.cas(ctx, w.prev, w.doc, ij.guard.seen)
	if errors.Is(err, ErrFenced) {
		ij.guard.latch(w.jr.epoch, w.jr.claim, fencedReason(err))
	}
	ij.mu.Lock()
	defer ij.mu.Unlock()
	if err != nil {
		if errors.Is(err, ErrFenced) && w.jr.dead == nil {
			w.jr.dead = err
		}
		return err
	}
	if w.jr.seq < w.seq {
		w.jr.etag, w.jr.seq = etag, w.seq
	}
	for ki, bases := range w.snap {
		ki.written = bases
		ki.writtenOnce = true
		if ki.validated == nil {
			ki.validated = map[string]bool{}
		}
		maps.Copy(ki.validated, bases)
	}
	return nil
}

// fix fixes the content of run r: every live intent of the journal's
// binding and its orphans. check reports that the write should also start
// a background register read (regCheckEvery).
func (ij *intentJournal) fix(r *batchRun[error]) (w journalWrite, check bool, _ error) {
	// Stop writing once the Guard is latched fenced in the journal's
	// epoch: a binder may be trying to seal this journal. Asked before mu
	// is taken (the Guard's mu comes first), of the journal current then.
	ij.mu.Lock()
	asked := ij.jr
	ij.mu.Unlock()
	var fenced error
	if asked != nil {
		if reason, ok := ij.guard.fenced(asked.epoch); ok {
			fenced = fencedErr("intent", asked.name, reason)
		}
	}
	ij.mu.Lock()
	defer ij.mu.Unlock()
	// Under mu: a caller that changed an intent before this point is in
	// the content below; one after it sees fixed and waits for the next run.
	r.fixed.Store(true)
	jr := ij.jr
	switch {
	case jr == nil:
		return w, false, unverifiedErr("no intent journal: the token is not bound in strict mode")
	case jr.dead != nil:
		return w, false, jr.dead
	case fenced != nil && jr == asked:
		return w, false, fenced
	}
	live := map[string]map[string]bool{}
	w = journalWrite{jr: jr, prev: jr.etag, snap: map[*keyIntent]map[string]bool{}}
	for k, ki := range ij.live {
		if ki.epoch != jr.epoch || ki.claim != jr.claim {
			continue
		}
		live[k] = maps.Clone(ki.bases)
		w.snap[ki] = live[k]
		ki.round, ki.roundBases = r, live[k] // cover may wait for r
	}
	jr.next = max(jr.next, jr.seq) + 1
	w.seq = jr.next
	w.doc = jr.doc(w.seq, live)
	if check = ij.now().Sub(ij.regChecked) >= regCheckEvery; check {
		ij.regChecked = ij.now()
	}
	return w, check, nil
}

// attempt.
var errSealContended = errors.New("its writer keeps writing")

// regCheckEvery is how often a Guard writing its journal also reads the
// register (in the background, not waited for): a newer epoch then latches
// it fenced and stops its journal writes, so that the newer binder's seal
// gets through. Safety does not depend on it (the seal does).
const regCheckEvery = 50 * time.Millisecond

// scheduleTrimLocked arranges for one journal write after the deletion
// batch delay, dropping the entries of intents that settled.
// LOCKS_REQUIRED(ij.mu)
func (ij *intentJournal) scheduleTrimLocked() {
	if ij.trim || ij.closed {
		return
	}
	ij.trim = true
	ij.wg.Add(1)
	go func() {
		defer ij.wg.Done()
		select {
		case <-time.After(deleteBatchDelay):
		case <-ij.bg.Done():
		}
		ij.mu.Lock()
		ij.trim = false
		closed := ij.closed
		ij.mu.Unlock()
		if closed {
			return
		}
		ctx, cancel := ij.opCtx()
		defer cancel()
		if err := ij.syncJournal(objstore.Unwaited(ctx)); err != nil {
			ij.log.Debug("trimming the intent journal failed; the next write or sweep handles it", "err", err)
		}
	}()
}
