package objstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"sync"
	"time"
)

// Capability is one conditional behaviour a store may or may not honour,
// as the probe checks it. Its text is the check's name in Check.Name,
// Capabilities.Reasons, `fencefs probe` output and metric labels. Which
// capabilities a fencing mode needs is the fencing package's business.
type Capability string

// The capabilities, each with what the probe requires of the store.
const (
	// CheckIfNoneMatchCreate: PUT with If-None-Match:* creates once, then
	// refuses.
	CheckIfNoneMatchCreate Capability = "if-none-match-create"
	// CheckIfMatchCAS: PUT with If-Match succeeds on the current ETag only.
	CheckIfMatchCAS Capability = "if-match-cas"
	// CheckIfMatchMissingRefused: PUT with If-Match on a missing key is
	// refused.
	CheckIfMatchMissingRefused Capability = "if-match-missing-refused"
	// CheckConditionalComplete: multipart uploads honour If-Match and
	// If-None-Match on CompleteMultipartUpload.
	CheckConditionalComplete Capability = "conditional-complete"
	// CheckConditionalDelete: DELETE with a wrong If-Match is refused.
	CheckConditionalDelete Capability = "conditional-delete"
	// CheckConditionalCopyDest: Copy honours conditions on the destination
	// (as the store implements it; S3 stores emulate it with multipart
	// copy).
	CheckConditionalCopyDest Capability = "conditional-copy-dest"
	// CheckParallelCreateOneWinner: concurrent If-None-Match:* creates of
	// one key have exactly one winner.
	CheckParallelCreateOneWinner Capability = "parallel-create-one-winner"
	// CheckStrongListAfterWrite: a listing right after a write shows it,
	// and right after a delete does not.
	CheckStrongListAfterWrite Capability = "strong-list-after-write"
	// CheckListMetadata: a listing can carry each object's user metadata
	// (Store.ListMeta; MinIO's ListObjectsV2 with metadata=true), the
	// same a Stat returns. An optional feature, not a requirement: without
	// it a filesystem needs a Stat per listed object to know its
	// attributes.
	CheckListMetadata Capability = "list-metadata"
)

// probeChecks is the one list of capabilities: their report order and the
// check that establishes each.
var probeChecks = []struct {
	capability Capability
	run        func(*prober, context.Context) (string, error)
	optional   bool // a feature to use where present, not a guarantee
}{
	{CheckIfNoneMatchCreate, (*prober).ifNoneMatchCreate, false},
	{CheckIfMatchCAS, (*prober).ifMatchCAS, false},
	{CheckIfMatchMissingRefused, (*prober).ifMatchMissing, false},
	{CheckConditionalComplete, (*prober).conditionalComplete, false},
	{CheckConditionalDelete, (*prober).conditionalDelete, false},
	{CheckConditionalCopyDest, (*prober).conditionalCopyDest, false},
	{CheckParallelCreateOneWinner, (*prober).parallelCreate, false},
	{CheckStrongListAfterWrite, (*prober).strongList, false},
	{CheckListMetadata, (*prober).listMetadata, true},
	{CheckLockFreeBody, (*prober).lockFreeBody, true},
}

// AllCapabilities returns every capability the probe checks, in report
// order.
func AllCapabilities() []Capability {
	out := make([]Capability, len(probeChecks))
	for i, c := range probeChecks {
		out[i] = c.capability
	}
	return out
}

// Capabilities is the result of Probe: which capabilities the store showed
// and, for every other one, a human-readable reason.
type Capabilities struct {
	// Passed holds every capability whose check passed.
	Passed map[Capability]bool
	// Reasons maps each failed capability to why its check failed.
	Reasons map[Capability]string
	// Err is set when the probe could not run to the end (credentials,
	// missing bucket, unavailable storage, cancelled context); checks not
	// run are reported failed with a "not checked" reason.
	Err error
	// Duration is how long the probe took.
	Duration time.Duration
}

// Has reports whether the store showed capability c.
func (c Capabilities) Has(k Capability) bool { return c.Passed[k] }

