// Package memstore is an in-memory objstore.Store for unit tests. It enforces
// every precondition the way S3 (and the Versity gateway) does, produces the
// same ETags a real store produces for the same content and upload shape
// (objstore.Sizing.Layout + objstore.ETagOf), and offers fault hooks.
//
// # Semantics
//
//   - Put and Copy evaluate Cond atomically with the write, at commit time
//     (after the body has been read), as S3 does on PutObject and
//     CompleteMultipartUpload. If-Match on a missing key → ErrPrecondition.
//   - Copy fails with ErrPrecondition when src's ETag is not srcETag, and
//     with ErrNotFound when src is missing. Its result has the ETag a Put of
//     the same content with opts.Shape would have. Nil opts.Meta keeps the
//     source's metadata; an empty ContentType keeps the source's.
//   - Delete of a missing key succeeds, also with If-Match (the Versity
//     gateway answers so); If-Match of another ETag is ErrPrecondition.
//   - Get reads a snapshot of one version: a reader opened before an
//     overwrite keeps returning the old bytes (never a mix).
//   - List is strongly consistent and in lexical order, common prefixes
//     interleaved with objects.
//   - Incomplete multipart uploads exist only when a test adds them with
//     AddUpload (writes are atomic here).
//
// # Fault hooks
//
// SetHook installs a function called twice around every operation, outside
// the store's lock (so it may block): with PhaseBefore before anything is
// evaluated (a non-nil error is returned as the operation's error and
// nothing is applied), and with PhaseAfter once the operation was evaluated
// and applied (Event.Err and Event.Info carry the result; a non-nil error
// replaces the result: the write happened but its response was "lost").
// Returning objstore.ErrUnavailable, objstore.ErrConflict or a context error
// from a hook simulates the corresponding failure.
//
// # Quirks
//
// Options can make the store misbehave like some real backends, for testing
// the capability probe: IgnoreDeleteConditions (MinIO community: DELETE
// ignores If-Match), IgnoreCopyDestConditions, IgnoreCompleteConditions,
// IfMatchMissingCreates, IgnoreIfNoneMatch.
//
// A Store is safe for concurrent use.
package memstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// Op names an operation, as seen by hooks.
type Op string

// Operations.
const (
	OpStat        Op = "stat"
	OpGet         Op = "get"
	OpPut         Op = "put"
	OpCopy        Op = "copy"
	OpDelete      Op = "delete"
	OpList        Op = "list"
	OpListUploads Op = "list-uploads"
	OpAbortUpload Op = "abort-upload"
	// The piecewise multipart upload (CreateUpload, UploadPart,
	// CompleteUpload). Put's own multipart uploads are one OpPut.
	OpCreateUpload   Op = "create-upload"
	OpUploadPart     Op = "upload-part"
	OpCompleteUpload Op = "complete-upload"
)

// Phase tells whether a hook runs before or after the operation applies.
type Phase int

// Phases.
const (
	PhaseBefore Phase = iota
	PhaseAfter
)

func (p Phase) String() string {
	if p == PhaseBefore {
		return "before"
	}
	return "after"
}

// Event describes one hook call.
type Event struct {
	Op    Op
	Phase Phase
	// Key is the key operated on: the destination of a copy, the prefix of
	// a listing.
	Key string
	// Src is the source key of a copy.
	Src string
	// Cond is the condition of a put, copy or delete.
	Cond objstore.Condition
	// Info and Err are the outcome (PhaseAfter only).
	Info objstore.ObjectInfo
	Err  error
}

// Hook is called around operations; see the package documentation.
type Hook func(ctx context.Context, ev Event) error

