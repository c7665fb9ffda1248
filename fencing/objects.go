package fencing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/fencefs/fencefs/internal/ctxsleep"
	"github.com/fencefs/fencefs/internal/spool"
	"github.com/fencefs/fencefs/objstore"
	"golang.org/x/sync/errgroup"
)

// objects is the protocol's access to the bucket: the store, the key
// layout of the fence domain, the clock and this instance's holder id. It
// is all of the bucket that the intent journal (intents.go, journal.go,
// journalio.go), the takeover sweep (sweep.go) and the tombstone reaper
// (reaper.go) need, each with a few answers from the Guard; the Guard
// embeds it and adds the binding state and validation rounds. Its methods
// keep no state and are safe for concurrent use.
type objects struct {
	store    objstore.Store
	lay      layout
	sizing   objstore.Sizing
	now      func() time.Time
	holder   string
	spoolDir string // where fetch spools large content ("" = os.TempDir())
	// expiry tags tombstones for the bucket lifecycle rule that removes
	// them (tombstone.go); nil: tombstones carry no tag.
	expiry *tombExpiry
}

// fetchInMemory is the largest content fetch keeps in memory.
const fetchInMemory = 16 << 20

// parallelism bounds the requests forEach runs at once.
const parallelism = 8

// head stats key; exists=false when absent.
func (o objects) head(ctx context.Context, key string) (objstore.ObjectInfo, bool, error) {
	info, err := o.store.Stat(ctx, key)
	switch {
	case err == nil:
		return info, true, nil
	case errors.Is(err, objstore.ErrNotFound):
		return objstore.ObjectInfo{}, false, nil
	}
	return objstore.ObjectInfo{}, false, err
}

// putDoc writes a JSON protocol document unconditionally (the store retries
// transient failures).
func (o objects) putDoc(ctx context.Context, key string, doc any) error {
	_, err := o.putJSON(ctx, key, doc, objstore.Condition{})
	return err
}

// putJSON writes doc as JSON at key under cond.
func (o objects) putJSON(ctx context.Context, key string, doc any, cond objstore.Condition) (objstore.ObjectInfo, error) {
	b, err := json.Marshal(doc)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	return o.putRaw(ctx, key, b, cond)
}

// putRaw writes the JSON document b at key under cond, in one plain PUT.
func (o objects) putRaw(ctx context.Context, key string, b []byte, cond objstore.Condition) (objstore.ObjectInfo, error) {
	return o.store.Put(ctx, key, bytes.NewReader(b), int64(len(b)), objstore.PutOptions{
		Cond: cond, Shape: objstore.ShapePlain, ContentType: "application/json"})
}

// getSmall reads the whole object at key, at most limit bytes, with its
// info.
func (o objects) getSmall(ctx context.Context, key string, opts objstore.GetOptions, limit int64) ([]byte, objstore.ObjectInfo, error) {
	rc, info, err := o.store.Get(ctx, key, opts)
	if err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit))
	return b, info, err
}

// readRegister reads the whole register. exists=false when there is none.
// Errors wrap ErrUnverified.
func (o objects) readRegister(ctx context.Context) (Register, string, bool, error) {
	b, info, err := o.getSmall(ctx, o.lay.register(), objstore.GetOptions{}, 1<<20)
	if errors.Is(err, objstore.ErrNotFound) {
		return Register{}, "", false, nil
	}
	if err != nil {
		return Register{}, "", false, unverifiedErr("reading the register %s: %w", o.lay.register(), err)
	}
	reg, err := decodeRegister(b)
	if err != nil {
		return Register{}, "", false, err
	}
	return reg, objstore.NormalizeETag(info.ETag), true, nil
}

// readDoc reads the JSON protocol document at key (at most limit bytes)
// into doc, checking its format (decodeDoc; what names it in errors), and
// returns its ETag.
func (o objects) readDoc(ctx context.Context, key, what string, limit int64, doc any, format func() int) (string, error) {
	b, info, err := o.getSmall(ctx, key, objstore.GetOptions{}, limit)
	if err != nil {
		return "", err
	}
	if err := decodeDoc(what+" "+key, b, doc, format); err != nil {
		return "", err
	}
	return objstore.NormalizeETag(info.ETag), nil
}

// readIntent reads an intent object (a journal or a sweep's intent) with
// its ETag.
func (o objects) readIntent(ctx context.Context, name string) (*intentDoc, string, error) {
	var d intentDoc
	etag, err := o.readDoc(ctx, name, "intent", maxIntentSize, &d, func() int { return d.Format })
	if err != nil {
		return nil, "", err
	}
	return &d, etag, nil
}

// readReservation reads the epoch reservation at key.
func (o objects) readReservation(ctx context.Context, key string) (reservation, error) {
	var r reservation
	_, err := o.readDoc(ctx, key, "reservation", 1<<20, &r, func() int { return r.Format })
	return r, err
}

// maxIntentSize bounds what is read of one intent object.
const maxIntentSize = 64 << 20

// fetch reads version etag of key, of size bytes, for hashing and
// re-upload: into memory up to fetchInMemory, else into a temporary file in
// the spool directory. Content of another size is ErrPrecondition (the
// version changed under the pin).
func (o objects) fetch(ctx context.Context, key, etag string, size int64) (spool.Body, error) {
	rc, _, err := o.store.Get(ctx, key, objstore.GetOptions{IfMatch: etag})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	body, err := spool.Read(rc, size, fetchInMemory, o.spoolDir)
	if errors.Is(err, spool.ErrSize) {
		return nil, fmt.Errorf("reading %s: %v: %w", key, err, objstore.ErrPrecondition)
	}
	return body, err
}

// stampMeta sets the stamp keys in meta.
func stampMeta(meta map[string]string, ts tokenState, holder, wid string) {
	if ts.mode != ModeOff {
		meta[MetaEpoch] = fmt.Sprintf("%d", ts.token)
	}
	meta[MetaHolder] = holder
	meta[MetaWID] = wid
}

// forEach runs f for 0..n-1, at most parallelism at a time, and returns
// the first error (cancelling the calls still running), or ctx's error
// when ctx ended first.
func forEach(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	eg, egCtx := errgroup.WithContext(ctx)
	eg.SetLimit(parallelism)
	for i := 0; i < n && egCtx.Err() == nil; i++ {
		eg.Go(func() error { return f(egCtx, i) })
	}
	if err := eg.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// isTransient reports a transient storage failure that the store already
// retried within its deadline (it is not retried again here).
func isTransient(err error) bool {
	return errors.Is(err, objstore.ErrUnavailable) || errors.Is(err, objstore.ErrConflict)
}

// backoff sleeps before re-deciding after a lost race (attempt number
// attempt: jittered exponential, 10 ms to 1 s).
func backoff(ctx context.Context, attempt int) error {
	d := 10 * time.Millisecond << min(attempt, 7)
	if d > time.Second {
		d = time.Second
	}
	d = d/2 + time.Duration(randUint64()%uint64(d/2+1))
	return ctxsleep.Sleep(ctx, d)
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
