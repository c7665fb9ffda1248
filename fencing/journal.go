package fencing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/fencefs/fencefs/objstore"
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

// journal is the intent journal of one binding. All fields are
// GUARDED_BY(g.mu) except the constants name, epoch and claim.
type journal struct {
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
		name:    g.lay.intent(ts.token, ts.claim[:min(8, len(ts.claim))]+"-"+randomID(8)),
		epoch:   ts.token,
		claim:   ts.claim,
		orphans: map[string]map[string]bool{},
	}
	doc := g.journalDoc(jr, 0, nil)
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	var etag string
	put := func() error {
		info, err := g.store.Put(ctx, jr.name, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{
			Cond: objstore.Condition{IfNoneMatch: true}, Shape: objstore.ShapePlain, ContentType: "application/json"})
		if errors.Is(err, objstore.ErrPrecondition) || isTransient(err) && objstore.MaybeApplied(err) {
			// A lost response of our own create (the name is random).
			cur, curETag, rerr := g.readIntent(ctx, jr.name)
			if rerr == nil && cur.ClaimID == jr.claim && cur.Seq == 0 && cur.Sealed == nil {
				etag = curETag
				return nil
			}
			return err
		}
		if err == nil {
			etag = objstore.NormalizeETag(info.ETag)
		}
		return err
	}
	for attempt := 0; ; attempt++ {
		err = put()
		// A store that keeps keys as files can refuse the create while a
		// concurrent sweep removes the epoch's (then empty) directory
		// (the Versity gateway: ExistingObjectIsDirectory); the name is
		// random, so any refusal but a precondition is worth a retry
		// (transient failures were retried by the store already).
		if err == nil || errors.Is(err, objstore.ErrPrecondition) || isTransient(err) || attempt >= 5 || ctx.Err() != nil {
			break
		}
		if berr := backoff(ctx, attempt); berr != nil {
			break
		}
	}
	if err != nil {
		return unverifiedErr("creating the intent journal %s: %w", jr.name, err)
	}
	jr.etag = etag
	g.mu.Lock()
	g.jr = jr
	g.mu.Unlock()
	return nil
}

