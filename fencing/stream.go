package fencing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"

	"github.com/fencefs/fencefs/objstore"
)

// ErrStreamChanged reports that a Stream cannot be committed as it was
// started (the metadata, the token, the ETag-ABA record or the upload
// changed since, or its ETag is one an older writer may hold). Nothing was
// published: the caller writes the content with Put instead.
var ErrStreamChanged = errors.New("fencing: the streamed upload no longer matches the commit")

// Stream is a multipart upload of one key that is filled while its content
// is still being written (a large sequential write uploads its parts
// before close), then published by CommitStream with the whole mutation
// protocol of Put: intent, validation, a Complete conditioned on the base,
// outcome resolution by write id. Parts are invisible until then, so
// uploading them early changes nothing the fencing argument relies on.
//
// The object's metadata (the caller's, plus the stamps) is fixed by
// StartStream: CommitStream refuses with ErrStreamChanged unless the
// commit would stamp exactly the same. Methods are safe for concurrent
// use; parts may be uploaded in parallel.
type Stream struct {
	// Constant after StartStream.
	g        *Guard
	key      string
	uploadID string
	wid      string
	meta     map[string]string // as stored by CreateUpload

	mu      sync.Mutex
	base    Version // GUARDED_BY(mu): the version the commit is conditioned on
	aborted bool    // GUARDED_BY(mu)
	// attempted: a Complete was sent whose outcome may be unknown; a later
	// "no such upload" then means it may have landed. GUARDED_BY(mu)
	attempted bool
}

// Rebase conditions the Stream's next CommitStream on base instead: a
// whole-file replacement refused because the key changed may be published
// on the current version (the caller decides when that is right).
func (s *Stream) Rebase(base Version) {
	s.mu.Lock()
	s.base = base
	s.mu.Unlock()
}

// StartStream starts a Stream of key, to be committed on base with the
// caller's metadata meta. Errors: those of Put's admission (ErrReadOnly,
// ErrFenced …), ErrStale when key is no longer at base, storage errors.
// Nothing is published; the caller must end the Stream with CommitStream
// or Abort.
func (g *Guard) StartStream(ctx context.Context, key string, base Version, meta Meta) (*Stream, error) {
	op := "put"
	if !base.Exists() || base.Tombstone {
		op = "create"
	}
	ts, err := g.begin(ctx, op, key)
	if err != nil {
		return nil, err
	}
	defer g.end(key)
	m := &mutation{op: op, kind: kindPut, key: key, base: base, ts: ts, wid: newWID()}
	rec, needHead := knownRecord(m)
	if needHead {
		info, exists, err := g.head(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", key, err)
		}
		if !atBase(m, info, exists) {
			return nil, staleErr(op, key, "changed before its upload started")
		}
		rec = parseRecord(info.Meta[MetaSwept])
	}
	rec = rec.young(g.cfg.Now(), g.cfg.SignedRequestValidity)
	stamped := g.stamped(meta, m, rec)
	id, err := g.store.CreateUpload(ctx, key, objstore.PutOptions{Meta: stamped})
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", key, err)
	}
	return &Stream{g: g, key: key, base: base, uploadID: id, wid: m.wid, meta: stamped}, nil
}

// UploadPart uploads n bytes of body at off as part number (see
// objstore.Store.UploadPart). body must not change during the call.
func (s *Stream) UploadPart(ctx context.Context, number int, body io.ReaderAt, off, n int64) (objstore.Part, error) {
	s.mu.Lock()
	aborted := s.aborted
	s.mu.Unlock()
	if aborted {
		return objstore.Part{}, fmt.Errorf("stream %s: %w: aborted", s.key, ErrStreamChanged)
	}
	return s.g.store.UploadPart(ctx, s.key, s.uploadID, number, body, off, n)
}

// Abort drops the upload (best effort: an upload left behind is removed by
// `fencefs gc`). It is safe to call more than once and after a commit.
func (s *Stream) Abort(ctx context.Context) {
	s.mu.Lock()
	done := s.aborted
	s.aborted = true
	s.mu.Unlock()
	if done {
		return
	}
	if err := s.g.store.AbortUpload(ctx, s.key, s.uploadID); err != nil && !errors.Is(err, objstore.ErrNotFound) {
		s.g.log.Debug("cannot abort a streamed upload; gc removes it", "key", s.key, "upload", s.uploadID, "err", err)
	}
}

// CommitStream publishes s made of parts (every part of the content, in
// order) with the metadata meta, which must be the meta s was started
// with. It is Put's protocol with CompleteUpload as the commit, and returns
// Put's errors, plus ErrStreamChanged when the stream cannot be committed as
// started. Only success finishes the stream: after an error the upload is
// kept, so that the caller may commit it again (after an unknown outcome,
// with the same write id, which recognises an earlier attempt that landed;
// after ErrStale, on a base given by Rebase) or Abort it.
func (g *Guard) CommitStream(ctx context.Context, s *Stream, parts []objstore.Part, meta Meta) (info objstore.ObjectInfo, err error) {
	etags := make([]string, len(parts))
	var size int64
	for i, p := range parts {
		etags[i] = p.ETag
		size += p.Size
	}
	etag, err := objstore.MultipartETag(etags)
	if err != nil {
		return objstore.ObjectInfo{}, fmt.Errorf("commit stream %s: %w: %v", s.key, ErrStreamChanged, err)
	}
	s.mu.Lock()
	base := s.base
	s.mu.Unlock()
	op := "put"
	if !base.Exists() || base.Tombstone {
		op = "create"
	}
	ts, err := g.begin(ctx, op, s.key)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	defer g.end(s.key)
	m := &mutation{op: op, kind: kindPut, key: s.key, base: base, ts: ts, wid: s.wid}
	return g.run(ctx, m, func(ctx context.Context, cond objstore.Condition, base Version, rec record) (objstore.ObjectInfo, error) {
		if !maps.Equal(g.stamped(meta, m, rec), s.meta) {
			return objstore.ObjectInfo{}, fmt.Errorf("commit stream %s: %w: metadata, token or ETag-ABA record", s.key, ErrStreamChanged)
		}
		avoid := avoidSet{}
		for _, e := range rec {
			avoid.addAll(e.ETag)
		}
		if avoid[etag] {
			return objstore.ObjectInfo{}, fmt.Errorf("commit stream %s: %w: its ETag %s is recorded as an older writer's base", s.key, ErrStreamChanged, etag)
		}
		info, err := g.store.CompleteUpload(ctx, s.key, s.uploadID, parts, cond)
		s.mu.Lock()
		attempted := s.attempted
		s.attempted = s.attempted || (err != nil && !errors.Is(err, objstore.ErrConflict))
		s.mu.Unlock()
		switch {
		case err == nil:
			info.Meta = maps.Clone(s.meta)
			if info.Size == 0 {
				info.Size = size
			}
			return info, nil
		case errors.Is(err, objstore.ErrConflict) && !attempted:
			// The upload is gone (aborted by gc or an operator) before
			// any attempt of ours: nothing was published.
			return objstore.ObjectInfo{}, fmt.Errorf("commit stream %s: %w: %v", s.key, ErrStreamChanged, err)
		case errors.Is(err, objstore.ErrConflict):
			// Gone after an attempt whose outcome we do not know: resolve
			// by what the key holds (our write id, or not).
			return objstore.ObjectInfo{}, fmt.Errorf("commit stream %s: %w (%v)", s.key, objstore.ErrPrecondition, err)
		}
		return objstore.ObjectInfo{}, err
	})
}
