package fencing

// Releases: a fenced owner that is alive tells binders which entries of its
// sealed intent journal may still land.
//
// A journal names every (key, base) a commit of its binding may be
// conditioned on, from just before the commit is sent until a later
// journal write (or trim) drops the settled entry. A binder that seals it
// must treat every entry as a commit that may still arrive, and keep the
// key's ETag away from the base (the ETag-ABA record, sweep.go, record.go)
// for the signed-request validity. Entries whose commit had in fact
// settled, still waiting for their trim when the seal came, are the common
// case after a takeover right behind a commit; recorded as bases, they use
// up the only two upload shapes a small object has when leadership flaps
// over unchanged content, and a later takeover would have to wait for the
// record to expire.
//
// So a Guard that learns it is fenced (a journal write fails on the seal,
// or a register read shows a newer epoch: it latches fenced and admits no
// mutation any more) waits for its mutations in flight to end and then writes a release,
// released/<N>/<claim>-<id> (created once, If-None-Match), naming the
// entries whose outcome stayed unknown (the journal's orphans, which
// include every commit one of whose attempts lost its response, even if a
// later attempt settled it): only those may still land. A journal already
// swept and deleted gets no release. A sweep waits a short grace for the releases of the
// journals it sealed that name entries, and takes from each release it
// finds the entries that remain; a journal without a release (its owner
// frozen, dead or slow) keeps every entry, as before.

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

const releasedDir = "released/"

// DefaultReleaseGrace is how long a sweep waits for the releases of the
// journals it sealed that name entries (Config.ReleaseGrace).
const DefaultReleaseGrace = time.Second

// releasePoll is how often a sweep looks for releases during the grace.
const releasePoll = 20 * time.Millisecond

func (l layout) releasedPrefix() string { return l.base + releasedDir }

// releaseOf is the release of journal name: intents/<N>/<id> →
// released/<N>/<id>.
func (l layout) releaseOf(journal string) string {
	return l.base + releasedDir + strings.TrimPrefix(journal, l.base+intentsDir)
}

// releaseFenced writes, in the background, the release of the journal of
// binding (token, claim) once the Guard, latched fenced in it, has no
// mutation in flight. Nothing is written when the Guard rebinds or closes
// first (the old binding's intents may then be incomplete: binders keep
// every entry of the journal). LOCKS_REQUIRED(Guard.mu): the latch calls
// it. LOCKS_EXCLUDED(ij.mu)
func (ij *intentJournal) releaseFenced(token uint64, claim string) {
	ij.mu.Lock()
	jr := ij.jr
	ij.mu.Unlock()
	if jr == nil || jr.epoch != token || jr.claim != claim {
		return
	}
	ij.wg.Add(1)
	go func() {
		defer ij.wg.Done()
		ctx, cancel := ij.opCtx()
		defer cancel()
		if !ij.guard.idleFenced(ctx, jr.epoch, jr.claim) {
			return
		}
		ij.mu.Lock()
		if ij.jr != jr || ij.closed {
			ij.mu.Unlock()
			return
		}
		for _, ki := range ij.live {
			if ki.epoch == jr.epoch && ki.claim == jr.claim && ki.refs > 0 && !ki.orphan {
				ij.mu.Unlock()
				return // a reservation still held: keep every entry
			}
		}
		keys := make([]intentEntry, 0, len(jr.orphans))
		for _, k := range sortedKeys(jr.orphans) {
			keys = append(keys, intentEntry{Key: k, Bases: sortedKeys(jr.orphans[k])})
		}
		ij.mu.Unlock()
		if _, _, err := ij.readIntent(ctx, jr.name); err != nil {
			// Swept and deleted already (nobody needs the release), or
			// unreadable: write nothing.
			return
		}
		doc := intentDoc{Format: FormatVersion, Epoch: jr.epoch, ClaimID: jr.claim, Keys: keys, Written: ij.now(), Released: true}
		name := ij.lay.releaseOf(jr.name)
		if _, err := ij.putJSON(ctx, name, doc, objstore.Condition{IfNoneMatch: true}); err != nil && !errors.Is(err, objstore.ErrPrecondition) {
			ij.log.Debug("writing the release of a sealed intent journal failed; binders keep all its entries", "release", name, "err", err)
			return
		}
		ij.log.Info("released the sealed intent journal", "epoch", jr.epoch, "unknown_outcomes", len(keys))
	}()
}

// idleFenced waits until the Guard, bound to (token, claim), is latched
// fenced and has no mutation in flight: true; false if it is bound to
// something else, or ctx ends first.
func (g *Guard) idleFenced(ctx context.Context, token uint64, claim string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.token != token || g.claim != claim || g.state != StateFenced {
		return false
	}
	if err := g.waitIdleLocked(ctx); err != nil {
		return false
	}
	return g.token == token && g.claim == claim && g.state == StateFenced && !g.binding
}

// awaitReleases replaces the entries of each sealed journal in docs (by
// name in names) that names any with those of its owner's release, waiting
// up to grace for the releases; it returns the release objects it used,
// for deletion with the intents. A journal without a release keeps its
// entries.
func (sw *sweeper) awaitReleases(ctx context.Context, names []string, docs []*intentDoc) []string {
	var pending []int
	for i, d := range docs {
		if d != nil && d.Journal && len(d.Keys) > 0 {
			pending = append(pending, i)
		}
	}
	if len(pending) == 0 || sw.grace <= 0 {
		return nil
	}
	var used []string
	deadline := time.Now().Add(sw.grace)
	for {
		found := make([]*intentDoc, len(pending))
		_ = forEach(ctx, len(pending), func(ctx context.Context, j int) error {
			d, _, err := sw.readIntent(ctx, sw.lay.releaseOf(names[pending[j]]))
			if err == nil && d.Released && d.Epoch == docs[pending[j]].Epoch && d.ClaimID == docs[pending[j]].ClaimID {
				found[j] = d
			}
			return nil
		})
		var still []int
		for j, i := range pending {
			if found[j] == nil {
				still = append(still, i)
				continue
			}
			docs[i].Keys = found[j].Keys
			used = append(used, sw.lay.releaseOf(names[i]))
		}
		pending = still
		if len(pending) == 0 || !time.Now().Before(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(releasePoll):
		}
	}
	if len(pending) > 0 {
		sw.log.Info("sealed intent journals without a release from their owner (frozen, dead or slow): every entry they name is avoided", "journals", len(pending))
	}
	return used
}
