package fencing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencefs/fencefs/internal/spool"
	"github.com/fencefs/fencefs/objstore"
)

// Copy copies version srcETag of src onto dst server-side, conditioned on
// dstBase like Put. meta nil keeps src's user metadata (stamps renewed).
// It reads the source's size and metadata first; CopyFrom skips that read
// when the caller knows them. Errors as Put, plus ErrStale when src is no
// longer at srcETag and objstore.ErrNotFound when src is gone.
func (g *Guard) Copy(ctx context.Context, src, srcETag, dst string, dstBase Version, meta Meta) (objstore.ObjectInfo, error) {
	return g.CopyFrom(ctx, objstore.ObjectInfo{Key: src, ETag: srcETag}, dst, dstBase, meta)
}

// CopyFrom is Copy of the source version src describes. When src carries
// its metadata (src.Meta non-nil, as Stat, Put, Copy and a listing with
// metadata give it), its Size, Meta and ContentType are trusted instead of
// read again: the copy itself is pinned to src.ETag, and only when the
// store refuses it is the source read, to tell a changed or deleted source
// (ErrStale, ErrFenced, objstore.ErrNotFound, as Copy) from a destination
// no longer at dstBase. With src.Meta nil it reads them first, as Copy.
func (g *Guard) CopyFrom(ctx context.Context, src objstore.ObjectInfo, dst string, dstBase Version, meta Meta) (objstore.ObjectInfo, error) {
	ts, err := g.begin(ctx, "copy", dst)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	defer g.end(dst)
	srcETag := objstore.NormalizeETag(src.ETag)
	srcInfo, known := src, src.Meta != nil
	if !known {
		if srcInfo, err = g.store.Stat(ctx, src.Key); err != nil {
			return objstore.ObjectInfo{}, g.copySourceErr(src.Key, dst, err)
		}
		srcInfo.Key = src.Key
	}
	if err := g.checkCopySource(ctx, ts, src.Key, srcInfo, srcETag, dst); err != nil {
		return objstore.ObjectInfo{}, err
	}
	if meta == nil {
		meta = Meta{}
		for k, v := range srcInfo.Meta {
			if !IsStampKey(k) {
				meta[k] = v
			}
		}
	}
	pre := g.prefetch(ctx, ts, srcInfo, srcETag)
	defer pre.close()
	m := &mutation{op: "copy", kind: kindPut, key: dst, base: dstBase, ts: ts, wid: newWID()}
	return g.run(ctx, m, func(ctx context.Context, cond objstore.Condition, base Version, rec record) (objstore.ObjectInfo, error) {
		info, err := g.copyOnce(ctx, m, srcInfo, srcETag, pre, cond, meta, rec)
		if known && (errors.Is(err, objstore.ErrPrecondition) || errors.Is(err, objstore.ErrNotFound)) {
			// The source may have changed since the caller read it, or
			// the destination since dstBase: the source says which.
			cur, serr := g.store.Stat(ctx, src.Key)
			if serr != nil {
				return objstore.ObjectInfo{}, g.copySourceErr(src.Key, dst, serr)
			}
			if cerr := g.checkCopySource(ctx, ts, src.Key, cur, srcETag, dst); cerr != nil {
				return objstore.ObjectInfo{}, cerr
			}
		}
		return info, err
	})
}

