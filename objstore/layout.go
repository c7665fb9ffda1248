package objstore

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// S3 multipart limits, and fencefs's defaults for splitting uploads.
const (
	// MinPartSize is the smallest size of every part but the last.
	MinPartSize int64 = 5 << 20
	// MaxPartSize is the largest size of one part (and of a plain PUT).
	MaxPartSize int64 = 5 << 30
	// MaxParts is the largest number of parts of one upload.
	MaxParts = 10000
	// MaxObjectSize is the largest object S3 accepts.
	MaxObjectSize int64 = 5 << 40

	// DefaultMultipartThreshold is the size above which ShapeAuto uploads
	// as multipart: objects up to 16 MiB are one plain PUT.
	DefaultMultipartThreshold int64 = 16 << 20
	// DefaultPartSize is the part size of ShapeAuto multipart uploads and of
	// ShapeMultipart with Parts == 0.
	DefaultPartSize int64 = 8 << 20
)

// Sizing is how a store splits uploads into parts. Its fields are
// normalised by Normalize. Stores report theirs through SizingOf so that
// callers (the conformance suite, the fencing layer's ETag-ABA check) can
// predict the ETag a write will produce.
type Sizing struct {
	// MultipartThreshold: ShapeAuto uploads up to this size are plain
	// (unless PlainLimit is lower). It is also where a file written
	// sequentially starts to stream its parts (fusefs).
	MultipartThreshold int64
	// PartSize: the part size of ShapeAuto multipart uploads and of
	// ShapeMultipart with Parts == 0.
	PartSize int64
	// PlainLimit, when positive, is the largest plain PUT the store's
	// users should send: the server holds a key's lock while a PUT's body
	// arrives (the probe's CheckLockFreeBody failed), and a body above
	// PlainLimit may not leave the client in one write, so a writer
	// stopped mid-body would stall the key. ShapeAuto uploads above it are
	// multipart (their parts hold no lock on the key, and the Complete's
	// body is small), and FitsPlain tells callers choosing a shape
	// themselves. 0: no limit but MaxPartSize.
	PlainLimit int64
}

// Normalize fills zero fields with the defaults, raises PartSize to
// MinPartSize and turns a negative PlainLimit into 0 (none).
func (z Sizing) Normalize() Sizing {
	if z.MultipartThreshold <= 0 {
		z.MultipartThreshold = DefaultMultipartThreshold
	}
	if z.PlainLimit < 0 {
		z.PlainLimit = 0
	}
	if z.PartSize <= 0 {
		z.PartSize = DefaultPartSize
	}
	if z.PartSize < MinPartSize {
		z.PartSize = MinPartSize
	}
	if z.PartSize > MaxPartSize {
		z.PartSize = MaxPartSize
	}
	return z
}

// FitsPlain reports whether an upload of size bytes may be a plain PUT on
// the store: within MaxPartSize, and within PlainLimit when there is one.
func (z Sizing) FitsPlain(size int64) bool {
	return size <= MaxPartSize && (z.PlainLimit <= 0 || size <= z.PlainLimit)
}

// plainMax is the largest ShapeAuto upload that is plain.
func (z Sizing) plainMax() int64 {
	if z.PlainLimit > 0 && z.PlainLimit < z.MultipartThreshold {
		return z.PlainLimit
	}
	return z.MultipartThreshold
}

// Sizer is implemented by stores that can tell their Sizing.
type Sizer interface {
	Sizing() Sizing
}

// SizingOf returns s's Sizing if it implements Sizer, else the defaults.
func SizingOf(s Store) Sizing {
	if z, ok := s.(Sizer); ok {
		return z.Sizing().Normalize()
	}
	return Sizing{}.Normalize()
}

// Layout returns the part sizes of an upload of size bytes with the given
// shape, or nil for a plain (single PUT) upload. It is the one rule every
// Store follows for Put and for Copy, so the resulting ETag is predictable
// with ETagOf:
//
//   - ShapePlain: nil (plain), for size <= MaxPartSize; else ErrInvalid.
//   - ShapeAuto: plain when size <= MultipartThreshold (and <= PlainLimit,
//     when set), else as ShapeMultipart with parts == 0.
//   - ShapeMultipart, parts == 0: parts of PartSize bytes (the last one
//     shorter), raised so that there are at most MaxParts; at least one
//     part (a zero-byte object is one empty part).
//   - ShapeMultipart, parts == N > 0: a part size p = max(ceil(size/N),
//     MinPartSize), giving ceil(size/p) parts (at least one), the last one
//     shorter. The part count is therefore min(N, ceil(size/MinPartSize)):
//     an object of up to 5 MiB always becomes ONE part ("-1" ETag), 5 MiB+1
//     to 10 MiB at most two, and so on. N above MaxParts is ErrInvalid.
//
// Sizes above MaxObjectSize, and layouts needing parts above MaxPartSize,
// are ErrInvalid.
func (z Sizing) Layout(size int64, shape Shape, parts int) ([]int64, error) {
	z = z.Normalize()
	if size < 0 || size > MaxObjectSize {
		return nil, fmt.Errorf("%w: object size %d out of range", ErrInvalid, size)
	}
	var p int64
	switch shape {
	case ShapePlain:
		if size > MaxPartSize {
			return nil, fmt.Errorf("%w: a plain PUT is limited to 5 GiB (size %d)", ErrInvalid, size)
		}
		return nil, nil
	case ShapeAuto:
		if size <= z.plainMax() {
			return nil, nil
		}
		p = z.PartSize
	case ShapeMultipart:
		switch {
		case parts < 0 || parts > MaxParts:
			return nil, fmt.Errorf("%w: %d parts (1..%d)", ErrInvalid, parts, MaxParts)
		case parts == 0:
			p = z.PartSize
		default:
			p = (size + int64(parts) - 1) / int64(parts)
			if p < MinPartSize {
				p = MinPartSize
			}
		}
	default:
		return nil, fmt.Errorf("%w: unknown shape %d", ErrInvalid, shape)
	}
	if min := (size + MaxParts - 1) / MaxParts; p < min {
		p = min
	}
	if p > MaxPartSize {
		return nil, fmt.Errorf("%w: %d bytes need parts above 5 GiB", ErrInvalid, size)
	}
	n := (size + p - 1) / p
	if n == 0 {
		n = 1
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = p
	}
	out[n-1] = size - (n-1)*p
	return out, nil
}