// Options configures a Store. The zero value is a conforming store with the
// default sizing.
type Options struct {
	// Sizing decides the ETag shape of ShapeAuto and Parts == 0 uploads.
	Sizing objstore.Sizing
	// IgnoreDeleteConditions makes Delete ignore its condition and delete
	// anyway, as the last MinIO community release does.
	IgnoreDeleteConditions bool
	// IgnoreCopyDestConditions makes Copy ignore opts.Cond, as MinIO and the
	// Versity gateway do on CopyObject.
	IgnoreCopyDestConditions bool
	// IgnoreCompleteConditions makes multipart-shaped Puts ignore opts.Cond
	// (a backend that does not evaluate conditions on
	// CompleteMultipartUpload).
	IgnoreCompleteConditions bool
	// IfMatchMissingCreates makes If-Match on a missing key succeed (and
	// create it).
	IfMatchMissingCreates bool
	// IgnoreIfNoneMatch makes If-None-Match:* on writes a no-op.
	IgnoreIfNoneMatch bool
	// ListMetadata makes ListMeta's entries carry each object's metadata,
	// as MinIO's listings do; without it they carry none, as the Versity
	// gateway's and AWS S3's.
	ListMetadata bool
	// Lifecycle lets EnsureTagExpiry record rules (Rules); without it the
	// store answers LifecycleErr, or ErrInvalid (no lifecycle rules, as
	// the Versity gateway). The rules are recorded, never applied.
	Lifecycle    bool
	LifecycleErr error
	// Now is the clock for LastModified; nil means time.Now.
	Now func() time.Time
}

type object struct {
	data        []byte // never mutated after creation
	etag        string
	meta        map[string]string
	tags        map[string]string
	contentType string
	modified    time.Time
}

// Store is an in-memory objstore.Store. Create with New or NewWithOptions.
type Store struct {
	opts Options // constant after construction

	mu      sync.Mutex
	objects map[string]*object         // GUARDED_BY(mu)
	uploads map[string]objstore.Upload // by upload id; GUARDED_BY(mu)
	pending map[string]*pendingUpload  // state of CreateUpload's uploads, by id; GUARDED_BY(mu)
	nextID  int                        // GUARDED_BY(mu)
	hook    Hook                       // GUARDED_BY(mu)
	rules   []objstore.TagExpiry       // GUARDED_BY(mu)
}

var _ objstore.Store = (*Store)(nil)
var _ objstore.Sizer = (*Store)(nil)

// New returns an empty conforming store with the default sizing.
func New() *Store { return NewWithOptions(Options{}) }

// NewWithOptions returns an empty store configured by o.
func NewWithOptions(o Options) *Store {
	o.Sizing = o.Sizing.Normalize()
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Store{opts: o, objects: map[string]*object{}, uploads: map[string]objstore.Upload{}, pending: map[string]*pendingUpload{}}
}

// Sizing reports how the store splits uploads (see objstore.Sizing).
func (s *Store) Sizing() objstore.Sizing { return s.opts.Sizing }

// SetHook installs h (nil removes it). Safe to call concurrently with
// operations; an operation already past a hook call is not affected.
func (s *Store) SetHook(h Hook) {
	s.mu.Lock()
	s.hook = h
	s.mu.Unlock()
}

// AddUpload registers an incomplete multipart upload of key (as a client
// that died mid-upload leaves behind) and returns its id.
func (s *Store) AddUpload(key string, initiated time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	id := "upload-" + strconv.Itoa(s.nextID)
	s.uploads[id] = objstore.Upload{Key: key, UploadID: id, Initiated: initiated}
	return id
}

// Len returns the number of objects stored.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.objects)
}

func (s *Store) before(ctx context.Context, ev Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	h := s.hook
	s.mu.Unlock()
	if h == nil {
		return nil
	}
	ev.Phase = PhaseBefore
	return h(ctx, ev)
}

func (s *Store) after(ctx context.Context, ev Event) error {
	s.mu.Lock()
	h := s.hook
	s.mu.Unlock()
	if h == nil {
		return ev.Err
	}
	ev.Phase = PhaseAfter
	if err := h(ctx, ev); err != nil {
		return err
	}
	return ev.Err
}

