package fencing

// The spill of an ETag-ABA record that outgrows the key's metadata.
//
// A record lives in the key's user metadata (MetaSwept), which S3 caps at
// 2 KB: maxRecordEntries entries. A sweep that must record more writes
// every young entry to a spill object of its own, aba/<sha256 of the key>,
// and keeps in the metadata the newest maxRecordEntries-1 entries plus a
// marker entry ("+@<unix>") that stays young as long as the youngest entry
// in the spill. Every reader of a record that finds a young marker reads
// the spill too and avoids its entries: no entry is ever dropped while it
// is young. Commits carry the metadata record (marker included) unchanged;
// only sweeps add entries. A spill is written with If-Match on the one
// read (If-None-Match when none), merging what another sweeper wrote
// meanwhile. `fencefs gc` deletes spills whose entries all expired.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

const (
	abaDir = "aba/"
	// spillMarker is the ETag of the marker entry (never an ETag S3 gives).
	spillMarker = "+"
	// maxSpillSize bounds a spill object (about 45 bytes an entry).
	maxSpillSize = 4 << 20
	// spillAttempts bounds the read-merge-write rounds of one spill write.
	spillAttempts = 8
)

func (l layout) abaPrefix() string { return l.base + abaDir }

// spillOf is the spill object of key's record.
func (l layout) spillOf(key string) string {
	h := sha256.Sum256([]byte(key))
	return l.base + abaDir + hex.EncodeToString(h[:16])
}

// marker returns the record's spill marker entry, if it has one.
func (r record) marker() (recordEntry, bool) {
	for _, e := range r {
		if e.ETag == spillMarker {
			return e, true
		}
	}
	return recordEntry{}, false
}

// withoutMarker returns r less its spill marker.
func (r record) withoutMarker() record {
	out := make(record, 0, len(r))
	for _, e := range r {
		if e.ETag != spillMarker {
			out = append(out, e)
		}
	}
	return out
}

// merge returns r with every entry of o added (the later time wins).
func (r record) merge(o record) record {
	for _, e := range o {
		r = r.add(e.ETag, e.At)
	}
	return r
}

// readSpill reads key's spill: its young entries and its ETag ("" and no
// entries when there is none).
func (o objects) readSpill(ctx context.Context, key string, validity time.Duration) (record, string, error) {
	b, info, err := o.getSmall(ctx, o.lay.spillOf(key), objstore.GetOptions{}, maxSpillSize)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("reading the ETag-ABA record spill of %s: %w", key, err)
	}
	return parseRecord(string(b)).withoutMarker().young(o.now(), validity), objstore.NormalizeETag(info.ETag), nil
}

// expandRecord returns every young entry of rec, a young metadata record
// of key: its own, and the spill's when rec has a young marker. A marker
// whose spill is missing fails closed (ErrUnverified): its entries are
// unknown.
func (o objects) expandRecord(ctx context.Context, key string, rec record, validity time.Duration) (record, error) {
	if _, ok := rec.marker(); !ok {
		return rec, nil
	}
	spilled, etag, err := o.readSpill(ctx, key, validity)
	if err != nil {
		return nil, unverifiedErr("%w", err)
	}
	if etag == "" {
		return nil, unverifiedErr("the ETag-ABA record of %s names a spill object %s that is missing", key, o.lay.spillOf(key))
	}
	return rec.withoutMarker().merge(spilled), nil
}

// storeRecord returns the metadata form of full, every young entry of
// key's record: full itself when it fits, else the newest entries and a
// marker, after writing every entry to the spill (with the spill's young
// entries another sweeper wrote meanwhile).
func (o objects) storeRecord(ctx context.Context, key string, full record, validity time.Duration) (record, error) {
	full = full.withoutMarker()
	if len(full) <= maxRecordEntries {
		return full, nil
	}
	name := o.lay.spillOf(key)
	for range spillAttempts {
		cur, etag, err := o.readSpill(ctx, key, validity)
		if err != nil {
			return nil, err
		}
		all := full.merge(cur)
		cond := objstore.Condition{IfNoneMatch: true}
		if etag != "" {
			cond = objstore.Condition{IfMatch: etag}
		}
		body := []byte(all.String())
		_, err = o.store.Put(ctx, name, bytes.NewReader(body), int64(len(body)), objstore.PutOptions{Cond: cond})
		if errors.Is(err, objstore.ErrPrecondition) {
			continue // another sweeper wrote it: merge again
		}
		if err != nil {
			return nil, fmt.Errorf("writing the ETag-ABA record spill of %s: %w", key, err)
		}
		newest := all[len(all)-1].At
		inline := append(record{}, full[len(full)-(maxRecordEntries-1):]...)
		return append(inline, recordEntry{ETag: spillMarker, At: newest}), nil
	}
	return nil, fmt.Errorf("writing the ETag-ABA record spill of %s: it kept changing", key)
}
