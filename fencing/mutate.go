package fencing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// maxRebases bounds the re-decisions of one mutation (create over a
// tombstone and back). Transient storage failures are not retried here: the
// store retries them within the mutation's retry deadline (see "Retries" in
// the package documentation).
const maxRebases = 4

// commitFunc performs the store call of a mutation with the given
// precondition and stamped metadata (and, for Put and Copy, the young ABA
// record to keep away from).
type commitFunc func(ctx context.Context, cond objstore.Condition, base Version, rec record) (objstore.ObjectInfo, error)

// mutation is the state of one logical write.
type mutation struct {
	op   string // put, create, copy, delete: for messages and metrics
	kind writeKind
	key  string
	base Version
	ts   tokenState
	wid  string
	// full is every young entry of the ETag-ABA record of the version the
	// commit replaces, its spill's included (spill.go): what the commit's
	// shape avoids. The commit carries the metadata form it was given.
	full record
}

// Put writes size bytes of body at key, conditioned on base (If-Match its
// ETag, or If-None-Match:* when base is absent; a tombstone found where
// the caller saw nothing is created over, as it means "deleted"). meta is
// the user metadata; Guard adds the stamps and carries the ETag-ABA record.
// body must not change during the call (it may be read more than once).
//
// Errors: ErrReadOnly (no token), ErrFenced (a newer epoch exists; the
// Guard latches), ErrStale (the key is no longer at base), ErrUnverified
// (the register could not be read: nothing was attempted), or a storage
// error (objstore.ErrUnavailable after retries: the outcome is unknown;
// objstore.ErrInvalid …). A commit whose response was lost but which
// landed is reported as success, found by its write id.
func (g *Guard) Put(ctx context.Context, key string, body io.ReaderAt, size int64, base Version, meta Meta) (objstore.ObjectInfo, error) {
	op := "put"
	if !base.Exists() || base.Tombstone {
		op = "create"
	}
	ts, err := g.begin(ctx, op, key)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	defer g.end(key)
	m := &mutation{op: op, kind: kindPut, key: key, base: base, ts: ts, wid: newWID()}
	return g.run(ctx, m, func(ctx context.Context, cond objstore.Condition, base Version, rec record) (objstore.ObjectInfo, error) {
		shape, parts, err := g.pickShape(ctx, m.full, size, etagFromContent(g.sizing, body, size))
		if err != nil {
			return objstore.ObjectInfo{}, err
		}
		return g.store.Put(ctx, key, body, size, objstore.PutOptions{
			Cond: cond, Meta: g.stamped(meta, m, rec), Shape: shape, Parts: parts})
	})
}

// Delete removes key, conditioned on base (which must exist). It writes a
// tombstone instead of a DELETE when Config.TombstoneDeletes is set, or
// while the key carries a young ETag-ABA record (a DELETE would drop the
// record with the object, and a delayed commit of an older writer could
// then land on a re-created key). Deleting a key that is already gone
// (absent or a tombstone) after the base was read succeeds.
// Errors as Put; objstore.ErrNotFound when base is absent or a tombstone.
func (g *Guard) Delete(ctx context.Context, key string, base Version) error {
	if !base.Exists() || base.Tombstone {
		return fmt.Errorf("delete %s: nothing to delete (no base version): %w", key, objstore.ErrNotFound)
	}
	ts, err := g.begin(ctx, "delete", key)
	if err != nil {
		return err
	}
	defer g.end(key)
	m := &mutation{op: "delete", kind: kindDelete, key: key, base: base, ts: ts, wid: newWID()}
	var tombRec record // the record of the tombstone written, for the reaper
	info, err := g.run(ctx, m, func(ctx context.Context, cond objstore.Condition, base Version, rec record) (objstore.ObjectInfo, error) {
		// A DELETE would drop the ABA record with the object: while it is
		// young, an older writer's create (If-None-Match) or a re-create
		// of identical bytes could let a delayed commit land. Tombstone.
		if g.cfg.TombstoneDeletes || len(rec) > 0 {
			meta := map[string]string{}
			if len(rec) > 0 {
				meta[MetaSwept] = rec.String()
			}
			tombRec = rec
			return g.putTombstone(ctx, key, ts, m.wid, cond, meta)
		}
		return objstore.ObjectInfo{}, g.store.Delete(ctx, key, cond)
	})
	if err == nil && info.ETag != "" {
		g.tombs.note(key, info.ETag, tombRec) // a tombstone, not a DELETE
	}
	return err
}

