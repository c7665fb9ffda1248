package fencing

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/fencefs/fencefs/objstore"
)

// maxBindAttempts bounds the read-decide-CAS loop of one Bind.
const maxBindAttempts = 64

// Bind binds the Guard to a fencing token and makes it active
// (docs/DESIGN.md §5): it reserves the epoch (create-once epochs/N), raises
// the register to it with a compare-and-swap, runs the takeover sweep over
// every older epoch's intents, and only then admits mutations. token 0
// means auto: the register issues one above the newest epoch seen.
//
// It returns the bound token. Errors:
//   - ErrBadToken: the token can never bind (0 is not auto here only in
//     mode off; above MaxToken; older than the register; held or reserved
//     by another holder; lower than the token this Guard already holds),
//     or, wrapping ErrTokensSpent, auto found the register at MaxToken.
//     The Guard keeps its previous binding.
//   - ErrFenced: the token was bound, but a newer epoch appeared before the
//     sweep finished; the Guard is latched fenced (the returned token is
//     the one that was bound).
//   - ErrUnverified (or a storage error): the register or the bucket could
//     not be read or written. If the register was already raised, the
//     Guard stays "sweeping" and mutations fail until Bind is called again
//     (with the same token, which then only re-runs the sweep).
//
// Binding the token the Guard is already active with is a no-op. Bind waits
// for the mutations in flight to finish first; meanwhile new mutations wait.
// Every call counts in fencefs_fencing_binds_total by result.
func (g *Guard) Bind(ctx context.Context, token uint64) (uint64, error) {
	n, err := g.bindOnce(ctx, token)
	g.met.bound(err)
	return n, err
}

// bindOnce is Bind without the metric.
func (g *Guard) bindOnce(ctx context.Context, token uint64) (uint64, error) {
	if g.cfg.Mode == ModeOff {
		return 0, fmt.Errorf("%w: fencing is off (fence.mode=off): tokens are not used", ErrBadToken)
	}
	g.bindMu.Lock()
	defer g.bindMu.Unlock()
	if err := g.drain(ctx); err != nil {
		return 0, err
	}
	defer g.undrain()

	g.mu.Lock()
	prevToken, prevClaim, prevState, closed := g.token, g.claim, g.state, g.closed
	g.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("%w: the fencing guard is closed", ErrReadOnly)
	}
	if token != 0 && token == prevToken && prevState == StateActive {
		return token, nil
	}
	if err := checkTokenRange(token); err != nil {
		return 0, err
	}
	if token != 0 && token < prevToken {
		return 0, fmt.Errorf("%w: token %d is lower than the token %d this mount already holds", ErrBadToken, token, prevToken)
	}
	claim := randomID(8)
	if token != 0 && token == prevToken && prevClaim != "" {
		claim = prevClaim // re-run a failed sweep, or reclaim after being fenced by a reclaim
	}
	var n uint64
	var replaced claimed
	var err error
	if token == 0 {
		n, replaced, err = g.claimAuto(ctx, claim, prevToken)
	} else {
		n, replaced, err = g.claimExplicit(ctx, token, claim)
	}
	if err != nil {
		return 0, err
	}

	g.mu.Lock()
	if n != prevToken || claim != prevClaim {
		g.intents.dropAll()
	}
	if !followsDirectly(replaced, prevToken, prevClaim, g.holder, prevState) {
		g.line++ // another holder's epoch may have been active: a new line
	}
	g.token, g.claim, g.state, g.reason, g.sweepErr = n, claim, StateSweeping, "", nil
	g.broadcast()
	g.mu.Unlock()
	g.log.Info("bound fencing token; sweeping older epochs' intents", "token", n, "holder", g.holder)

	ts := tokenState{mode: g.cfg.Mode, token: n, claim: claim}
	sw := g.sweeper(ts)
	// Besides what it lists, the sweep reads by name the intents of the
	// bindings our register names as not yet sealed, and our own (a
	// journal of this binding sealed by a binder that then lost the
	// register: swept and deleted, so that the journal can be created
	// again).
	sw.named = g.lay.named(append(replaced.own.Unsealed, claimRef{Epoch: n, ClaimID: claim}))
	err = sw.run(ctx)
	if err == nil && g.cfg.Mode == ModeStrict {
		// The journal exists before the validation below: any binder of a
		// newer epoch raised after that validation lists (and seals) it.
		err = g.intents.createJournal(ctx, ts)
	}
	if err == nil {
		// A newer epoch may have appeared while we swept: then we are not
		// the leader, say so now rather than at the first write.
		err = g.validate(ctx, ts, "bind", g.lay.register())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case err == nil:
		g.state = StateActive
		g.broadcast()
		g.tombs.start()
		g.log.Info("fencing token active", "token", n, "holder", g.holder)
		return n, nil
	case errors.Is(err, ErrFenced):
		return n, err
	default:
		if g.state == StateSweeping {
			g.sweepErr = err
			g.broadcast()
		}
		return n, fmt.Errorf("takeover sweep of epoch %d: %w", n, err)
	}
}

