package fencing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sort"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// keyIntent is the live intent object this Guard keeps for one target key:
// it names every base ("" = absent) a commit of ours to the key may be
// conditioned on. All fields are GUARDED_BY(g.mu).
type keyIntent struct {
	key         string
	name        string // object key of the intent
	epoch       uint64
	claim       string
	bases       map[string]bool // wanted: the union of every base asked for
	written     map[string]bool // covered by the last successful write
	writtenOnce bool
	inflight    chan struct{} // closed when the write in flight ends; nil if none
	refs        int           // commits using it
	orphan      bool          // an outcome is unknown: never delete it ourselves
	keepUntil   time.Time     // Prepare keeps it at least until then
	gen         int           // bumped whenever refs drops to 0
	// validated holds the bases for which a validation round that started
	// after the intent naming them was durable has passed (Prepare runs
	// one in the background): a commit on such a base needs no round of
	// its own (see run).
	validated map[string]bool
	// early is closed when the last validation round started for the bases
	// in earlyBases (after they were durable) ends; nil when none was
	// started. Concurrent callers on one of them share it
	// (validateCovered).
	early      chan struct{}
	earlyBases map[string]bool
}

// ensureIntent makes sure an intent object covering (key, base) exists
// (written completely) and takes a reference on it; the caller must call
// settle. It writes or rewrites the intent at most once per new base, and
// concurrent callers share writes.
func (g *Guard) ensureIntent(ctx context.Context, ts tokenState, key, base string) (*keyIntent, error) {
	g.mu.Lock()
	ki := g.intents[key]
	if ki == nil {
		ki = &keyIntent{
			key:     key,
			name:    g.lay.intent(ts.token, ts.claim[:min(8, len(ts.claim))]+"-"+randomID(8)),
			epoch:   ts.token,
			claim:   ts.claim,
			bases:   map[string]bool{},
			written: map[string]bool{},
		}
		g.intents[key] = ki
	}
	ki.refs++
	g.mu.Unlock()
	if err := g.cover(ctx, ki, base); err != nil {
		g.settle(ki, true)
		return nil, err
	}
	return ki, nil
}

// cover writes ki so that it names base, unless it already does.
func (g *Guard) cover(ctx context.Context, ki *keyIntent, base string) error {
	g.mu.Lock()
	for {
		if ki.written[base] {
			g.mu.Unlock()
			return nil
		}
		ki.bases[base] = true
		if ki.inflight != nil {
			ch := ki.inflight
			g.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ctx.Err()
			}
			g.mu.Lock()
			continue
		}
		ch := make(chan struct{})
		ki.inflight = ch
		snap := make(map[string]bool, len(ki.bases))
		for b := range ki.bases {
			snap[b] = true
		}
		doc := intentDoc{Format: FormatVersion, Epoch: ki.epoch, Holder: g.holder, ClaimID: ki.claim,
			Keys: []intentEntry{{Key: ki.key, Bases: sortedKeys(snap)}}, Written: g.cfg.Now().UTC()}
		g.mu.Unlock()
		err := g.putDoc(ctx, ki.name, doc)
		g.mu.Lock()
		ki.inflight = nil
		close(ch)
		if err != nil {
			g.mu.Unlock()
			return unverifiedErr("writing the intent for %s: %v", ki.key, err)
		}
		ki.written = snap
		ki.writtenOnce = true
	}
}

// settle drops a reference taken by ensureIntent. definitive=false means
// the commit's outcome is unknown (it may still land): the intent is then
// left in the bucket for the next sweep, and a fresh one is used from now on.
func (g *Guard) settle(ki *keyIntent, definitive bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ki.refs--
	if !definitive && ki.writtenOnce {
		ki.orphan = true
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

// scheduleDrop arranges for an idle intent to be deleted after the linger.
// LOCKS_REQUIRED(g.mu)
func (g *Guard) scheduleDrop(ki *keyIntent) {
	ki.gen++
	gen := ki.gen
	delay := g.cfg.IntentLinger
	if d := time.Until(ki.keepUntil); d > delay {
		delay = d
	}
	time.AfterFunc(delay, func() { g.dropIdle(ki, gen) })
}

func (g *Guard) dropIdle(ki *keyIntent, gen int) {
	g.mu.Lock()
	if g.closed || ki.refs > 0 || ki.gen != gen || ki.orphan || ki.inflight != nil || g.intents[ki.key] != ki {
		g.mu.Unlock()
		return
	}
	delete(g.intents, ki.key)
	if ki.writtenOnce {
		g.queueDeleteLocked(ki.name)
	}
	g.mu.Unlock()
}

// deleteBatchDelay is how long the intent-deletion flusher waits for more
// settled intents before sending a batch: intents of files written in a
// burst go in one DeleteObjects request instead of one DELETE each.
const deleteBatchDelay = 50 * time.Millisecond

// queueDeleteLocked queues the deletion of intent object name, starting
// the flusher if none runs. LOCKS_REQUIRED(g.mu)
func (g *Guard) queueDeleteLocked(name string) {
	g.delQueue = append(g.delQueue, name)
	if g.delRunning {
		return
	}
	g.delRunning = true
	g.wg.Add(1)
	go g.flushDeletes()
}

// flushDeletes deletes queued intents in batches until the queue stays
// empty. A failed batch is left to gc and to the next takeover sweep,
// which remove settled intents too.
func (g *Guard) flushDeletes() {
	defer g.wg.Done()
	for {
		t := time.NewTimer(deleteBatchDelay)
		select {
		case <-t.C:
		case <-g.bg.Done():
			t.Stop()
		}
		g.mu.Lock()
		names := g.delQueue
		g.delQueue = nil
		if len(names) == 0 {
			g.delRunning = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		ctx, cancel := context.WithTimeout(g.bg, g.cfg.OpTimeout)
		if err := g.store.DeleteMany(ctx, names); err != nil {
			g.log.Debug("deleting settled intents failed; gc or the next sweep removes them", "intents", len(names), "err", err)
		}
		cancel()
	}
}

// dropAllIntents forgets every live intent (after a rebind their names are
// under the previous epoch): idle ones are deleted, the others orphaned.
// LOCKS_REQUIRED(g.mu)
func (g *Guard) dropAllIntentsLocked() {
	for k, ki := range g.intents {
		delete(g.intents, k)
		if ki.refs == 0 && ki.writtenOnce && !ki.orphan {
			name := ki.name
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				ctx, cancel := context.WithTimeout(g.bg, g.cfg.OpTimeout)
				defer cancel()
				_ = g.store.Delete(ctx, name, objstore.Condition{})
			}()
		} else {
			ki.orphan = true
		}
	}
}

// liveIntentNames returns the names of this Guard's live intents, which a
// sweep by this same Guard must not treat as an older writer's.
func (g *Guard) liveIntentNames() map[string]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]bool, len(g.intents))
	for _, ki := range g.intents {
		out[ki.name] = true
	}
	return out
}