// ETagOf computes the ETag S3 gives to body uploaded with the part sizes
// layout (nil: plain, the hex MD5 of the body; else the hex MD5 of the
// concatenated binary part MD5s, then "-" and the part count). The sizes in
// layout must add up to the body's length.
func ETagOf(body io.ReaderAt, size int64, layout []int64) (string, error) {
	if layout == nil {
		h := md5.New()
		if _, err := io.Copy(h, io.NewSectionReader(body, 0, size)); err != nil {
			return "", err
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	var sums []byte
	var off int64
	for _, n := range layout {
		h := md5.New()
		if _, err := io.Copy(h, io.NewSectionReader(body, off, n)); err != nil {
			return "", err
		}
		sums = h.Sum(sums)
		off += n
	}
	if off != size {
		return "", fmt.Errorf("%w: layout covers %d bytes, body has %d", ErrInvalid, off, size)
	}
	all := md5.Sum(sums)
	return hex.EncodeToString(all[:]) + "-" + strconv.Itoa(len(layout)), nil
}

// MultipartETag combines the (unquoted hex) ETags of the parts of a
// multipart upload into the upload's ETag.
func MultipartETag(partETags []string) (string, error) {
	var sums []byte
	for _, e := range partETags {
		b, err := hex.DecodeString(NormalizeETag(e))
		if err != nil || len(b) != md5.Size {
			return "", fmt.Errorf("%w: part ETag %q is not an MD5", ErrInvalid, e)
		}
		sums = append(sums, b...)
	}
	all := md5.Sum(sums)
	return hex.EncodeToString(all[:]) + "-" + strconv.Itoa(len(partETags)), nil
}

// MaxMetaSize is the largest total size of user metadata (keys plus values)
// S3 accepts.
const MaxMetaSize = 2048

// ValidateMeta checks that meta round-trips through S3 headers unchanged:
// keys are non-empty and made of lower-case letters, digits, '-' and '_';
// values are printable ASCII without leading or trailing blanks; the total
// is at most MaxMetaSize bytes. Callers must encode anything else (s3fs
// stores xattrs URL-encoded). Errors wrap ErrInvalid.
func ValidateMeta(meta map[string]string) error {
	total := 0
	for k, v := range meta {
		if k == "" {
			return fmt.Errorf("%w: empty metadata key", ErrInvalid)
		}
		for i := 0; i < len(k); i++ {
			c := k[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("%w: metadata key %q: only a-z, 0-9, '-' and '_' round-trip", ErrInvalid, k)
			}
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x20 || c > 0x7e {
				return fmt.Errorf("%w: metadata %q: value must be printable ASCII", ErrInvalid, k)
			}
		}
		if len(v) > 0 && (v[0] == ' ' || v[len(v)-1] == ' ') {
			return fmt.Errorf("%w: metadata %q: value must not start or end with a blank", ErrInvalid, k)
		}
		total += len(k) + len(v)
	}
	if total > MaxMetaSize {
		return fmt.Errorf("%w: metadata is %d bytes, at most %d", ErrInvalid, total, MaxMetaSize)
	}
	return nil
}

// ValidateWrite checks a write of key with opts before anything is sent:
// the key, the condition, the metadata and the tags.
func ValidateWrite(key string, opts PutOptions) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := ValidateCond(opts.Cond); err != nil {
		return err
	}
	if err := ValidateMeta(opts.Meta); err != nil {
		return err
	}
	return ValidateTags(opts.Tags)
}

// ValidateTags checks that tags are S3 object tags: at most 10, keys of 1 to
// 128 and values of at most 256 characters, of letters, digits, spaces and
// + - = . _ : / @. Errors wrap ErrInvalid.
func ValidateTags(tags map[string]string) error {
	if len(tags) > 10 {
		return fmt.Errorf("%w: %d object tags, at most 10", ErrInvalid, len(tags))
	}
	ok := func(s string) bool {
		for _, c := range s {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(" +-=._:/@", c)) {
				return false
			}
		}
		return true
	}
	for k, v := range tags {
		if k == "" || len(k) > 128 || len(v) > 256 || !ok(k) || !ok(v) {
			return fmt.Errorf("%w: object tag %q=%q", ErrInvalid, k, v)
		}
	}
	return nil
}

// ValidateKey checks that key is a usable object key: non-empty, at most
// 1024 bytes, no NUL. Errors wrap ErrInvalid.
func ValidateKey(key string) error {
	if key == "" || len(key) > 1024 {
		return fmt.Errorf("%w: object key length %d (1..1024)", ErrInvalid, len(key))
	}
	for i := 0; i < len(key); i++ {
		if key[i] == 0 {
			return fmt.Errorf("%w: object key contains NUL", ErrInvalid)
		}
	}
	return nil
}

// ValidateCond checks that at most one field of c is set.
func ValidateCond(c Condition) error {
	if c.IfMatch != "" && c.IfNoneMatch {
		return fmt.Errorf("%w: If-Match and If-None-Match together", ErrInvalid)
	}
	return nil
}
