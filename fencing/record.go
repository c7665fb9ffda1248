package fencing

// The ETag-ABA record (MetaSwept) and the choice of upload shape that keeps
// a commit's resulting ETag away from every base an old writer may hold.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// absentBase stands for "the key was absent" in a record (an old writer may
// hold a create, If-None-Match:*).
const absentBase = "_"

// maxRecordEntries caps the record kept in a key's metadata so that it
// fits in S3 user metadata next to the caller's own keys (about 45 bytes
// per entry); a sweep that must record more spills them (spill.go).
const maxRecordEntries = 24

// recordEntry says: until At+validity, an old writer may commit
// conditioned on ETag (absentBase: on absence).
type recordEntry struct {
	ETag string
	At   time.Time
}

// record is a set of entries, at most one per ETag (the newest).
type record []recordEntry

// parseRecord parses a MetaSwept value, skipping malformed entries (a
// record is written only by this package; garbage cannot be trusted either
// way, and dropping it only narrows protection, never safety of new data).
func parseRecord(s string) record {
	var r record
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		i := strings.LastIndexByte(part, '@')
		if i <= 0 {
			continue
		}
		sec, err := strconv.ParseInt(part[i+1:], 10, 64)
		if err != nil {
			continue
		}
		r = r.add(part[:i], time.Unix(sec, 0))
	}
	return r
}

// String formats r as a MetaSwept value, oldest first.
func (r record) String() string {
	parts := make([]string, len(r))
	for i, e := range r {
		parts[i] = e.ETag + "@" + strconv.FormatInt(e.At.Unix(), 10)
	}
	return strings.Join(parts, ",")
}