// Prepare is a hint that a handle on key became dirty: in strict mode the
// intent for key is written now, in the background, so that the commit at
// close does not pay for it. The intent names "absent" as the base, which
// covers a create; for an overwrite call PrepareBase with the version the
// handle was opened on (Put rewrites the intent otherwise). Prepare never
// blocks and never fails; a Put on key waits for the write it started.
func (g *Guard) Prepare(key string) { g.PrepareBase(key, Version{}) }

// PrepareBase is Prepare for a handle whose commit will be conditioned on
// base (the version the handle was opened on).
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
		ctx, cancel := context.WithTimeout(g.bg, g.cfg.OpTimeout)
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
		// Validate now too, while the application is still writing: the
		// round starts after the intent is durable, which is all the
		// protocol asks of a validation (DESIGN.md "Why this is exact":
		// a newer epoch raised after this round sweeps the intent and
		// fences the key, however late the commit comes).
		g.mu.Lock()
		durable := ki.inflight == nil && ki.written[base.ETag]
		g.mu.Unlock()
		if durable {
			_ = g.validateCovered(ctx, ts, "prepare", key, ki, base.ETag)
		}
		g.settle(ki, true)
	}()
}

// putDoc writes a JSON protocol document unconditionally, retrying
// transient failures.
func (g *Guard) putDoc(ctx context.Context, key string, doc any) error {
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return retryTransient(ctx, func() error {
		_, err := g.store.Put(ctx, key, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{Shape: objstore.ShapePlain, ContentType: "application/json"})
		return err
	})
}

// retryTransient runs f, retrying ErrUnavailable and ErrConflict with
// backoff (a few attempts).
func retryTransient(ctx context.Context, f func() error) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		err = f()
		if err == nil || !isTransient(err) {
			return err
		}
		if werr := backoff(ctx, attempt); werr != nil {
			return err
		}
	}
	return err
}

func isTransient(err error) bool {
	return errors.Is(err, objstore.ErrUnavailable) || errors.Is(err, objstore.ErrConflict)
}

// backoff sleeps before retry number attempt (jittered exponential, 10 ms
// to 1 s).
func backoff(ctx context.Context, attempt int) error {
	d := 10 * time.Millisecond << min(attempt, 7)
	if d > time.Second {
		d = time.Second
	}
	d = d/2 + time.Duration(randUint64()%uint64(d/2+1))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// validateCovered validates for a commit on base of ki's key: it returns
// at once when a round that started after ki durably named base has passed,
// waits for such a round in flight instead of queueing another behind it,
// and otherwise runs one (shared with later callers). The caller must hold
// a reference on ki, and ki must durably name base.
func (g *Guard) validateCovered(ctx context.Context, ts tokenState, op, key string, ki *keyIntent, base string) error {
	g.mu.Lock()
	if ki.validated[base] {
		g.mu.Unlock()
		return nil
	}
	if ch := ki.early; ch != nil && ki.earlyBases[base] {
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		g.mu.Lock()
		if ki.validated[base] {
			g.mu.Unlock()
			return nil
		}
	}
	// A round of our own, starting after every base written so far.
	done := make(chan struct{})
	bases := make(map[string]bool, len(ki.written))
	for b := range ki.written {
		bases[b] = true
	}
	ki.early, ki.earlyBases = done, bases
	g.mu.Unlock()
	err := g.validate(ctx, ts, op, key)
	g.mu.Lock()
	if err == nil {
		if ki.validated == nil {
			ki.validated = map[string]bool{}
		}
		for b := range bases {
			ki.validated[b] = true
		}
	}
	close(done)
	g.mu.Unlock()
	return err
}