// Check is one row of a probe report.
type Check struct {
	Name   Capability
	OK     bool
	Reason string // empty when OK
	// Optional marks a feature used where the store has it (its absence
	// is no failure of the store), not a conditional behaviour a mode
	// may require.
	Optional bool
}

// Checks returns one row per capability, in AllCapabilities order.
func (c Capabilities) Checks() []Check {
	out := make([]Check, 0, len(probeChecks))
	for _, pc := range probeChecks {
		k := pc.capability
		out = append(out, Check{Name: k, OK: c.Has(k), Reason: c.Reasons[k], Optional: pc.optional})
	}
	return out
}

// Require returns nil if the store showed every capability in ks, else an
// error naming each missing one with its reason (or the probe's own error,
// when it did not complete).
func (c Capabilities) Require(ks ...Capability) error {
	var msgs []string
	for _, k := range ks {
		if !c.Has(k) {
			msgs = append(msgs, string(k)+": "+c.Reasons[k])
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	if c.Err != nil {
		return fmt.Errorf("storage probe did not complete: %w", c.Err)
	}
	return fmt.Errorf("the storage lacks %s", strings.Join(msgs, "; "))
}

// Probe checks on scratch keys under dir + "<random>/" which conditional
// operations store really honours (docs/DESIGN.md §6), and removes its
// scratch keys (and any incomplete upload under them) before returning,
// also on failure. dir is "" or ends in "/" (fencefs passes
// fencing.ProbeDir, so that filesystems hide the keys). Probe never returns
// an error: a check that cannot run is reported failed with a reason, and
// Capabilities.Err tells why the probe stopped early (ErrAuth, ErrNoBucket,
// ErrUnavailable or a context error). It uses only the Store interface; a
// few dozen small requests.
func Probe(ctx context.Context, store Store, dir string) Capabilities {
	start := time.Now()
	p := &prober{s: store, dir: dir + randomHex(8) + "/"}
	caps := Capabilities{Passed: map[Capability]bool{}, Reasons: map[Capability]string{}}
	for _, c := range probeChecks {
		if caps.Err != nil {
			caps.Reasons[c.capability] = "not checked: " + caps.Err.Error()
			continue
		}
		reason, err := c.run(p, ctx)
		switch {
		case err != nil && isFatal(ctx, err):
			caps.Err = err
			caps.Reasons[c.capability] = "not checked: " + err.Error()
		case err != nil:
			caps.Reasons[c.capability] = "unexpected error: " + err.Error()
		case reason != "":
			caps.Reasons[c.capability] = reason
		default:
			caps.Passed[c.capability] = true
		}
	}
	// Clean up even when ctx is done, within a bounded time.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	p.cleanup(cctx)
	caps.Duration = time.Since(start)
	return caps
}

func isFatal(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, ErrAuth) || errors.Is(err, ErrNoBucket) ||
		errors.Is(err, ErrUnavailable) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type prober struct {
	s   Store
	dir string
}

func (p *prober) put(ctx context.Context, key string, body []byte, opts PutOptions) (ObjectInfo, error) {
	return p.s.Put(ctx, p.dir+key, bytes.NewReader(body), int64(len(body)), opts)
}

// current returns the body and ETag at key; found is false if absent.
func (p *prober) current(ctx context.Context, key string) (body []byte, etag string, found bool, err error) {
	rc, info, err := p.s.Get(ctx, p.dir+key, GetOptions{})
	if errors.Is(err, ErrNotFound) {
		return nil, "", false, nil
	}
	if err != nil {
		return nil, "", false, err
	}
	defer rc.Close()
	body, err = io.ReadAll(rc)
	return body, info.ETag, true, err
}

// refused classifies the outcome of a write that must be refused: "" when
// it was refused with ErrPrecondition, a reason when it succeeded, err when
// it failed otherwise.
func refused(what string, err error) (string, error) {
	switch {
	case err == nil:
		return what + " succeeded but must be refused", nil
	case errors.Is(err, ErrPrecondition):
		return "", nil
	default:
		return "", err
	}
}

// unchanged returns a reason if key no longer holds want.
func (p *prober) unchanged(ctx context.Context, key string, want []byte, what string) (string, error) {
	body, _, found, err := p.current(ctx, key)
	if err != nil {
		return "", err
	}
	if !found {
		return what + " was refused but the object disappeared", nil
	}
	if !bytes.Equal(body, want) {
		return what + " was refused but the object changed anyway", nil
	}
	return "", nil
}

func (p *prober) ifNoneMatchCreate(ctx context.Context) (string, error) {
	if _, err := p.put(ctx, "create", []byte("first"), PutOptions{Cond: Condition{IfNoneMatch: true}}); err != nil {
		if errors.Is(err, ErrPrecondition) {
			return "If-None-Match:* on a new key was refused", nil
		}
		return "", err
	}
	_, err := p.put(ctx, "create", []byte("second"), PutOptions{Cond: Condition{IfNoneMatch: true}})
	if r, err := refused("PUT with If-None-Match:* over an existing key", err); r != "" || err != nil {
		return r, err
	}
	return p.unchanged(ctx, "create", []byte("first"), "PUT with If-None-Match:*")
}

func (p *prober) ifMatchCAS(ctx context.Context) (string, error) {
	v1, err := p.put(ctx, "cas", []byte("v1"), PutOptions{})
	if err != nil {
		return "", err
	}
	v2, err := p.put(ctx, "cas", []byte("v2"), PutOptions{Cond: Condition{IfMatch: v1.ETag}})
	if errors.Is(err, ErrPrecondition) {
		return "PUT with If-Match of the current ETag was refused", nil
	} else if err != nil {
		return "", err
	}
	if v2.ETag == v1.ETag {
		return "the ETag did not change when the content did", nil
	}
	_, err = p.put(ctx, "cas", []byte("v3"), PutOptions{Cond: Condition{IfMatch: v1.ETag}})
	if r, err := refused("PUT with a stale If-Match", err); r != "" || err != nil {
		return r, err
	}
	return p.unchanged(ctx, "cas", []byte("v2"), "PUT with a stale If-Match")
}

// absentETag is the MD5 of a body never written, for conditions that must
// not match.
var absentETag = hex.EncodeToString([]byte("fencefs-no-such!"))

func (p *prober) ifMatchMissing(ctx context.Context) (string, error) {
	_, err := p.put(ctx, "missing", []byte("x"), PutOptions{Cond: Condition{IfMatch: absentETag}})
	if r, err := refused("PUT with If-Match on a missing key", err); r != "" || err != nil {
		return r, err
	}
	if _, found, err := p.exists(ctx, "missing"); err != nil || found {
		if err != nil {
			return "", err
		}
		return "PUT with If-Match on a missing key was refused but created the key", nil
	}
	return "", nil
}

func (p *prober) exists(ctx context.Context, key string) (ObjectInfo, bool, error) {
	info, err := p.s.Stat(ctx, p.dir+key)
	if errors.Is(err, ErrNotFound) {
		return info, false, nil
	}
	return info, err == nil, err
}

func (p *prober) conditionalComplete(ctx context.Context) (string, error) {
	mp := func(c Condition) PutOptions { return PutOptions{Shape: ShapeMultipart, Parts: 1, Cond: c} }
	v1, err := p.put(ctx, "complete", []byte("v1"), mp(Condition{IfNoneMatch: true}))
	if errors.Is(err, ErrPrecondition) {
		return "multipart upload with If-None-Match:* on a new key was refused", nil
	} else if err != nil {
		return "", err
	}
	if _, ok := IsMultipartETag(v1.ETag); !ok {
		return fmt.Sprintf("a multipart upload got the non-multipart ETag %q", v1.ETag), nil
	}
	_, err = p.put(ctx, "complete", []byte("v2"), mp(Condition{IfNoneMatch: true}))
	if r, err := refused("CompleteMultipartUpload with If-None-Match:* over an existing key", err); r != "" || err != nil {
		return r, err
	}
	_, err = p.put(ctx, "complete", []byte("v3"), mp(Condition{IfMatch: absentETag}))
	if r, err := refused("CompleteMultipartUpload with a wrong If-Match", err); r != "" || err != nil {
		return r, err
	}
	if r, err := p.unchanged(ctx, "complete", []byte("v1"), "conditional CompleteMultipartUpload"); r != "" || err != nil {
		return r, err
	}
	if _, err := p.put(ctx, "complete", []byte("v4"), mp(Condition{IfMatch: v1.ETag})); errors.Is(err, ErrPrecondition) {
		return "CompleteMultipartUpload with If-Match of the current ETag was refused", nil
	} else if err != nil {
		return "", err
	}
	return "", nil
}

func (p *prober) conditionalDelete(ctx context.Context) (string, error) {
	v, err := p.put(ctx, "delete", []byte("keep"), PutOptions{})
	if err != nil {
		return "", err
	}
	err = p.s.Delete(ctx, p.dir+"delete", Condition{IfMatch: absentETag})
	if errors.Is(err, ErrInvalid) {
		return "DELETE with If-Match is rejected as invalid: " + err.Error(), nil
	}
	if r, err := refused("DELETE with a wrong If-Match", err); err != nil {
		return "", err
	} else if r != "" {
		if _, found, err := p.exists(ctx, "delete"); err != nil {
			return "", err
		} else if !found {
			return "DELETE with a wrong If-Match deleted the object: the backend ignores conditions on DELETE", nil
		}
		return r, nil
	}
	if r, err := p.unchanged(ctx, "delete", []byte("keep"), "DELETE with a wrong If-Match"); r != "" || err != nil {
		return r, err
	}
	if err := p.s.Delete(ctx, p.dir+"delete", Condition{IfMatch: v.ETag}); errors.Is(err, ErrPrecondition) {
		return "DELETE with If-Match of the current ETag was refused", nil
	} else if err != nil {
		return "", err
	}
	if _, found, err := p.exists(ctx, "delete"); err != nil || found {
		if err != nil {
			return "", err
		}
		return "DELETE with the right If-Match succeeded but the object is still there", nil
	}
	return "", nil
}

func (p *prober) conditionalCopyDest(ctx context.Context) (string, error) {
	src, err := p.put(ctx, "copy-src", []byte("source"), PutOptions{})
	if err != nil {
		return "", err
	}
	dst, err := p.put(ctx, "copy-dst", []byte("dest"), PutOptions{})
	if err != nil {
		return "", err
	}
	_, err = p.s.Copy(ctx, p.dir+"copy-src", src.ETag, p.dir+"copy-dst", PutOptions{Cond: Condition{IfMatch: absentETag}})
	if r, err := refused("copy onto a key with a wrong If-Match", err); r != "" || err != nil {
		return r, err
	}
	_, err = p.s.Copy(ctx, p.dir+"copy-src", src.ETag, p.dir+"copy-dst", PutOptions{Cond: Condition{IfNoneMatch: true}})
	if r, err := refused("copy with If-None-Match:* onto an existing key", err); r != "" || err != nil {
		return r, err
	}
	_, err = p.s.Copy(ctx, p.dir+"copy-src", absentETag, p.dir+"copy-dst", PutOptions{Cond: Condition{IfMatch: dst.ETag}})
	if r, err := refused("copy from a source with a wrong ETag", err); r != "" || err != nil {
		return r, err
	}
	if r, err := p.unchanged(ctx, "copy-dst", []byte("dest"), "conditional copy"); r != "" || err != nil {
		return r, err
	}
	if _, err := p.s.Copy(ctx, p.dir+"copy-src", src.ETag, p.dir+"copy-dst", PutOptions{Cond: Condition{IfMatch: dst.ETag}}); errors.Is(err, ErrPrecondition) {
		return "copy onto a key with If-Match of its current ETag was refused", nil
	} else if err != nil {
		return "", err
	}
	body, _, _, err := p.current(ctx, "copy-dst")
	if err != nil {
		return "", err
	}
	if string(body) != "source" {
		return "a conditional copy succeeded but the destination does not hold the source", nil
	}
	return "", nil
}

// probeRacers is the number of concurrent creators in the parallel check.
const probeRacers = 16

func (p *prober) parallelCreate(ctx context.Context) (string, error) {
	var wg sync.WaitGroup
	errs := make([]error, probeRacers)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = p.put(ctx, "race", []byte(fmt.Sprintf("writer %d", i)), PutOptions{Cond: Condition{IfNoneMatch: true}})
		}()
	}
	wg.Wait()
	winner := -1
	winners := 0
	for i, err := range errs {
		switch {
		case err == nil:
			winners++
			winner = i
		case errors.Is(err, ErrPrecondition), errors.Is(err, ErrConflict):
		default:
			return "", err
		}
	}
	if winners != 1 {
		return fmt.Sprintf("%d of %d concurrent If-None-Match:* creates succeeded", winners, probeRacers), nil
	}
	return p.unchanged(ctx, "race", []byte(fmt.Sprintf("writer %d", winner)), "a losing concurrent create")
}