// run is the protocol of one mutation (docs/DESIGN.md §7, "Every mutation"):
// intent (strict), validation (strict, fast), conditional commit, outcome
// resolution, retries.
func (g *Guard) run(ctx context.Context, m *mutation, commit commitFunc) (objstore.ObjectInfo, error) {
	// One retry budget for every request of the mutation.
	ctx = objstore.WithRetryDeadline(ctx, time.Now().Add(g.cfg.OpTimeout))
	var ki *keyIntent
	definitive := true
	defer func() {
		if ki != nil {
			g.intents.settle(ki, definitive)
		}
	}()
	rebases := 0
	validated := false
	// rebase retries the mutation on base next (the key changed in a way
	// that leaves it ours to write: a tombstone, or absent again).
	rebase := func(next Version) error {
		if rebases++; rebases > maxRebases {
			return staleErr(m.op, m.key, "the key keeps changing")
		}
		m.base, validated = next, false
		return nil
	}
	for {
		// The ETag-ABA record of the version we replace: known from the
		// caller's read, or read now with a HEAD that overlaps the intent
		// write.
		var headCh chan headResult
		rec, needHead := knownRecord(m)
		if needHead {
			headCh = g.headAsync(ctx, m.key)
		}
		if m.ts.mode == ModeStrict && !validated {
			var err error
			if ki, err = g.writeIntent(ctx, m, ki); err != nil {
				if headCh != nil {
					<-headCh
				}
				return objstore.ObjectInfo{}, err
			}
		}
		if headCh != nil {
			h := <-headCh
			if h.err != nil {
				return objstore.ObjectInfo{}, fmt.Errorf("%s %s: %w", m.op, m.key, h.err)
			}
			if !atBase(m, h.info, h.exists) {
				// Already not at base: resolve without committing.
				info, next, err := g.resolveFailed(ctx, m, h.info, h.exists)
				if next == nil {
					return info, err
				}
				if err := rebase(*next); err != nil {
					return objstore.ObjectInfo{}, err
				}
				continue
			}
			rec = parseRecord(h.info.Meta[MetaSwept])
		}
		rec = rec.young(g.cfg.Now(), g.cfg.SignedRequestValidity)
		full, err := g.expandRecord(ctx, m.key, rec, g.cfg.SignedRequestValidity)
		if err != nil {
			return objstore.ObjectInfo{}, fmt.Errorf("%s %s: %w", m.op, m.key, err)
		}
		m.full = full

		if m.ts.mode != ModeOff && !validated {
			if err := g.validateCommit(ctx, m, ki); err != nil {
				return objstore.ObjectInfo{}, err
			}
			validated = true
		}

		info, err := commit(ctx, baseCondition(m.base), m.base, rec)
		res, next, known, rerr := g.commitOutcome(ctx, m, info, err)
		if next == nil {
			// An attempt whose response was lost may still be applied
			// later, whatever the final result: its entry stays for the
			// next sweep (an orphan), and no release drops it.
			definitive = known && !objstore.HadUncertainAttempt(ctx)
			return res, rerr
		}
		if err := rebase(*next); err != nil {
			return objstore.ObjectInfo{}, err
		}
	}
}

// commitOutcome decides what the result of m's commit (info, err) means:
// the mutation's result (next == nil; definitive=false when its outcome is
// unknown), or a retry on base next.
func (g *Guard) commitOutcome(ctx context.Context, m *mutation, info objstore.ObjectInfo, err error) (_ objstore.ObjectInfo, next *Version, definitive bool, _ error) {
	switch {
	case err == nil:
		g.met.outcome(m.op, "ok")
		g.tombs.committed(m)
		return info, nil, true, nil
	case errors.Is(err, objstore.ErrPrecondition), errors.Is(err, objstore.ErrNotFound):
		cur, exists, herr := g.head(ctx, m.key)
		if herr != nil {
			return objstore.ObjectInfo{}, nil, false, fmt.Errorf("%s %s: resolving a refused commit: %w", m.op, m.key, herr)
		}
		info, next, rerr := g.resolveFailed(ctx, m, cur, exists)
		if next == nil && rerr != nil && errors.Is(err, objstore.ErrNotFound) && !errors.Is(rerr, ErrFenced) && m.op == "copy" {
			return objstore.ObjectInfo{}, nil, true, fmt.Errorf("copy to %s: %w", m.key, err) // the source vanished
		}
		return info, next, true, rerr
	case isTransient(err):
		info, known, rerr := g.resolveTransient(ctx, m, err)
		return info, nil, known, rerr
	case errors.Is(err, errNoFreshShape):
		return objstore.ObjectInfo{}, nil, true, fmt.Errorf("%s %s: %w", m.op, m.key, err)
	case errors.Is(err, ErrStreamChanged):
		return objstore.ObjectInfo{}, nil, true, err // nothing was sent; the caller uses Put
	case ctx.Err() != nil:
		return objstore.ObjectInfo{}, nil, false, unknownOutcome(m, fmt.Errorf("%s %s: outcome unknown: %w", m.op, m.key, err))
	default:
		g.met.outcome(m.op, "error")
		return objstore.ObjectInfo{}, nil, true, fmt.Errorf("%s %s: %w", m.op, m.key, err)
	}
}