// journalDoc is the content of jr's write number seq: every live intent's
// key and bases (live maps key → bases; nil means none) plus the orphans.
// LOCKS_REQUIRED(g.mu) when live is taken from g.intents.
func (g *Guard) journalDoc(jr *journal, seq uint64, live map[string]map[string]bool) intentDoc {
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
	doc := intentDoc{Format: FormatVersion, Epoch: jr.epoch, Holder: g.holder, ClaimID: jr.claim,
		Journal: true, Seq: seq, Written: g.cfg.Now().UTC(), Keys: []intentEntry{}}
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
	doc := g.journalDoc(jr, seq, live)
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

	etag, err := g.casJournal(ctx, jr, prev, doc)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		if errors.Is(err, ErrFenced) {
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

// casJournal writes doc over the journal version prev, retrying transient
// failures with the same precondition; a refused precondition is resolved
// by reading the journal: our own write (a lost response), a seal
// (ErrFenced, latched) or anything else (ErrUnverified).
func (g *Guard) casJournal(ctx context.Context, jr *journal, prev string, doc intentDoc) (string, error) {
	b, err := json.Marshal(doc)
	if err != nil {
		return "", err
	}
	adopted := 0
	for attempt := 0; attempt < 6; attempt++ {
		info, err := g.store.Put(ctx, jr.name, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{
			Cond: objstore.Condition{IfMatch: prev}, Shape: objstore.ShapePlain, ContentType: "application/json"})
		switch {
		case err == nil:
			return objstore.NormalizeETag(info.ETag), nil
		case errors.Is(err, objstore.ErrPrecondition), errors.Is(err, objstore.ErrNotFound):
			cur, etag, rerr := g.readIntent(ctx, jr.name)
			switch {
			case errors.Is(rerr, objstore.ErrNotFound):
				// Only a sweep of a newer binding (or gc after one)
				// removes another Guard's journal: it was sealed, swept
				// and deleted. The register names the newer binding.
				reason := fmt.Sprintf("our intent journal (epoch %d) was removed by a newer epoch's sweep (or by hand)", jr.epoch)
				if reg, etag, exists, err := g.readRegister(ctx); err == nil && exists {
					g.noteRegister(reg, etag)
					if v, r := classifyRegister(reg, jr.epoch, jr.claim); v == verdictFenced {
						reason = r + "; it removed our intent journal"
					}
				}
				g.latchFenced(jr.epoch, jr.claim, reason)
				return "", fencedErr("intent", jr.name, reason)
			case rerr != nil:
				return "", unverifiedErr("reading the intent journal %s after a refused write: %w", jr.name, rerr)
			case cur.Sealed != nil:
				_, reason := classifyRegister(Register{Epoch: cur.Sealed.Epoch, Holder: cur.Sealed.Holder, ClaimID: cur.Sealed.ClaimID}, jr.epoch, jr.claim)
				reason += fmt.Sprintf("; it sealed our intent journal (sealed by epoch %d)", cur.Sealed.Epoch)
				g.latchFenced(jr.epoch, jr.claim, reason)
				return "", fencedErr("intent", jr.name, reason)
			case cur.ClaimID == jr.claim && cur.Seq == doc.Seq:
				return etag, nil // our write landed; its response was lost
			case cur.ClaimID == jr.claim && cur.Seq < doc.Seq && adopted < 3:
				// An earlier write of ours whose outcome we did not learn
				// landed after all: write over it (our content now is
				// what must be durable).
				prev = etag
				adopted++
				attempt--
				continue
			}
			return "", unverifiedErr("the intent journal %s holds write %d, not ours (%d)", jr.name, cur.Seq, doc.Seq)
		case isTransient(err):
			// The store retried already. A write whose response was lost
			// may have landed: read the journal back once.
			if objstore.MaybeApplied(err) {
				if cur, etag, rerr := g.readIntent(ctx, jr.name); rerr == nil && cur.Sealed == nil && cur.ClaimID == jr.claim && cur.Seq == doc.Seq {
					return etag, nil
				}
			}
			return "", unverifiedErr("writing the intent journal %s: %w", jr.name, err)
		case ctx.Err() != nil:
			return "", unverifiedErr("writing the intent journal: %w", ctx.Err())
		default:
			return "", unverifiedErr("writing the intent journal %s: %w", jr.name, err)
		}
	}
	return "", unverifiedErr("writing the intent journal %s: gave up after 6 attempts", jr.name)
}

// maxSealAttempts bounds the read-seal loop on one journal after the
// register was raised (each failed attempt means its writer wrote
// meanwhile; a busy writer reads the register every regCheckEvery and
// stops once it shows the newer epoch). preRaiseSealAttempts is the budget
// before the raise: a journal whose writer is too busy to be sealed then is
// sealed after it.
const (
	maxSealAttempts      = 64
	preRaiseSealAttempts = 3
)

// errSealContended: the journal's writer kept writing through every seal
// attempt.
var errSealContended = errors.New("its writer keeps writing")

// regCheckEvery is how often a Guard writing its journal also reads the
// register (in the background, not waited for): a newer epoch then latches
// it fenced and stops its journal writes, so that the newer binder's seal
// gets through. Safety does not depend on it (the seal does).
const regCheckEvery = 50 * time.Millisecond

// sealJournal seals the journal name (read as doc at etag) for binding ts,
// so that its writer can add nothing more, and returns the sealed content
// (nil when the journal is gone: its writer deleted it with nothing in
// flight, or another binder swept and removed it).
func (g *Guard) sealJournal(ctx context.Context, ts tokenState, name string, doc *intentDoc, etag string, attempts int) (*intentDoc, error) {
	var lastErr error
	for attempt := 0; attempt < attempts; attempt++ {
		if doc.Sealed != nil {
			return doc, nil
		}
		sealed := *doc
		sealed.Sealed = &sealDoc{Epoch: ts.token, Holder: g.holder, ClaimID: ts.claim, At: g.cfg.Now().UTC()}
		b, err := json.Marshal(sealed)
		if err != nil {
			return nil, err
		}
		_, err = g.store.Put(ctx, name, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{
			Cond: objstore.Condition{IfMatch: etag}, Shape: objstore.ShapePlain, ContentType: "application/json"})
		switch {
		case err == nil:
			return &sealed, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		// A precondition failure, a transient error, or a refusal from a
		// store that keeps keys as files while another sweeper removes the
		// journal and its directory (the Versity gateway answers
		// ExistingObjectIsDirectory then): read again and decide.
		lastErr = err
		// Its writer wrote meanwhile (or our seal's outcome is unknown):
		// read again.
		doc, etag, err = g.readIntent(ctx, name)
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, unverifiedErr("reading the intent journal %s: %w", name, err)
		}
		if doc.Sealed != nil && doc.Sealed.ClaimID == ts.claim && doc.Sealed.Epoch == ts.token {
			return doc, nil // our seal landed
		}
		if berr := backoff(ctx, min(attempt, 3)); berr != nil {
			return nil, berr
		}
	}
	if lastErr != nil && !errors.Is(lastErr, objstore.ErrPrecondition) {
		return nil, unverifiedErr("could not seal the intent journal %s after %d attempts: %w", name, attempts, lastErr)
	}
	return nil, unverifiedErr("could not seal the intent journal %s after %d attempts: %w", name, attempts, errSealContended)
}

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
