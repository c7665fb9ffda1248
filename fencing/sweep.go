package fencing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/fencefs/fencefs/internal/ctxsleep"
	"github.com/fencefs/fencefs/objstore"
)

// maxKeyRounds bounds the stat-decide-rewrite loop for one key (each round
// means someone else changed the key meanwhile).
const maxKeyRounds = 16

// sweepTarget is one key named by older intents, with every base an older
// writer may hold for it ("" = absent).
type sweepTarget struct {
	key   string
	bases map[string]bool
}

// sweeper is one takeover sweep of binding ts: it reads and writes the
// bucket through objects and asks the Guard only what the Guard alone
// knows (a validation round of the binding, which the Guard shares among
// callers) and tells it what it must remember (that the binding is fenced,
// that a tombstone was written).
type sweeper struct {
	objects
	ts   tokenState
	live map[string]bool // intent objects of this Guard: not an older writer's
	// named are intent objects to read by name besides those listed
	// (claimRef): a listing may leave out a journal its writer is
	// rewriting.
	named    []string
	validity time.Duration // Config.SignedRequestValidity
	grace    time.Duration // Config.ReleaseGrace
	log      *slog.Logger
	met      *metrics
	hook     func(ctx context.Context, key string) error // Hooks.BeforeSweepKey

	validate  func(ctx context.Context, key string) error // validate ts's binding
	fenced    func(reason string)                         // latch ts's binding fenced
	tombstone func(key, etag string, rec record)          // a tombstone now stands at key
}

// sweeper returns the sweeper of binding ts.
func (g *Guard) sweeper(ts tokenState) *sweeper {
	return &sweeper{
		objects: g.objects, ts: ts, live: g.intents.liveNames(), validity: g.cfg.SignedRequestValidity,
		grace: g.cfg.ReleaseGrace,
		log:   g.log, met: g.met, hook: g.cfg.Hooks.BeforeSweepKey,
		validate:  func(ctx context.Context, key string) error { return g.validate(ctx, ts, "sweep", key) },
		fenced:    func(reason string) { g.latchFenced(ts.token, ts.claim, reason) },
		tombstone: g.tombs.note,
	}
}

// sweep is step 6 of binding (docs/DESIGN.md §8): every key named by an intent of
// an older epoch (or of an earlier instance of this epoch) gets an ETag no
// older writer can hold, or a tombstone if absent; then those intents are
// deleted and a completion marker is written.
//
// The sweep's own rewrites are commits too: before them it writes its own
// intent (naming each key with the bases ∪ the ETag found) and validates,
// so that a sweeper paused mid-sweep is handled by the next binder like any
// other writer.
func (sw *sweeper) run(ctx context.Context) error {
	ts := sw.ts
	names, targets, err := sw.collect(ctx, maxSealAttempts, true)
	if err != nil {
		return err
	}
	if len(targets) == 0 {
		sw.writeSweptMarker(ctx, ts.token, len(names), 0)
		sw.met.swept(len(names), 0)
		return sw.deleteIntents(ctx, names)
	}
	sw.log.Info("takeover sweep", "epoch", ts.token, "intents", len(names), "keys", len(targets))
	si := &sweepIntent{sw: sw, name: sw.lay.sweepIntent(ts.token, ts.claim), keys: map[string]map[string]bool{}}
	// Stat every key first so that one intent write and one validation
	// cover every rewrite in the common case.
	found := make([]sweepState, len(targets))
	if err := forEach(ctx, len(targets), func(ctx context.Context, i int) error {
		st, err := sw.statKey(ctx, targets[i].key)
		found[i] = st
		return err
	}); err != nil {
		return err
	}
	for i, t := range targets {
		bases := map[string]bool{found[i].etag(): true}
		for b := range t.bases {
			bases[b] = true
		}
		si.keys[t.key] = bases
	}
	if err := si.write(ctx); err != nil {
		return err
	}
	if err := sw.validate(ctx, sw.lay.register()); err != nil {
		return err
	}
	wid := newWID()
	if err := forEach(ctx, len(targets), func(ctx context.Context, i int) error {
		return sw.sweepKey(ctx, si, targets[i], found[i], wid)
	}); err != nil {
		return err
	}
	sw.writeSweptMarker(ctx, ts.token, len(names), len(targets))
	sw.met.swept(len(names), len(targets))
	return sw.deleteIntents(ctx, append(names, si.name))
}