// writeIntent makes the journal name m's key and base (strict mode), on
// the mutation's intent ki (nil: take one), and returns the intent.
func (g *Guard) writeIntent(ctx context.Context, m *mutation, ki *keyIntent) (*keyIntent, error) {
	var err error
	if ki == nil {
		ki, err = g.intents.ensure(ctx, m.ts, m.key, m.base.ETag)
	} else {
		err = g.intents.cover(ctx, ki, m.base.ETag)
	}
	if err != nil {
		if errors.Is(err, ErrFenced) {
			g.met.refused(m.op)
		}
		return ki, err
	}
	if h := g.cfg.Hooks.AfterIntent; h != nil {
		h(ctx, m.key)
	}
	return ki, nil
}

// validateCommit validates m's binding before its commit: a round of its
// own in fast mode; in strict mode (ki != nil) the journal write that named
// the base was the validation (see journal.go).
func (g *Guard) validateCommit(ctx context.Context, m *mutation, ki *keyIntent) error {
	if ki == nil {
		if err := g.validate(ctx, m.ts, m.op, m.key); err != nil {
			return err
		}
	}
	if h := g.cfg.Hooks.AfterValidate; h != nil {
		h(ctx, m.key)
	}
	return nil
}

// resolveTransient decides a commit that failed after the store's retries
// ran out: maybe one attempt landed (our write id is there, or what a
// delete wanted holds). definitive=false: the outcome is unknown.
func (g *Guard) resolveTransient(ctx context.Context, m *mutation, err error) (info objstore.ObjectInfo, definitive bool, _ error) {
	if !objstore.MaybeApplied(err) {
		g.met.outcome(m.op, "error")
		return objstore.ObjectInfo{}, true, fmt.Errorf("%s %s: refused after retries: %w", m.op, m.key, err)
	}
	if cur, exists, herr := g.head(ctx, m.key); herr == nil {
		switch g.resolve(ctx, m, cur, exists) {
		case outcomeOurs, outcomeGone:
			info, _, rerr := g.resolveFailed(ctx, m, cur, exists)
			return info, true, rerr
		case outcomeLandedReplaced:
			_, _, rerr := g.resolveFailed(ctx, m, cur, exists)
			return objstore.ObjectInfo{}, false, rerr
		case outcomeFenced:
			// A newer epoch wrote the key: the lost attempt, conditioned
			// on our base, lands only if that base comes back, which the
			// newer epoch's ETag-ABA record prevents as long as our
			// journal keeps the entry (not definitive: it stays an
			// orphan). The caller is fenced, not in doubt.
			_, _, rerr := g.resolveFailed(ctx, m, cur, exists)
			return objstore.ObjectInfo{}, false, rerr
		}
	}
	g.met.outcome(m.op, "unknown")
	return objstore.ObjectInfo{}, false, unknownOutcome(m, fmt.Errorf("%s %s: outcome unknown after retries: %w", m.op, m.key, err))
}

// opCtx is the context of one background protocol operation (a journal
// write, a validation round, an intent's removal): bounded by OpTimeout,
// and one retry budget for its requests (objstore.WithRetryDeadline).
func (g *Guard) opCtx() (context.Context, context.CancelFunc) {
	return opContext(g.bg, g.cfg.OpTimeout)
}

// opContext is the context of one background operation under parent:
// bounded by timeout, and one retry budget for its requests.
func opContext(parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(parent, timeout)
	return objstore.WithRetryDeadline(ctx, time.Now().Add(timeout)), cancel
}