// drain stops admitting mutations and waits for those in flight.
func (g *Guard) drain(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.binding = true
	g.broadcast()
	if err := g.waitIdleLocked(ctx); err != nil {
		g.binding = false
		g.broadcast()
		return fmt.Errorf("waiting for mutations in flight before binding: %w", err)
	}
	return nil
}

func (g *Guard) undrain() {
	g.mu.Lock()
	g.binding = false
	g.broadcast()
	g.mu.Unlock()
}

// claimed is the register a bind's claim found in place when it succeeded:
// the one its compare-and-swap replaced, or the one that already named the
// claim. known is false when the bind cannot tell (its own earlier CAS
// whose response was lost): then it may have replaced anything. own is the
// register that names the claim (written by the CAS, or read).
type claimed struct {
	reg   Register
	known bool
	own   Register
}

// claimExplicit reserves token and raises the register to it.
func (g *Guard) claimExplicit(ctx context.Context, token uint64, claim string) (uint64, claimed, error) {
	reserved, raised := false, false
	for attempt := 0; attempt < maxBindAttempts; attempt++ {
		reg, etag, exists, err := g.readNoted(ctx)
		if err != nil {
			return 0, claimed{}, err // transient failures: the store retried already
		}
		step, err := decideBind(reg, exists, token, g.holder, claim)
		switch step {
		case bindRefuse:
			return 0, claimed{}, err
		case bindDone:
			// The register names our claim: a repeated bind of the
			// binding we hold, or our own CAS whose answer was lost.
			return token, claimed{reg: reg, known: !raised, own: reg}, nil
		}
		if !reserved {
			if err := g.reserve(ctx, token, claim); err != nil {
				return 0, claimed{}, err
			}
			reserved = true
		}
		own, ok, err := g.raise(ctx, reg, etag, exists, token, claim)
		if ok {
			return token, claimed{reg: reg, known: exists, own: own}, nil
		}
		if err != nil {
			return 0, claimed{}, err
		}
		raised = true
		// Lost the race or lost the response: re-read and re-decide.
		if berr := backoff(ctx, min(attempt, 3)); berr != nil {
			return 0, claimed{}, berr
		}
	}
	return 0, claimed{}, unverifiedErr("could not raise the register to %d after %d attempts", token, maxBindAttempts)
}