// collect lists and reads the intents of epochs <= ts.token, and those
// named (sw.named; one that does not exist is skipped), skipping this
// Guard's live journal, sealing every intent journal among them (at most
// sealAttempts tries each), and groups them by target key. With releases,
// a sealed journal's entries are those its owner's release names, if one
// comes within the grace (release.go); the names returned then include
// the releases used.
func (sw *sweeper) collect(ctx context.Context, sealAttempts int, releases bool) ([]string, []sweepTarget, error) {
	ts, live := sw.ts, sw.live
	epoch := ts.token
	var dirs []uint64
	prefix := sw.lay.intentsPrefix()
	err := sw.store.List(ctx, prefix, "/", func(e objstore.Entry) error {
		if n, ok := parseEpochName(strings.TrimPrefix(e.Key, prefix)); ok && e.IsPrefix && n <= epoch {
			dirs = append(dirs, n)
		}
		return nil
	})
	if err != nil {
		return nil, nil, unverifiedErr("listing intents: %w", err)
	}
	var names []string
	seen := map[string]bool{}
	add := func(name string) {
		if !live[name] && !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	for _, d := range dirs {
		err := sw.store.List(ctx, sw.lay.intentDir(d), "", func(e objstore.Entry) error {
			add(e.Key)
			return nil
		})
		if err != nil {
			return nil, nil, unverifiedErr("listing intents of epoch %d: %w", d, err)
		}
	}
	for _, name := range sw.named {
		add(name)
	}
	docs := make([]*intentDoc, len(names))
	if err := forEach(ctx, len(names), func(ctx context.Context, i int) error {
		doc, etag, err := sw.readIntent(ctx, names[i])
		if errors.Is(err, objstore.ErrNotFound) {
			return nil // deleted meanwhile: its writer settled
		}
		if err != nil {
			return intentReadErr(names[i], err)
		}
		if doc.Journal {
			// Seal it first: its writer can add nothing after this, so
			// the sealed content names every key it may commit to.
			if doc, err = sw.sealJournal(ctx, ts, names[i], doc, etag, sealAttempts); err != nil {
				return err
			}
		}
		docs[i] = doc
		return nil
	}); err != nil {
		return nil, nil, err
	}
	// Keep what was found: an intent gone by the time it was read (its
	// writer settled, or a name that was never written) needs no deletion.
	found := 0
	for i := range names {
		if docs[i] != nil {
			names[found], docs[found] = names[i], docs[i]
			found++
		}
	}
	names, docs = names[:found], docs[:found]
	if releases {
		names = append(names, sw.awaitReleases(ctx, names, docs)...)
	}
	byKey := map[string]map[string]bool{}
	var order []string
	for _, d := range docs {
		if d == nil {
			continue
		}
		for _, e := range d.Keys {
			if sw.lay.isProtocolKey(e.Key) || objstore.ValidateKey(e.Key) != nil {
				continue
			}
			if byKey[e.Key] == nil {
				byKey[e.Key] = map[string]bool{}
				order = append(order, e.Key)
			}
			for _, b := range e.Bases {
				byKey[e.Key][objstore.NormalizeETag(b)] = true
			}
		}
	}
	targets := make([]sweepTarget, len(order))
	for i, k := range order {
		targets[i] = sweepTarget{key: k, bases: byKey[k]}
	}
	return names, targets, nil
}

// intentReadErr describes an intent that cannot be read or understood.
func intentReadErr(name string, err error) error {
	if errors.Is(err, ErrUnverified) {
		return fmt.Errorf("%w (delete it by hand only if no writer of its epoch can still commit)", err)
	}
	return unverifiedErr("reading intent %s: %w", name, err)
}

// sweepState is what a stat of a swept key found.
type sweepState struct {
	exists bool
	info   objstore.ObjectInfo
}

func (s sweepState) etag() string {
	if !s.exists {
		return ""
	}
	return objstore.NormalizeETag(s.info.ETag)
}

func (o objects) statKey(ctx context.Context, key string) (sweepState, error) {
	info, err := o.store.Stat(ctx, key)
	switch {
	case err == nil:
		return sweepState{exists: true, info: info}, nil
	case errors.Is(err, objstore.ErrNotFound):
		return sweepState{}, nil
	}
	return sweepState{}, err
}

// sweepIntent is the intent a sweep writes for its own rewrites.
type sweepIntent struct {
	sw   *sweeper
	name string
	mu   sync.Mutex
	keys map[string]map[string]bool // GUARDED_BY(mu)
}

// write writes the intent as it stands. LOCKS_EXCLUDED(si.mu)
func (si *sweepIntent) write(ctx context.Context) error {
	si.mu.Lock()
	doc := intentDoc{Format: FormatVersion, Epoch: si.sw.ts.token, Holder: si.sw.holder, ClaimID: si.sw.ts.claim,
		Written: si.sw.now().UTC(), Sweep: true}
	for _, k := range sortedKeys(si.keys) {
		doc.Keys = append(doc.Keys, intentEntry{Key: k, Bases: sortedKeys(si.keys[k])})
	}
	si.mu.Unlock()
	if err := si.sw.putDoc(ctx, si.name, doc); err != nil {
		return unverifiedErr("writing the sweep's intent: %w", err)
	}
	return nil
}

// cover makes sure the intent names base for key, rewriting it and
// validating again if it did not. It serialises on si.mu so that every
// rewrite carries all bases.
func (si *sweepIntent) cover(ctx context.Context, key, base string) error {
	si.mu.Lock()
	if si.keys[key][base] {
		si.mu.Unlock()
		return nil
	}
	si.keys[key][base] = true
	si.mu.Unlock()
	if err := si.write(ctx); err != nil {
		return err
	}
	return si.sw.validate(ctx, key)
}

// sweepKey gives one key an ETag no older writer holds (or a tombstone).
func (sw *sweeper) sweepKey(ctx context.Context, si *sweepIntent, t sweepTarget, st sweepState, wid string) error {
	ts := sw.ts
	if h := sw.hook; h != nil {
		if err := h(ctx, t.key); err != nil {
			return fmt.Errorf("sweeping %s: %w", t.key, err)
		}
	}
	if isDirMarker(t.key) {
		// An empty "dir/" marker has one possible ETag (that of no bytes),
		// and stores that keep directories as directories (the Versity
		// gateway's posix backend) refuse data or multipart uploads at such
		// keys: there is no version to change. See "Directory markers" in
		// the package doc for what that leaves open.
		sw.log.Debug("sweep: leaving directory marker as is", "key", t.key)
		return nil
	}
	for round := 0; round < maxKeyRounds; round++ {
		if round > 0 {
			var err error
			if st, err = sw.statKey(ctx, t.key); err != nil {
				return fmt.Errorf("sweeping %s: %w", t.key, err)
			}
			if err := si.cover(ctx, t.key, st.etag()); err != nil {
				return err
			}
		}
		if st.exists {
			s := stampOf(st.info.Meta)
			if s.WID == wid {
				return nil // our own rewrite, whose response was lost
			}
			if s.Epoch > ts.token {
				reason := fmt.Sprintf("key %s was written by epoch %d (%s), newer than our token %d", t.key, s.Epoch, holderName(s.Holder), ts.token)
				sw.fenced(reason)
				return fencedErr("sweep", t.key, reason)
			}
		}
		meta, rec, full, avoid, err := sw.sweptMeta(ctx, t, st, wid)
		if err != nil {
			return fmt.Errorf("sweeping %s: %w", t.key, err)
		}
		var info objstore.ObjectInfo
		switch {
		case !st.exists:
			info, err = sw.putTombstone(ctx, t.key, ts, wid, objstore.Condition{IfNoneMatch: true}, meta)
		case isTombstone(st.info):
			info, err = sw.putTombstone(ctx, t.key, ts, wid, objstore.Condition{IfMatch: st.etag()}, meta)
		default:
			info, err = sw.rewrite(ctx, st.info, avoid, meta)
		}
		switch {
		case err == nil:
			if avoid[objstore.NormalizeETag(info.ETag)] {
				return fmt.Errorf("sweeping %s: the store gave the rewrite ETag %s, which an older writer may hold: it does not change ETags with the upload shape as fencing requires", t.key, info.ETag)
			}
			if !st.exists || isTombstone(st.info) {
				sw.tombstone(t.key, info.ETag, rec)
			}
			return nil
		case errors.Is(err, objstore.ErrPrecondition), errors.Is(err, objstore.ErrNotFound):
			continue // changed meanwhile (an older writer landing before we are active): re-stat
		case isTransient(err):
			// The store retried already; a later sweep (the next bind, or
			// a re-run of this one) finishes the key.
			return fmt.Errorf("sweeping %s: %w", t.key, err)
		case errors.Is(err, errNoFreshShape):
			if werr := sw.waitRecordExpiry(ctx, sw.log.With("key", t.key), sw.validity, full, avoid); werr != nil {
				return fmt.Errorf("sweeping %s: %w", t.key, err)
			}
			continue
		default:
			return fmt.Errorf("sweeping %s: %w", t.key, err)
		}
	}
	return fmt.Errorf("sweeping %s: the key kept changing (%d rounds)", t.key, maxKeyRounds)
}

// sweptMeta returns the metadata of the rewrite of t found as st: the
// user metadata kept, the stamps of write id wid and the ETag-ABA record
// naming every base an older writer may hold — rec in the form stored in
// the metadata (spilled when it outgrows it, spill.go), full with every
// young entry; avoid holds the ETags the rewrite must not get.
func (sw *sweeper) sweptMeta(ctx context.Context, t sweepTarget, st sweepState, wid string) (meta map[string]string, rec, full record, avoid avoidSet, err error) {
	now := sw.now()
	full, err = sw.expandRecord(ctx, t.key, parseRecord(st.info.Meta[MetaSwept]).young(now, sw.validity), sw.validity)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	// The bases older writers may commit on are exactly those their
	// intents name: every commit's base is in its intent before its
	// validation (a sweeper's own rewrite included: its intent names the
	// ETag it found). The ETag found here is avoided and recorded only if
	// some intent names it; recording every found ETag would make a later
	// sweep of a small object run out of shapes.
	for b := range t.bases {
		full = full.add(b, now)
	}
	if st.exists && !isTombstone(st.info) {
		if w := sweptWID(st.info.Meta); w != "" {
			full = full.add(sweptWIDPrefix+w, now)
		}
	}
	avoid = avoidSet{}
	for _, e := range full {
		avoid.addAll(e.ETag)
	}
	if rec, err = sw.storeRecord(ctx, t.key, full, sw.validity); err != nil {
		return nil, nil, nil, nil, err
	}
	if len(rec) < len(full) {
		sw.log.Info("ETag-ABA record spilled: more bases than the metadata holds", "key", t.key, "entries", len(full))
	}
	meta = map[string]string{}
	for k, v := range st.info.Meta {
		if !IsStampKey(k) {
			meta[k] = v
		}
	}
	stampMeta(meta, sw.ts, sw.holder, wid)
	meta[MetaSwept] = rec.String()
	if st.exists && !isTombstone(st.info) {
		meta[MetaSweptFrom] = st.etag()
		meta[MetaSweptWID] = sweptWID(st.info.Meta)
	}
	return meta, rec, full, avoid, nil
}

// sweptWID is the write id of the content of an object whose metadata is
// meta: its own, or, for a sweep's rewrite, the one the rewrite carries.
func sweptWID(meta map[string]string) string {
	if meta[MetaSweptFrom] != "" && meta[MetaSweptWID] != "" {
		return meta[MetaSweptWID]
	}
	return meta[MetaWID]
}

// errNoFreshShape: no upload shape gives the content an ETag outside the
// avoid set (all shapes of this content are held as bases).
var errNoFreshShape = errors.New("no upload shape gives an ETag no older writer holds")

// waitRecordExpiry waits until the earliest record entry in avoid expires,
// if one does; else it returns errNoFreshShape at once.
func (o objects) waitRecordExpiry(ctx context.Context, log *slog.Logger, validity time.Duration, rec record, avoid avoidSet) error {
	var earliest time.Time
	for _, e := range rec {
		if avoid[e.ETag] {
			if x := e.At.Add(validity); earliest.IsZero() || x.Before(earliest) {
				earliest = x
			}
		}
	}
	if earliest.IsZero() {
		return errNoFreshShape
	}
	d := earliest.Sub(o.now())
	if d < 10*time.Millisecond {
		d = 10 * time.Millisecond
	}
	log.Warn("waiting for an ETag-ABA record to expire before rewriting: older writers frozen or unanswered mid-commit hold every ETag this content can have", "wait", d, "bases", len(avoid))
	return ctxsleep.Sleep(ctx, d)
}

// rewrite rewrites the existing object info in place (same content, meta
// replaced) with an ETag outside avoid: server-side multipart copy when a
// part count is provably fresh, else read the content, pick a shape by
// hashing, and re-PUT it. Conditional on the ETag found.
func (o objects) rewrite(ctx context.Context, info objstore.ObjectInfo, avoid avoidSet, meta map[string]string) (objstore.ObjectInfo, error) {
	etag := objstore.NormalizeETag(info.ETag)
	cands := shapeCandidates(o.sizing, info.Size, objstore.ShapeMultipart) // server-side copies first
	plain := ""
	if _, mp := objstore.IsMultipartETag(etag); !mp {
		plain = etag
	}
	c, ok, _, err := chooseShape(cands, avoid, etagFromPlain(plain))
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	if ok && c.Count > 0 {
		return o.store.Copy(ctx, info.Key, etag, info.Key, objstore.PutOptions{
			Cond: objstore.Condition{IfMatch: etag}, Meta: meta, ContentType: info.ContentType,
			Shape: objstore.ShapeMultipart, Parts: c.Parts})
	}
	body, err := o.fetch(ctx, info.Key, etag, info.Size)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	defer body.Close()
	c, ok, _, err = chooseShape(cands, avoid, etagFromContent(o.sizing, body, info.Size))
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	if !ok {
		return objstore.ObjectInfo{}, errNoFreshShape
	}
	return o.store.Put(ctx, info.Key, body, info.Size, objstore.PutOptions{
		Cond: objstore.Condition{IfMatch: etag}, Meta: meta, ContentType: info.ContentType,
		Shape: c.Shape, Parts: c.Parts})
}

// deleteIntents deletes swept intents (best effort: a leftover intent only
// costs the next sweep a rewrite).
func (sw *sweeper) deleteIntents(ctx context.Context, names []string) error {
	return forEach(ctx, len(names), func(ctx context.Context, i int) error {
		err := sw.store.Delete(ctx, names[i], objstore.Condition{})
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			sw.log.Warn("deleting a swept intent failed; gc removes it", "intent", names[i], "err", err)
		}
		return nil
	})
}

// writeSweptMarker records that the sweep of epoch completed (gc uses it to
// know which intents are garbage). Best effort.
func (sw *sweeper) writeSweptMarker(ctx context.Context, epoch uint64, intents, keys int) {
	doc := sweptMarkerDoc{Format: FormatVersion, Epoch: epoch, Holder: sw.holder, ClaimID: sw.ts.claim, Intents: intents, Keys: keys, Done: sw.now().UTC()}
	if err := sw.putDoc(ctx, sw.lay.sweptMarker(epoch), doc); err != nil {
		sw.log.Warn("writing the sweep completion marker failed", "epoch", epoch, "err", err)
	}
}

// isDirMarker reports whether key names a directory marker object ("dir/").
func isDirMarker(key string) bool { return strings.HasSuffix(key, "/") }