// add returns r with etag recorded at t (keeping the later time if etag is
// already there), sorted by time.
func (r record) add(etag string, at time.Time) record {
	if etag == "" {
		etag = absentBase
	}
	etag = objstore.NormalizeETag(etag)
	out := make(record, 0, len(r)+1)
	found := false
	for _, e := range r {
		if e.ETag == etag {
			found = true
			if at.After(e.At) {
				e.At = at
			}
		}
		out = append(out, e)
	}
	if !found {
		out = append(out, recordEntry{ETag: etag, At: at.Truncate(time.Second)})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// young returns the entries still inside the validity window at now (a
// spill marker included while the spill holds a young entry).
func (r record) young(now time.Time, validity time.Duration) record {
	var out record
	for _, e := range r {
		if now.Before(e.At.Add(validity)) {
			out = append(out, e)
		}
	}
	return out
}

// sweptWIDPrefix marks a record entry that names no base but the write id
// of the content a takeover sweep rewrote (sweptMeta). Commits carry it
// with the record while it is young, so a writer whose commit landed
// before the sweep and whose answer was lost finds it even after newer
// commits replaced the rewrite (resolve). No ETag has this form.
const sweptWIDPrefix = "wid:"

// hasSweptWID reports whether r records a sweep of content of write id wid.
func (r record) hasSweptWID(wid string) bool {
	return wid != "" && r.has(sweptWIDPrefix+wid)
}

// has reports whether etag ("" = absent) is recorded.
func (r record) has(etag string) bool {
	if etag == "" {
		etag = absentBase
	}
	etag = objstore.NormalizeETag(etag)
	for _, e := range r {
		if e.ETag == etag {
			return true
		}
	}
	return false
}

// expiryOf returns when the entry for etag stops mattering.
func (r record) expiryOf(etag string, validity time.Duration) time.Time {
	for _, e := range r {
		if e.ETag == etag {
			return e.At.Add(validity)
		}
	}
	return time.Time{}
}

// avoidSet is the set of ETags a commit's result must not have.
type avoidSet map[string]bool

func (a avoidSet) addAll(etags ...string) {
	for _, e := range etags {
		if e != "" && e != absentBase && e != spillMarker && !strings.HasPrefix(e, sweptWIDPrefix) {
			a[objstore.NormalizeETag(e)] = true
		}
	}
}

// hasSuffix reports whether some ETag in a is a multipart ETag of n parts.
func (a avoidSet) hasSuffix(n int) bool {
	for e := range a {
		if p, ok := objstore.IsMultipartETag(e); ok && p == n {
			return true
		}
	}
	return false
}

// hasPlain reports whether some ETag in a is a plain (non-multipart) ETag.
func (a avoidSet) hasPlain() bool {
	for e := range a {
		if _, ok := objstore.IsMultipartETag(e); !ok {
			return true
		}
	}
	return false
}

// shapeCandidate is one upload shape and the number of parts Layout gives.
type shapeCandidate struct {
	Shape objstore.Shape
	Parts int // requested parts (ShapeMultipart)
	Count int // actual part count; 0 = plain
}

// shapeCandidates lists the upload shapes worth trying for an object of size
// bytes (distinct part counts only, at most 9). With first == ShapeAuto
// (a writer) the shape the object would get anyway comes first, then
// plain, then multipart with 1, 2, 3… parts. With first == ShapeMultipart
// (a sweep, which copies server-side when it can) the multipart shapes come
// first and plain last. Where the store's Sizing says a plain PUT of size
// bytes could stall the key (objstore.Sizing.FitsPlain is false: MinIO
// holds the key's lock while the body arrives) plain comes last for a
// writer too: it is the last resort of an object of up to 5 MiB, whose
// only other shape is one part, when an older writer holds that ETag.
func shapeCandidates(z objstore.Sizing, size int64, first objstore.Shape) []shapeCandidate {
	var out []shapeCandidate
	seen := map[int]bool{}
	addc := func(shape objstore.Shape, parts int) {
		l, err := z.Layout(size, shape, parts)
		if err != nil {
			return
		}
		c := shapeCandidate{Shape: shape, Parts: parts, Count: len(l)}
		if seen[c.Count] {
			return
		}
		seen[c.Count] = true
		out = append(out, c)
	}
	multiparts := func() {
		for n := 1; n <= 64 && len(out) < 9; n++ {
			addc(objstore.ShapeMultipart, n)
		}
	}
	if first == objstore.ShapeMultipart {
		multiparts()
		addc(objstore.ShapePlain, 0)
		return out
	}
	if l, err := z.Layout(size, objstore.ShapeAuto, 0); err == nil {
		if l == nil {
			addc(objstore.ShapePlain, 0)
		} else {
			addc(objstore.ShapeMultipart, 0)
		}
	}
	if z.FitsPlain(size) {
		addc(objstore.ShapePlain, 0)
	}
	multiparts()
	addc(objstore.ShapePlain, 0)
	return out
}

// etagFunc predicts the ETag of the object's content uploaded with a
// candidate's shape; ok=false means it cannot be known without reading the
// content.
type etagFunc func(c shapeCandidate) (etag string, ok bool, err error)

// chooseShape returns the first candidate whose resulting ETag is provably
// not in avoid. A multipart candidate of N parts is provably fresh without
// reading the content when no ETag in avoid has N parts; otherwise predict
// tells. needContent is set when a candidate might be fresh but predict
// could not tell without the content (the caller reads it and asks again
// with a predictor that can).
func chooseShape(cands []shapeCandidate, avoid avoidSet, predict etagFunc) (c shapeCandidate, found, needContent bool, err error) {
	for _, c := range cands {
		if c.Count > 0 && !avoid.hasSuffix(c.Count) {
			return c, true, false, nil
		}
		if c.Count == 0 && !avoid.hasPlain() {
			return c, true, false, nil
		}
		etag, ok, err := predict(c)
		if err != nil {
			return shapeCandidate{}, false, false, err
		}
		if !ok {
			needContent = true
			continue
		}
		if !avoid[etag] {
			return c, true, false, nil
		}
	}
	return shapeCandidate{}, false, needContent, nil
}

// etagFromPlain predicts ETags knowing only the plain ETag (hex MD5) of the
// content: the plain shape is that ETag, a one-part multipart is the MD5 of
// its binary form with "-1"; more parts need the content.
func etagFromPlain(plain string) etagFunc {
	return func(c shapeCandidate) (string, bool, error) {
		switch {
		case plain == "":
			return "", false, nil
		case c.Count == 0:
			return plain, true, nil
		case c.Count == 1:
			e, err := objstore.MultipartETag([]string{plain})
			return e, err == nil, nil
		}
		return "", false, nil
	}
}

// etagFromContent predicts ETags from the content itself.
func etagFromContent(z objstore.Sizing, body interface {
	ReadAt([]byte, int64) (int, error)
}, size int64) etagFunc {
	cache := map[int]string{}
	return func(c shapeCandidate) (string, bool, error) {
		if e, ok := cache[c.Count]; ok {
			return e, true, nil
		}
		l, err := z.Layout(size, c.Shape, c.Parts)
		if err != nil {
			return "", false, err
		}
		e, err := objstore.ETagOf(body, size, l)
		if err != nil {
			return "", false, fmt.Errorf("hashing content: %w", err)
		}
		cache[c.Count] = e
		return e, true, nil
	}
}