// resolve is resolve (decide.go) of m's commit, reading the spill of the
// key's ETag-ABA record when it has one: a sweep's rewrite of our landed
// commit may be recorded only there (spill.go). A spill that cannot be read
// leaves the decision to the metadata's record.
func (g *Guard) resolve(ctx context.Context, m *mutation, cur objstore.ObjectInfo, exists bool) outcome {
	o := resolve(m.kind, cur, exists, m.ts.token, m.wid, m.base)
	if o == outcomeOurs || o == outcomeLandedReplaced || m.kind != kindPut || !exists {
		return o
	}
	rec := parseRecord(cur.Meta[MetaSwept])
	if _, ok := rec.marker(); !ok {
		return o
	}
	full, err := g.expandRecord(ctx, m.key, rec, g.cfg.SignedRequestValidity)
	if err != nil {
		g.log.Warn("reading the spilled ETag-ABA record to resolve a refused commit failed", "key", m.key, "err", err)
		return o
	}
	if full.hasSweptWID(m.wid) {
		return outcomeLandedReplaced
	}
	return o
}

// resolveFailed decides what a refused (or pre-empted) commit means from
// the key's current state. next != nil means: retry with that base.
func (g *Guard) resolveFailed(ctx context.Context, m *mutation, cur objstore.ObjectInfo, exists bool) (objstore.ObjectInfo, *Version, error) {
	switch g.resolve(ctx, m, cur, exists) {
	case outcomeOurs:
		g.met.outcome(m.op, "resolved_ours")
		g.tombs.committed(m)
		return cur, nil, nil
	case outcomeLandedReplaced:
		// Neither refused (it landed, readers may have seen it) nor
		// stored (its version is gone): unknown to the caller, EIO.
		g.met.outcome(m.op, "landed_replaced")
		return objstore.ObjectInfo{}, nil, unknownOutcome(m, fmt.Errorf("%s %s: our commit landed, was rewritten by a newer epoch's takeover sweep and has been replaced since: %s",
			m.op, m.key, newerReason(m.key, cur.Meta, m.ts.token)))
	case outcomeFenced:
		g.met.outcome(m.op, "fenced")
		if m.ts.mode != ModeOff {
			return objstore.ObjectInfo{}, nil, g.refuseNewer(m.ts, m.op, m.key, cur.Meta)
		}
		return objstore.ObjectInfo{}, nil, staleErr(m.op, m.key, newerReason(m.key, cur.Meta, m.ts.token))
	case outcomeRetryOverTombstone, outcomeRetryOverSweep:
		v := VersionOf(cur)
		return objstore.ObjectInfo{}, &v, nil
	case outcomeRetryCreate:
		return objstore.ObjectInfo{}, &Version{}, nil
	case outcomeGone:
		if m.ts.mode != ModeOff {
			if err := g.validate(ctx, m.ts, m.op, m.key); err != nil {
				return objstore.ObjectInfo{}, nil, err
			}
		}
		g.met.outcome(m.op, "gone")
		return objstore.ObjectInfo{}, nil, nil
	}
	// Someone else changed the key: fenced if a newer epoch exists, else stale.
	if m.ts.mode != ModeOff {
		if err := g.validate(ctx, m.ts, m.op, m.key); err != nil {
			g.met.outcome(m.op, "fenced")
			return objstore.ObjectInfo{}, nil, err
		}
	}
	g.met.outcome(m.op, "stale")
	found := "absent"
	if exists {
		s := stampOf(cur.Meta)
		found = fmt.Sprintf("ETag %s (epoch %d, %s)", objstore.NormalizeETag(cur.ETag), s.Epoch, holderName(s.Holder))
	}
	want := "absent"
	if m.base.Exists() {
		want = "ETag " + m.base.ETag
	}
	return objstore.ObjectInfo{}, nil, staleErr(m.op, m.key, fmt.Sprintf("changed since it was read: expected %s, found %s", want, found))
}

// baseCondition is the precondition of a commit on base: If-Match its
// ETag, or If-None-Match:* for absent.
func baseCondition(base Version) objstore.Condition {
	if base.Exists() {
		return objstore.Condition{IfMatch: base.ETag}
	}
	return objstore.Condition{IfNoneMatch: true}
}