func (o *object) info(key string) objstore.ObjectInfo {
	return objstore.ObjectInfo{
		Key:          key,
		Size:         int64(len(o.data)),
		ETag:         o.etag,
		LastModified: o.modified,
		Meta:         maps.Clone(o.meta),
		ContentType:  o.contentType,
	}
}

// Stat implements objstore.Store.
func (s *Store) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	ev := Event{Op: OpStat, Key: key}
	if err := s.before(ctx, ev); err != nil {
		return objstore.ObjectInfo{}, err
	}
	s.mu.Lock()
	o := s.objects[key]
	if o == nil {
		ev.Err = fmt.Errorf("stat %q: %w", key, objstore.ErrNotFound)
	} else {
		ev.Info = o.info(key)
	}
	s.mu.Unlock()
	err := s.after(ctx, ev)
	if err != nil {
		return objstore.ObjectInfo{}, err
	}
	return ev.Info, nil
}

// Get implements objstore.Store. Length <= 0 reads to the end; an Offset at
// or past the end gives an empty body.
func (s *Store) Get(ctx context.Context, key string, opts objstore.GetOptions) (io.ReadCloser, objstore.ObjectInfo, error) {
	ev := Event{Op: OpGet, Key: key}
	if err := s.before(ctx, ev); err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	var body []byte
	s.mu.Lock()
	o := s.objects[key]
	switch {
	case opts.Offset < 0:
		ev.Err = fmt.Errorf("get %q: negative offset: %w", key, objstore.ErrInvalid)
	case o == nil:
		ev.Err = fmt.Errorf("get %q: %w", key, objstore.ErrNotFound)
	case opts.IfMatch != "" && objstore.NormalizeETag(opts.IfMatch) != o.etag:
		ev.Err = fmt.Errorf("get %q: If-Match %s, object is %s: %w", key, opts.IfMatch, o.etag, objstore.ErrPrecondition)
	case opts.IfNoneMatch != "" && objstore.NormalizeETag(opts.IfNoneMatch) == o.etag:
		ev.Err = fmt.Errorf("get %q: %w", key, objstore.ErrNotModified)
	default:
		ev.Info = o.info(key)
		body = o.data
		if opts.Offset >= int64(len(body)) {
			body = nil
		} else {
			body = body[opts.Offset:]
			if opts.Length > 0 && opts.Length < int64(len(body)) {
				body = body[:opts.Length]
			}
		}
	}
	s.mu.Unlock()
	if err := s.after(ctx, ev); err != nil {
		return nil, objstore.ObjectInfo{}, err
	}
	return io.NopCloser(bytes.NewReader(body)), ev.Info, nil
}

// check evaluates cond against the current object o (nil: missing).
// LOCKS_REQUIRED(s.mu)
func (s *Store) check(op Op, key string, o *object, cond objstore.Condition) error {
	switch {
	case cond.IfNoneMatch && o != nil && !s.opts.IgnoreIfNoneMatch:
		return fmt.Errorf("%s %q: If-None-Match: * but the key exists: %w", op, key, objstore.ErrPrecondition)
	case cond.IfMatch != "" && o == nil && !s.opts.IfMatchMissingCreates:
		return fmt.Errorf("%s %q: If-Match %s but the key is missing: %w", op, key, cond.IfMatch, objstore.ErrPrecondition)
	case cond.IfMatch != "" && o != nil && objstore.NormalizeETag(cond.IfMatch) != o.etag:
		return fmt.Errorf("%s %q: If-Match %s, object is %s: %w", op, key, cond.IfMatch, o.etag, objstore.ErrPrecondition)
	}
	return nil
}

func (s *Store) validateWrite(key string, opts objstore.PutOptions) error {
	return objstore.ValidateWrite(key, opts)
}