func (p *prober) strongList(ctx context.Context) (string, error) {
	listed := func() (map[string]string, error) {
		m := map[string]string{}
		err := p.s.List(ctx, p.dir+"list/", "", func(e Entry) error { m[e.Key] = e.ETag; return nil })
		return m, err
	}
	v, err := p.put(ctx, "list/a", []byte("a"), PutOptions{})
	if err != nil {
		return "", err
	}
	m, err := listed()
	if err != nil {
		return "", err
	}
	if m[p.dir+"list/a"] != v.ETag {
		return "a listing right after a PUT did not show it", nil
	}
	v2, err := p.put(ctx, "list/a", []byte("b"), PutOptions{})
	if err != nil {
		return "", err
	}
	if m, err = listed(); err != nil {
		return "", err
	}
	if m[p.dir+"list/a"] != v2.ETag {
		return "a listing right after an overwrite showed the old version", nil
	}
	if err := p.s.Delete(ctx, p.dir+"list/a", Condition{}); err != nil {
		return "", err
	}
	if m, err = listed(); err != nil {
		return "", err
	}
	if _, ok := m[p.dir+"list/a"]; ok {
		return "a listing right after a DELETE still showed the object", nil
	}
	return "", nil
}

// probeMetaKey is the user metadata key the list-metadata check writes.
const probeMetaKey = "fencefs-probe"