// headAsync stats key in the background; the channel receives the result.
func (g *Guard) headAsync(ctx context.Context, key string) chan headResult {
	ch := make(chan headResult, 1)
	go func() {
		info, exists, err := g.head(ctx, key)
		ch <- headResult{info, exists, err}
	}()
	return ch
}

type headResult struct {
	info   objstore.ObjectInfo
	exists bool
	err    error
}

// staleOrFenced reports a key found changed by someone else: fenced if it
// was stamped by a newer epoch or the register shows one, else stale.
func (g *Guard) staleOrFenced(ctx context.Context, ts tokenState, op string, key string, cur objstore.ObjectInfo, reason string) error {
	if ts.mode == ModeOff {
		return staleErr(op, key, reason)
	}
	if stampOf(cur.Meta).Epoch > ts.token {
		return g.refuseNewer(ts, op, key, cur.Meta)
	}
	if err := g.validate(ctx, ts, op, key); err != nil {
		return err
	}
	return staleErr(op, key, reason)
}

// refuseNewer latches the Guard fenced because key carries meta, stamped
// by an epoch newer than ts's token, and returns op's ErrFenced.
func (g *Guard) refuseNewer(ts tokenState, op, key string, meta map[string]string) error {
	reason := newerReason(key, meta, ts.token)
	g.latchFenced(ts.token, ts.claim, reason)
	g.met.refused(op)
	return fencedErr(op, key, reason)
}

// newerReason says that key carries meta, stamped by an epoch newer than
// token.
func newerReason(key string, meta map[string]string, token uint64) string {
	s := stampOf(meta)
	return fmt.Sprintf("key %s was written by epoch %d (%s), newer than our token %d", key, s.Epoch, holderName(s.Holder), token)
}

// stamped returns the metadata to store: the caller's, minus keys Guard
// manages, plus the stamps and the young ABA record.
func (g *Guard) stamped(meta Meta, m *mutation, rec record) map[string]string {
	out := make(map[string]string, len(meta)+4)
	for k, v := range meta {
		if !IsStampKey(k) {
			out[k] = v
		}
	}
	stampMeta(out, m.ts, g.holder, m.wid)
	if len(rec) > 0 {
		out[MetaSwept] = rec.String()
	}
	return out
}

// errNeedContent: the shape choice needs the content's hashes.
var errNeedContent = errors.New("shape choice needs the content")

// pickShape chooses the upload shape of a commit: ShapeAuto when there is
// no young ABA record (the common case, no hashing), else the first shape
// whose ETag is not recorded, waiting for record entries to expire when
// every shape is taken.
func (g *Guard) pickShape(ctx context.Context, rec record, size int64, predict etagFunc) (objstore.Shape, int, error) {
	if len(rec) == 0 {
		return objstore.ShapeAuto, 0, nil
	}
	avoid := avoidSet{}
	for _, e := range rec {
		avoid.addAll(e.ETag)
	}
	if len(avoid) == 0 {
		return objstore.ShapeAuto, 0, nil
	}
	cands := shapeCandidates(g.sizing, size, objstore.ShapeAuto)
	for {
		c, ok, needContent, err := chooseShape(cands, avoid, predict)
		if err != nil {
			return 0, 0, err
		}
		if ok {
			return c.Shape, c.Parts, nil
		}
		if needContent {
			return 0, 0, errNeedContent
		}
		if err := g.waitRecordExpiry(ctx, g.log, g.cfg.SignedRequestValidity, rec, avoid); err != nil {
			return 0, 0, errNoFreshShape
		}
		rec = rec.young(g.cfg.Now(), g.cfg.SignedRequestValidity)
		avoid = avoidSet{}
		for _, e := range rec {
			avoid.addAll(e.ETag)
		}
	}
}

// knownRecord returns the ETag-ABA record of the version m replaces when
// it is known without a read: none (no base, or fencing off) or the one the
// caller read with the base. needHead reports that it is not: the caller
// reads it with a HEAD of the key, checked with atBase.
func knownRecord(m *mutation) (rec record, needHead bool) {
	switch {
	case !m.base.Exists() || m.ts.mode == ModeOff:
		return record{}, false
	case m.base.SweptKnown:
		return parseRecord(m.base.Swept), false
	}
	return record{}, true
}

// atBase reports whether a HEAD of m's key (info, exists) still shows m's
// base version.
func atBase(m *mutation, info objstore.ObjectInfo, exists bool) bool {
	return exists && objstore.NormalizeETag(info.ETag) == m.base.ETag
}