// Put implements objstore.Store.
func (s *Store) Put(ctx context.Context, key string, body io.ReaderAt, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	ev := Event{Op: OpPut, Key: key, Cond: opts.Cond}
	if err := s.before(ctx, ev); err != nil {
		return objstore.ObjectInfo{}, err
	}
	ev.Err = func() error {
		if err := s.validateWrite(key, opts); err != nil {
			return err
		}
		layout, err := s.opts.Sizing.Layout(size, opts.Shape, opts.Parts)
		if err != nil {
			return err
		}
		data := make([]byte, size)
		if n, err := body.ReadAt(data, 0); int64(n) < size {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("put %q: reading body: %w", key, err)
		}
		etag, err := objstore.ETagOf(bytes.NewReader(data), size, layout)
		if err != nil {
			return err
		}
		cond := opts.Cond
		if layout != nil && s.opts.IgnoreCompleteConditions {
			cond = objstore.Condition{}
		}
		ct := opts.ContentType
		if ct == "" {
			ct = "application/octet-stream"
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.check(OpPut, key, s.objects[key], cond); err != nil {
			return err
		}
		o := &object{data: data, etag: etag, meta: maps.Clone(opts.Meta), tags: maps.Clone(opts.Tags), contentType: ct, modified: s.now()}
		s.objects[key] = o
		ev.Info = o.info(key)
		return nil
	}()
	if err := s.after(ctx, ev); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return ev.Info, nil
}

// LOCKS_REQUIRED(s.mu)
func (s *Store) now() time.Time { return s.opts.Now().UTC().Truncate(time.Second) }

// Copy implements objstore.Store.
func (s *Store) Copy(ctx context.Context, src, srcETag, dst string, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	ev := Event{Op: OpCopy, Key: dst, Src: src, Cond: opts.Cond}
	if err := s.before(ctx, ev); err != nil {
		return objstore.ObjectInfo{}, err
	}
	ev.Err = func() error {
		if err := s.validateWrite(dst, opts); err != nil {
			return err
		}
		if srcETag == "" {
			return fmt.Errorf("copy %q: empty source ETag: %w", src, objstore.ErrInvalid)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		so := s.objects[src]
		if so == nil {
			return fmt.Errorf("copy %q: source: %w", src, objstore.ErrNotFound)
		}
		if objstore.NormalizeETag(srcETag) != so.etag {
			return fmt.Errorf("copy %q: source is %s, not %s: %w", src, so.etag, srcETag, objstore.ErrPrecondition)
		}
		layout, err := s.opts.Sizing.Layout(int64(len(so.data)), opts.Shape, opts.Parts)
		if err != nil {
			return err
		}
		etag, err := objstore.ETagOf(bytes.NewReader(so.data), int64(len(so.data)), layout)
		if err != nil {
			return err
		}
		cond := opts.Cond
		if s.opts.IgnoreCopyDestConditions {
			cond = objstore.Condition{}
		}
		if err := s.check(OpCopy, dst, s.objects[dst], cond); err != nil {
			return err
		}
		meta := so.meta
		if opts.Meta != nil {
			meta = opts.Meta
		}
		ct := so.contentType
		if opts.ContentType != "" {
			ct = opts.ContentType
		}
		o := &object{data: so.data, etag: etag, meta: maps.Clone(meta), tags: maps.Clone(opts.Tags), contentType: ct, modified: s.now()}
		s.objects[dst] = o
		ev.Info = o.info(dst)
		return nil
	}()
	if err := s.after(ctx, ev); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return ev.Info, nil
}

// Delete implements objstore.Store. Deleting a missing key succeeds, also
// with If-Match (as the Versity gateway answers); If-Match of another ETag
// is ErrPrecondition; If-None-Match is ErrInvalid.
func (s *Store) Delete(ctx context.Context, key string, cond objstore.Condition) error {
	ev := Event{Op: OpDelete, Key: key, Cond: cond}
	if err := s.before(ctx, ev); err != nil {
		return err
	}
	ev.Err = func() error {
		if err := objstore.ValidateCond(cond); err != nil {
			return err
		}
		if cond.IfNoneMatch {
			return fmt.Errorf("delete %q: If-None-Match is meaningless on DELETE: %w", key, objstore.ErrInvalid)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		o := s.objects[key]
		if o == nil {
			// Nothing to delete: success, conditional or not, as the
			// Versity gateway answers.
			return nil
		}
		if !s.opts.IgnoreDeleteConditions {
			if err := s.check(OpDelete, key, o, cond); err != nil {
				return err
			}
		}
		delete(s.objects, key)
		return nil
	}()
	return s.after(ctx, ev)
}

// List implements objstore.Store. The listing is a snapshot taken at the
// call; fn runs without the store's lock held, so it may call the store.
func (s *Store) List(ctx context.Context, prefix, delim string, fn func(objstore.Entry) error) error {
	return s.list(ctx, prefix, delim, false, fn)
}

// ListMeta implements objstore.Store: List, with each object's metadata
// when Options.ListMetadata is set (hooks see an OpList).
func (s *Store) ListMeta(ctx context.Context, prefix, delim string, fn func(objstore.Entry) error) error {
	return s.list(ctx, prefix, delim, s.opts.ListMetadata, fn)
}

func (s *Store) list(ctx context.Context, prefix, delim string, meta bool, fn func(objstore.Entry) error) error {
	ev := Event{Op: OpList, Key: prefix}
	if err := s.before(ctx, ev); err != nil {
		return err
	}
	var entries []objstore.Entry
	s.mu.Lock()
	seen := map[string]bool{}
	for k, o := range s.objects {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if delim != "" {
			if i := strings.Index(k[len(prefix):], delim); i >= 0 {
				p := k[:len(prefix)+i+len(delim)]
				if !seen[p] {
					seen[p] = true
					entries = append(entries, objstore.Entry{Key: p, IsPrefix: true})
				}
				continue
			}
		}
		e := objstore.Entry{Key: k, Size: int64(len(o.data)), ETag: o.etag, LastModified: o.modified}
		if meta {
			e.Meta, e.ContentType = maps.Clone(o.meta), o.contentType
			if e.Meta == nil {
				e.Meta = map[string]string{}
			}
		}
		entries = append(entries, e)
	}
	s.mu.Unlock()
	sort.Slice(entries, func(i, j int) bool { return entries[i].Key < entries[j].Key })
	if err := s.after(ctx, ev); err != nil {
		return err
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// ListUploads implements objstore.Store, in key then upload-id order.
func (s *Store) ListUploads(ctx context.Context, prefix string, fn func(objstore.Upload) error) error {
	ev := Event{Op: OpListUploads, Key: prefix}
	if err := s.before(ctx, ev); err != nil {
		return err
	}
	var ups []objstore.Upload
	s.mu.Lock()
	for _, u := range s.uploads {
		if strings.HasPrefix(u.Key, prefix) {
			ups = append(ups, u)
		}
	}
	s.mu.Unlock()
	sort.Slice(ups, func(i, j int) bool {
		if ups[i].Key != ups[j].Key {
			return ups[i].Key < ups[j].Key
		}
		return ups[i].UploadID < ups[j].UploadID
	})
	if err := s.after(ctx, ev); err != nil {
		return err
	}
	for _, u := range ups {
		if err := fn(u); err != nil {
			return err
		}
	}
	return nil
}

// AbortUpload implements objstore.Store. An unknown upload id is
// ErrNotFound (S3's NoSuchUpload).
func (s *Store) AbortUpload(ctx context.Context, key, uploadID string) error {
	ev := Event{Op: OpAbortUpload, Key: key}
	if err := s.before(ctx, ev); err != nil {
		return err
	}
	s.mu.Lock()
	if u, ok := s.uploads[uploadID]; !ok || u.Key != key {
		ev.Err = fmt.Errorf("abort upload %q of %q: %w", uploadID, key, objstore.ErrNotFound)
	} else {
		delete(s.uploads, uploadID)
		delete(s.pending, uploadID)
	}
	s.mu.Unlock()
	return s.after(ctx, ev)
}