func (p *prober) listMetadata(ctx context.Context) (string, error) {
	v, err := p.put(ctx, "meta/a", []byte("a"), PutOptions{Meta: map[string]string{probeMetaKey: "listed"}})
	if err != nil {
		return "", err
	}
	var got *Entry
	err = p.s.ListMeta(ctx, p.dir+"meta/", "", func(e Entry) error {
		if e.Key == p.dir+"meta/a" {
			got = &e
		}
		return nil
	})
	switch {
	case err != nil:
		return "", err
	case got == nil:
		return "a listing right after a PUT did not show it", nil
	case got.Meta == nil:
		return "listings carry no metadata: a HEAD per listed object", nil
	case got.ETag != v.ETag:
		return fmt.Sprintf("a listing with metadata showed ETag %q, the object has %q", got.ETag, v.ETag), nil
	}
	st, err := p.s.Stat(ctx, p.dir+"meta/a")
	if err != nil {
		return "", err
	}
	if got.Meta[probeMetaKey] != "listed" || !maps.Equal(got.Meta, st.Meta) {
		return fmt.Sprintf("a listing's metadata %v is not the object's %v", got.Meta, st.Meta), nil
	}
	return "", nil
}

// cleanup removes every scratch key and aborts scratch uploads.
func (p *prober) cleanup(ctx context.Context) {
	var keys []string
	_ = p.s.List(ctx, p.dir, "", func(e Entry) error { keys = append(keys, e.Key); return nil })
	for _, k := range keys {
		_ = p.s.Delete(ctx, k, Condition{})
	}
	var ups []Upload
	_ = p.s.ListUploads(ctx, p.dir, func(u Upload) error { ups = append(ups, u); return nil })
	for _, u := range ups {
		_ = p.s.AbortUpload(ctx, u.Key, u.UploadID)
	}
}
