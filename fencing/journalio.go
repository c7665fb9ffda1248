package fencing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fencefs/fencefs/objstore"
)

// The storage protocol of intent journal objects (see journal.go for what
// they are): creating one and the conditional writes of its owner
// (methods of journal), and the seal of a newer binder (of objects: the
// journal is another Guard's). These need only the bucket (objects); the
// Guard's journal.go keeps what is in memory (the live intents, the group
// commits) and latches the fenced state these report.

// create creates the journal object of jr holding doc, with
// If-None-Match:*, and returns its ETag. A lost response of the create is
// found by reading the object back; a refusal other than a precondition is
// tried again a few times. Errors wrap ErrUnverified.
func (jr *journal) create(ctx context.Context, doc intentDoc) (string, error) {
	b, err := json.Marshal(doc)
	if err != nil {
		return "", err
	}
	var etag string
	put := func() error {
		info, err := jr.putRaw(ctx, jr.name, b, objstore.Condition{IfNoneMatch: true})
		if errors.Is(err, objstore.ErrPrecondition) || isTransient(err) && objstore.MaybeApplied(err) {
			// A lost response of our own create (the name is random).
			cur, curETag, rerr := jr.readIntent(ctx, jr.name)
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
		return "", unverifiedErr("creating the intent journal %s: %w", jr.name, err)
	}
	return etag, nil
}

// cas writes doc over the journal version prev, retrying transient
// failures with the same precondition; a refused precondition is resolved
// by reading the journal: our own write (a lost response), a seal or a
// removal by a newer binder (ErrFenced, whose reason the caller latches;
// a register read on the way is passed to seen) or anything else
// (ErrUnverified).
func (jr *journal) cas(ctx context.Context, prev string, doc intentDoc, seen func(Register, string)) (string, error) {
	b, err := json.Marshal(doc)
	if err != nil {
		return "", err
	}
	adopted := 0
	for attempt := 0; attempt < 6; attempt++ {
		info, err := jr.putRaw(ctx, jr.name, b, objstore.Condition{IfMatch: prev})
		switch {
		case err == nil:
			return objstore.NormalizeETag(info.ETag), nil
		case errors.Is(err, objstore.ErrPrecondition), errors.Is(err, objstore.ErrNotFound):
			cur, etag, rerr := jr.readIntent(ctx, jr.name)
			switch {
			case errors.Is(rerr, objstore.ErrNotFound):
				// Only a sweep of a newer binding (or gc after one)
				// removes another Guard's journal: it was sealed, swept
				// and deleted. The register names the newer binding.
				reason := fmt.Sprintf("our intent journal (epoch %d) was removed by a newer epoch's sweep (or by hand)", jr.epoch)
				if reg, etag, exists, err := jr.readRegister(ctx); err == nil && exists {
					seen(reg, etag)
					if v, r := classifyRegister(reg, jr.epoch, jr.claim); v == verdictFenced {
						reason = r + "; it removed our intent journal"
					}
				}
				return "", fencedErr("intent", jr.name, reason)
			case rerr != nil:
				return "", unverifiedErr("reading the intent journal %s after a refused write: %w", jr.name, rerr)
			case cur.Sealed != nil:
				_, reason := classifyRegister(Register{Epoch: cur.Sealed.Epoch, Holder: cur.Sealed.Holder, ClaimID: cur.Sealed.ClaimID}, jr.epoch, jr.claim)
				reason += fmt.Sprintf("; it sealed our intent journal (sealed by epoch %d)", cur.Sealed.Epoch)
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
				if cur, etag, rerr := jr.readIntent(ctx, jr.name); rerr == nil && cur.Sealed == nil && cur.ClaimID == jr.claim && cur.Seq == doc.Seq {
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

// sealJournal seals the journal name (read as doc at etag) for binding ts,
// so that its writer can add nothing more, and returns the sealed content
// (nil when the journal is gone: its writer deleted it with nothing in
// flight, or another binder swept and removed it).
func (o objects) sealJournal(ctx context.Context, ts tokenState, name string, doc *intentDoc, etag string, attempts int) (*intentDoc, error) {
	var lastErr error
	for attempt := 0; attempt < attempts; attempt++ {
		if doc.Sealed != nil {
			return doc, nil
		}
		sealed := *doc
		sealed.Sealed = &sealDoc{Epoch: ts.token, Holder: o.holder, ClaimID: ts.claim, At: o.now().UTC()}
		b, err := json.Marshal(sealed)
		if err != nil {
			return nil, err
		}
		_, err = o.putRaw(ctx, name, b, objstore.Condition{IfMatch: etag})
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
		doc, etag, err = o.readIntent(ctx, name)
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