// claimAuto has the register issue a token above every epoch seen.
func (g *Guard) claimAuto(ctx context.Context, claim string, current uint64) (uint64, claimed, error) {
	var maxRes uint64
	listed := false
	for attempt := 0; attempt < maxBindAttempts; attempt++ {
		reg, etag, exists, err := g.readNoted(ctx)
		if err != nil {
			return 0, claimed{}, err // transient failures: the store retried already
		}
		if !exists && !listed {
			// No register (new bucket, or reset): never reissue a reserved
			// number.
			m, err := maxReservation(ctx, g.store, g.lay)
			if err != nil {
				return 0, claimed{}, unverifiedErr("listing epoch reservations: %w", err)
			}
			maxRes, listed = max(maxRes, m), true
		}
		n, err := autoToken(reg, exists, maxRes, current)
		if err != nil {
			return 0, claimed{}, err
		}
		if err := g.reserve(ctx, n, claim); err != nil {
			if errors.Is(err, ErrBadToken) {
				maxRes = n // taken: try above it
				continue
			}
			return 0, claimed{}, err
		}
		own, ok, err := g.raise(ctx, reg, etag, exists, n, claim)
		if ok {
			return n, claimed{reg: reg, known: exists, own: own}, nil
		}
		if err != nil {
			return 0, claimed{}, err
		}
		// The register moved (or our CAS response was lost): re-read.
		again, _, _, err := g.readNoted(ctx)
		if err == nil && again.Epoch == n && again.ClaimID == claim {
			return n, claimed{own: again}, nil // what our CAS replaced is unknown
		}
		maxRes = n
		if berr := backoff(ctx, min(attempt, 3)); berr != nil {
			return 0, claimed{}, berr
		}
	}
	return 0, claimed{}, unverifiedErr("could not obtain a token after %d attempts (heavy contention?)", maxBindAttempts)
}

// sealOlder seals the intent journals of every epoch <= n (other than this
// Guard's live one) before the register is raised to n from reg (exists:
// there is one), so that an older writer is fenced from the moment the
// raise is visible — also when this binder dies right after it. Besides
// what it lists, it reads by name the journals of reg's binding and of
// reg.Unsealed (claimRef). A journal whose writer is too busy to be sealed
// in a few attempts is left for the sweep, which seals again after the
// raise (journals created meanwhile too); that writer then stops at its
// next register read (regCheckEvery).
//
// It returns what the raise records as unsealed (Register.Unsealed): reg's
// binding, and reg.Unsealed unless reg's own sweep completed (its swept
// marker names reg's claim).
func (g *Guard) sealOlder(ctx context.Context, reg Register, exists bool, n uint64, claim string) ([]claimRef, error) {
	if !exists {
		_, _, err := g.sweeper(tokenState{mode: g.cfg.Mode, token: n, claim: claim}).collect(ctx, preRaiseSealAttempts, false)
		return nil, sealOlderErr(g, n, err)
	}
	unsealed := unsealedAfter(reg, claim)
	var swept bool
	err := forEach(ctx, 2, func(ctx context.Context, i int) error {
		if i == 1 {
			swept = g.sweptBy(ctx, reg)
			return nil
		}
		sw := g.sweeper(tokenState{mode: g.cfg.Mode, token: n, claim: claim})
		sw.named = g.lay.named(unsealed)
		_, _, err := sw.collect(ctx, preRaiseSealAttempts, false)
		return sealOlderErr(g, n, err)
	})
	if err != nil {
		return nil, err
	}
	if swept {
		unsealed = unsealedAfter(Register{Epoch: reg.Epoch, ClaimID: reg.ClaimID}, claim)
	}
	return unsealed, nil
}

// sealOlderErr is the error of a pre-raise seal: nil when it only could
// not get through a busy writer's journal (logged).
func sealOlderErr(g *Guard, n uint64, err error) error {
	if errors.Is(err, errSealContended) {
		g.log.Info("an older writer is busy: its intent journal is sealed after the register is raised", "epoch", n, "err", err)
		return nil
	}
	return err
}