// copyOnce is one attempt of a copy of srcInfo (version srcETag) onto m's
// key with the condition and record run gives: a Put of the content pre
// read, when it did, else the store's Copy.
func (g *Guard) copyOnce(ctx context.Context, m *mutation, srcInfo objstore.ObjectInfo, srcETag string, pre *prefetched, cond objstore.Condition, meta Meta, rec record) (objstore.ObjectInfo, error) {
	plain := ""
	if _, mp := objstore.IsMultipartETag(srcETag); !mp {
		plain = srcETag
	}
	shape, parts, err := g.pickShape(ctx, m.full, srcInfo.Size, etagFromPlain(plain))
	if errors.Is(err, errNeedContent) {
		body, ferr := g.fetch(ctx, srcInfo.Key, srcETag, srcInfo.Size)
		if ferr != nil {
			return objstore.ObjectInfo{}, ferr
		}
		defer body.Close()
		shape, parts, err = g.pickShape(ctx, m.full, srcInfo.Size, etagFromContent(g.sizing, body, srcInfo.Size))
	}
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	if body, ok, err := pre.wait(ctx); ok {
		if err != nil {
			return objstore.ObjectInfo{}, err
		}
		return g.store.Put(ctx, m.key, body, srcInfo.Size, objstore.PutOptions{
			Cond: cond, Meta: g.stamped(meta, m, rec), ContentType: srcInfo.ContentType, Shape: shape, Parts: parts})
	}
	return g.store.Copy(ctx, srcInfo.Key, srcETag, m.key, objstore.PutOptions{
		Cond: cond, Meta: g.stamped(meta, m, rec), ContentType: srcInfo.ContentType, Shape: shape, Parts: parts,
		Source: &srcInfo})
}

// copySourceErr is the error of a copy to dst whose source src could not
// be read (err from Stat).
func (g *Guard) copySourceErr(src, dst string, err error) error {
	if errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("copy %s to %s: source: %w", src, dst, err)
	}
	return fmt.Errorf("copy %s to %s: %w", src, dst, err)
}

// checkCopySource refuses a copy to dst whose source src, as read (cur), is
// not version srcETag: deleted (a tombstone: objstore.ErrNotFound), or
// changed (ErrStale, or ErrFenced when a newer epoch wrote it).
func (g *Guard) checkCopySource(ctx context.Context, ts tokenState, src string, cur objstore.ObjectInfo, srcETag, dst string) error {
	switch {
	case isTombstone(cur):
		return fmt.Errorf("copy %s to %s: source was deleted: %w", src, dst, objstore.ErrNotFound)
	case objstore.NormalizeETag(cur.ETag) != srcETag:
		return g.staleOrFenced(ctx, ts, "copy", src, cur,
			fmt.Sprintf("the source changed (ETag %s, expected %s)", cur.ETag, srcETag))
	}
	return nil
}

// copyPrefetchMax is the largest copy source read while the copy's intent
// is written and validated: a plain copy (every S3 store here copies an
// object below the multipart threshold with a GET and a conditional PUT,
// as MinIO and the gateway ignore conditions on CopyObject) then costs
// the PUT after the journal write instead of a GET and a PUT; a rename's
// one round trip less. Larger sources keep the store's Copy.
const copyPrefetchMax = 1 << 20

// prefetched is a copy source's content being read in the background. A
// nil *prefetched read nothing. Its methods are for the copy's goroutine.
type prefetched struct {
	cancel context.CancelFunc
	done   chan struct{}
	body   spool.Body // set before done closes
	err    error      // set before done closes
}

// prefetch starts reading version srcETag of the copy source src when it
// is small and the copy has a journal write or a validation to overlap
// (not in off mode); nil otherwise.
func (g *Guard) prefetch(ctx context.Context, ts tokenState, src objstore.ObjectInfo, srcETag string) *prefetched {
	if ts.mode == ModeOff || src.Size > copyPrefetchMax {
		return nil
	}
	ctx, cancel := context.WithCancel(objstore.WithRetryDeadline(ctx, time.Now().Add(g.cfg.OpTimeout)))
	p := &prefetched{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.body, p.err = g.fetch(ctx, src.Key, srcETag, src.Size)
	}()
	return p
}

// wait returns the content read (ok=false: none was read), or why it
// could not be (ErrPrecondition or ErrNotFound: the source is no longer
// at its ETag).
func (p *prefetched) wait(ctx context.Context) (_ spool.Body, ok bool, _ error) {
	if p == nil {
		return nil, false, nil
	}
	select {
	case <-p.done:
		return p.body, true, p.err
	case <-ctx.Done():
		return nil, true, ctx.Err()
	}
}

// close stops the read and releases what it read.
func (p *prefetched) close() {
	if p == nil {
		return
	}
	p.cancel()
	<-p.done
	if p.body != nil {
		p.body.Close()
	}
}
