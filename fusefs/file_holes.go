package fusefs

// holes is what a streamed upload released (punched out) of a staging
// file once uploaded: bytes in all, and [lo, hi), the smallest range
// holding them (hi 0: nothing was released, the staging file holds the
// whole content). The upload keeps the holes it punched (file_upload.go); the
// node keeps those of its staging file, which outlive the upload until
// the staging file is truncated to 0 or dropped (file_content_upload.go).
type holes struct {
	bytes, lo, hi int64
}

// add records that [off, off+n) was released.
func (h *holes) add(off, n int64) {
	h.bytes += n
	if h.hi == 0 || off < h.lo {
		h.lo = off
	}
	h.hi = max(h.hi, off+n)
}

// any reports whether anything was released.
func (h holes) any() bool { return h.hi > 0 }

// overlaps reports whether [off, end) reaches into the released range.
func (h holes) overlaps(off, end int64) bool { return h.hi != 0 && end > h.lo && off < h.hi }