// unsealedAfter is what a raise from reg by claim records as unsealed,
// before it knows whether reg's sweep completed: reg's binding, then
// reg.Unsealed (never claim's own binding, nor one twice).
func unsealedAfter(reg Register, claim string) []claimRef {
	var out []claimRef
	for _, r := range append([]claimRef{{Epoch: reg.Epoch, ClaimID: reg.ClaimID}}, reg.Unsealed...) {
		if r.ClaimID != "" && r.ClaimID != claim && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// sweptBy reports whether the takeover sweep of reg's binding completed:
// its swept marker names reg's claim (false when unknown).
func (g *Guard) sweptBy(ctx context.Context, reg Register) bool {
	var m sweptMarkerDoc
	_, err := g.readDoc(ctx, g.lay.sweptMarker(reg.Epoch), "swept marker", 1<<20, &m, func() int { return m.Format })
	return err == nil && m.Epoch == reg.Epoch && m.ClaimID != "" && m.ClaimID == reg.ClaimID
}

// reserve creates epochs/<n> once. An existing reservation is fine if it is
// ours (lost response, or our stable holder name); otherwise ErrBadToken.
func (g *Guard) reserve(ctx context.Context, n uint64, claim string) error {
	doc := reservation{Format: FormatVersion, Epoch: n, Holder: g.holder, ClaimID: claim, ReservedAt: g.cfg.Now().UTC()}
	key := g.lay.reservation(n)
	// One attempt: the store retries transient failures itself.
	_, err := g.putJSON(ctx, key, doc, objstore.Condition{IfNoneMatch: true})
	if err == nil {
		return nil
	}
	if errors.Is(err, objstore.ErrPrecondition) {
		existing, rerr := g.readReservation(ctx, key)
		if rerr != nil {
			return unverifiedErr("reading the reservation of epoch %d: %w", n, rerr)
		}
		if _, refuse := reservationOurs(existing, g.holder, claim); refuse != nil {
			return refuse
		}
		return nil
	}
	return unverifiedErr("reserving epoch %d: %w", n, err)
}

// raise seals the older epochs' intent journals (sealOlder), then raises
// the register to n (casRegister), and returns the register it wrote.
func (g *Guard) raise(ctx context.Context, reg Register, etag string, exists bool, n uint64, claim string) (Register, bool, error) {
	unsealed, err := g.sealOlder(ctx, reg, exists, n, claim)
	if err != nil {
		return Register{}, false, err
	}
	return g.casRegister(ctx, reg, etag, exists, n, claim, unsealed)
}

// casRegister raises the register from the version read (etag; exists=false:
// none) to epoch n with our claim and the bindings unsealed, and returns
// what it wrote. ok=false, err=nil means the precondition failed (re-read
// and re-decide).
func (g *Guard) casRegister(ctx context.Context, prev Register, etag string, exists bool, n uint64, claim string, unsealed []claimRef) (Register, bool, error) {
	doc := Register{Format: FormatVersion, Epoch: n, Holder: g.holder, ClaimID: claim, ClaimedAt: g.cfg.Now().UTC(), Unsealed: unsealed}
	if exists {
		doc.PrevEpoch = prev.Epoch
	}
	cond := objstore.Condition{IfNoneMatch: true}
	if exists {
		cond = objstore.Condition{IfMatch: etag}
	}
	info, err := g.putJSON(ctx, g.lay.register(), doc, cond)
	switch {
	case err == nil:
		g.noteRegister(doc, objstore.NormalizeETag(info.ETag))
		return doc, true, nil
	case errors.Is(err, objstore.ErrPrecondition), isTransient(err):
		return Register{}, false, nil
	case ctx.Err() != nil:
		return Register{}, false, err
	}
	return Register{}, false, unverifiedErr("raising the register to %d: %w", n, err)
}

// maxReservation returns the highest reserved epoch (0 if none).
func maxReservation(ctx context.Context, store objstore.Store, lay layout) (uint64, error) {
	var m uint64
	err := store.List(ctx, lay.epochsPrefix(), "/", func(e objstore.Entry) error {
		if n, ok := parseEpochName(e.Key[len(lay.epochsPrefix()):]); ok && n > m {
			m = n
		}
		return nil
	})
	return m, err
}
