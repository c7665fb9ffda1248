package fencing

// Retrying on the current version instead of failing, where nothing can be
// inconsistent. The Guard takes these decisions so that its callers never
// read a fencing stamp:
//
//   - a create (Create) that finds a tombstone where it expected nothing
//     goes on top of it (Put's rebase); a live object there is ErrExist.
//   - a whole-file replacement (Replace, CommitReplacement: O_TRUNC, a
//     truncate to 0, O_CREAT|O_TRUNC) uses nothing of the version it was
//     based on. Its commit, refused because the object changed, is retried
//     once on the current version when that version was committed by an
//     epoch older than the Guard's active token: a change made before this
//     Guard became the leader, which its caller could not have seen (a
//     frozen old leader's last write, its own takeover sweep's re-stamp). A
//     change by this epoch, or by a writer without fencing, stays a
//     conflict (ErrStale).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/fencefs/fencefs/objstore"
)

// ErrExist is returned by Create when a live object holds the key.
var ErrExist = errors.New("exists: a live object holds the key")

// Create writes size bytes of body at key as a new object (Put on the
// absent base). A tombstone at the key is created over, as by Put; when a
// live object holds the key the result wraps ErrExist. Other errors as Put.
func (g *Guard) Create(ctx context.Context, key string, body io.ReaderAt, size int64, meta Meta) (objstore.ObjectInfo, error) {
	info, err := g.Put(ctx, key, body, size, Version{}, meta)
	if err == nil || !isConflictErr(err) {
		return info, err
	}
	// Put has already created over any tombstone it found (the mutation
	// protocol's rebase); what refused it is told apart here: a live
	// object is ErrExist.
	cur, serr := g.store.Stat(ctx, key)
	switch {
	case errors.Is(serr, objstore.ErrNotFound):
		return info, err
	case serr != nil:
		return info, serr
	case !isTombstone(cur):
		return info, fmt.Errorf("%w: %s was created concurrently (%v)", ErrExist, key, err)
	}
	return info, err
}

// Replace writes size bytes of body at key as a whole-file replacement of
// base (absent: a Create). A refusal because the key changed is retried
// once on the current version when an epoch older than the active token
// wrote it (see above). Errors as Put and Create.
func (g *Guard) Replace(ctx context.Context, key string, body io.ReaderAt, size int64, base Version, meta Meta) (objstore.ObjectInfo, error) {
	put := func(base Version) (objstore.ObjectInfo, error) {
		return g.Put(ctx, key, body, size, base, meta)
	}
	var info objstore.ObjectInfo
	var err error
	if base.Exists() {
		info, err = put(base)
	} else {
		info, err = g.Create(ctx, key, body, size, meta)
	}
	if err != nil {
		return g.retryReplacement(ctx, key, info, err, put)
	}
	return info, nil
}

// CommitReplacement is CommitStream for a whole-file replacement: a
// refusal because the key changed is retried once on the current version
// (the Stream is rebased on it) when an epoch older than the active token
// wrote it. Errors as CommitStream.
func (g *Guard) CommitReplacement(ctx context.Context, s *Stream, parts []objstore.Part, meta Meta) (objstore.ObjectInfo, error) {
	info, err := g.CommitStream(ctx, s, parts, meta)
	if err != nil {
		return g.retryReplacement(ctx, s.key, info, err, func(base Version) (objstore.ObjectInfo, error) {
			s.Rebase(base)
			return g.CommitStream(ctx, s, parts, meta)
		})
	}
	return info, nil
}

// retryReplacement decides a replacement of key refused with (info, err):
// once more with again on the current version when replacementBase allows
// it, else (info, err) stand.
func (g *Guard) retryReplacement(ctx context.Context, key string, info objstore.ObjectInfo, err error,
	again func(Version) (objstore.ObjectInfo, error)) (objstore.ObjectInfo, error) {
	if !isConflictErr(err) && !errors.Is(err, ErrExist) {
		return info, err
	}
	cur, ok := g.replacementBase(ctx, key)
	if !ok {
		return info, err
	}
	return again(cur)
}

// replacementBase returns the version a whole-file replacement of key may
// be committed on instead of the one it was based on: the current one
// (absent, a tombstone or an object) if it was written by an epoch older
// than the active token. ok is false when the refusal must stand.
func (g *Guard) replacementBase(ctx context.Context, key string) (Version, bool) {
	st := g.Status()
	if st.State != StateActive || st.Token == 0 {
		return Version{}, false // no leader (mode off): a conflict is a conflict
	}
	cur, err := g.store.Stat(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		g.log.Info("replacing a file removed by an older epoch", "key", key, "token", st.Token)
		return Version{}, true
	}
	if err != nil {
		return Version{}, false
	}
	if !olderEpoch(cur.Meta, st.Token) {
		return Version{}, false
	}
	g.log.Info("replacing a file last written by an older epoch", "key", key,
		"written_by_epoch", cur.Meta[MetaEpoch], "token", st.Token)
	return VersionOf(cur), true
}

// olderEpoch reports whether meta carries the stamp of an epoch older than
// token (unstamped: not known to be older).
func olderEpoch(meta map[string]string, token uint64) bool {
	epoch, err := strconv.ParseUint(meta[MetaEpoch], 10, 64)
	return err == nil && epoch < token
}

// isConflictErr reports an error saying that the key is not at the version
// a conditional mutation expected.
func isConflictErr(err error) bool {
	return errors.Is(err, ErrStale) || errors.Is(err, objstore.ErrPrecondition)
}
