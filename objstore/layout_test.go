package objstore_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencefs/fencefs/objstore"
)

const MiB = 1 << 20

func TestLayoutFollowsTheDocumentedRule(t *testing.T) {
	z := objstore.Sizing{MultipartThreshold: 16 * MiB, PartSize: 8 * MiB}
	locked := objstore.Sizing{MultipartThreshold: 16 * MiB, PartSize: 8 * MiB, PlainLimit: 56 << 10}
	for _, tc := range []struct {
		name  string
		z     *objstore.Sizing // nil: z
		size  int64
		shape objstore.Shape
		parts int
		want  []int64 // nil: plain
		err   bool
	}{
		{"plain is plain", nil, 100, objstore.ShapePlain, 0, nil, false},
		{"auto at a plain limit is plain", &locked, 56 << 10, objstore.ShapeAuto, 0, nil, false},
		{"auto above a plain limit is one part", &locked, 56<<10 + 1, objstore.ShapeAuto, 0, []int64{56<<10 + 1}, false},
		{"auto above a plain limit uses the part size", &locked, 9 * MiB, objstore.ShapeAuto, 0, []int64{8 * MiB, MiB}, false},
		{"a plain limit leaves explicit plain plain", &locked, 9 * MiB, objstore.ShapePlain, 0, nil, false},
		{"a plain limit above the threshold changes nothing", &objstore.Sizing{MultipartThreshold: 16 * MiB, PartSize: 8 * MiB, PlainLimit: 32 * MiB}, 16*MiB + 1, objstore.ShapeAuto, 0, []int64{8 * MiB, 8 * MiB, 1}, false},
		{"plain above 5 GiB is invalid", nil, 5<<30 + 1, objstore.ShapePlain, 0, nil, true},
		{"auto at the threshold is plain", nil, 16 * MiB, objstore.ShapeAuto, 0, nil, false},
		{"auto above the threshold uses the part size", nil, 16*MiB + 1, objstore.ShapeAuto, 0, []int64{8 * MiB, 8 * MiB, 1}, false},
		{"multipart of nothing is one empty part", nil, 0, objstore.ShapeMultipart, 1, []int64{0}, false},
		{"multipart zero parts of nothing is one empty part", nil, 0, objstore.ShapeMultipart, 0, []int64{0}, false},
		{"one part", nil, 7 * MiB, objstore.ShapeMultipart, 1, []int64{7 * MiB}, false},
		{"small objects get one part whatever is asked", nil, 5 * MiB, objstore.ShapeMultipart, 4, []int64{5 * MiB}, false},
		{"just above 5 MiB can be two parts", nil, 5*MiB + 1, objstore.ShapeMultipart, 2, []int64{5 * MiB, 1}, false},
		{"even split", nil, 20 * MiB, objstore.ShapeMultipart, 2, []int64{10 * MiB, 10 * MiB}, false},
		{"uneven split rounds the part size up", nil, 20*MiB + 1, objstore.ShapeMultipart, 2, []int64{10*MiB + 1, 10 * MiB}, false},
		{"part count capped by the 5 MiB minimum", nil, 12 * MiB, objstore.ShapeMultipart, 5, []int64{5 * MiB, 5 * MiB, 2 * MiB}, false},
		{"zero parts uses the part size", nil, 20 * MiB, objstore.ShapeMultipart, 0, []int64{8 * MiB, 8 * MiB, 4 * MiB}, false},
		{"too many parts", nil, 1, objstore.ShapeMultipart, objstore.MaxParts + 1, nil, true},
		{"negative parts", nil, 1, objstore.ShapeMultipart, -1, nil, true},
		{"one part above 5 GiB is invalid", nil, 5<<30 + 1, objstore.ShapeMultipart, 1, nil, true},
		{"negative size", nil, -1, objstore.ShapePlain, 0, nil, true},
		{"unknown shape", nil, 1, objstore.Shape(42), 0, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			z := z
			if tc.z != nil {
				z = *tc.z
			}
			got, err := z.Layout(tc.size, tc.shape, tc.parts)
			if tc.err {
				if !errors.Is(err, objstore.ErrInvalid) {
					t.Fatalf("got %v, %v; want ErrInvalid", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || (got == nil) != (tc.want == nil) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLayoutStaysWithinTheLimits(t *testing.T) {
	z := objstore.Sizing{}.Normalize()
	for _, size := range []int64{0, 1, 5*MiB - 1, 5 * MiB, 5*MiB + 1, 100 * MiB, 80 << 30, objstore.MaxObjectSize} {
		for _, parts := range []int{0, 1, 2, 3, 7, 10000} {
			l, err := z.Layout(size, objstore.ShapeMultipart, parts)
			if err != nil {
				if parts != 0 && size > int64(parts)*objstore.MaxPartSize {
					continue // legitimately impossible
				}
				t.Fatalf("size %d parts %d: %v", size, parts, err)
			}
			var sum int64
			for i, n := range l {
				sum += n
				if n > objstore.MaxPartSize || i < len(l)-1 && n < objstore.MinPartSize {
					t.Fatalf("size %d parts %d: part %d is %d bytes", size, parts, i, n)
				}
			}
			if sum != size || len(l) > objstore.MaxParts || parts > 0 && len(l) > parts {
				t.Fatalf("size %d parts %d: %d parts adding to %d", size, parts, len(l), sum)
			}
		}
	}
}

func TestETagOf(t *testing.T) {
	data := []byte("hello world")
	plain, err := objstore.ETagOf(bytes.NewReader(data), int64(len(data)), nil)
	if err != nil || plain != "5eb63bbbe01eeed093cb22bb8f5acdc3" {
		t.Fatalf("plain %s %v", plain, err)
	}
	one, err := objstore.ETagOf(bytes.NewReader(data), int64(len(data)), []int64{11})
	sum := md5.Sum(data)
	all := md5.Sum(sum[:])
	if err != nil || one != hex.EncodeToString(all[:])+"-1" {
		t.Fatalf("one part %s %v", one, err)
	}
	two, err := objstore.ETagOf(bytes.NewReader(data), int64(len(data)), []int64{5, 6})
	if err != nil {
		t.Fatal(err)
	}
	a, b := md5.Sum(data[:5]), md5.Sum(data[5:])
	combined, err := objstore.MultipartETag([]string{hex.EncodeToString(a[:]), `"` + hex.EncodeToString(b[:]) + `"`})
	if err != nil || two != combined || !strings.HasSuffix(two, "-2") {
		t.Fatalf("two parts %s, combined %s %v", two, combined, err)
	}
	if _, err := objstore.ETagOf(bytes.NewReader(data), int64(len(data)), []int64{5}); !errors.Is(err, objstore.ErrInvalid) {
		t.Fatalf("short layout: %v", err)
	}
	if _, err := objstore.MultipartETag([]string{"CRC64-xyz"}); !errors.Is(err, objstore.ErrInvalid) {
		t.Fatalf("non-MD5 part ETag: %v", err)
	}
}

func TestValidateMeta(t *testing.T) {
	for _, tc := range []struct {
		name string
		meta map[string]string
		ok   bool
	}{
		{"nil", nil, true},
		{"s3fs keys", map[string]string{"mode": "33188", "uid": "0", "mtime": "1700000000", "xattr": "%7B%7D"}, true},
		{"fencefs stamps", map[string]string{"fencefs-epoch": "7", "fencefs_wid": "a-b"}, true},
		{"empty value", map[string]string{"k": ""}, true},
		{"upper-case key", map[string]string{"Mode": "1"}, false},
		{"space in key", map[string]string{"a b": "1"}, false},
		{"empty key", map[string]string{"": "1"}, false},
		{"non-ASCII value", map[string]string{"k": "é"}, false},
		{"control character", map[string]string{"k": "a\nb"}, false},
		{"leading blank", map[string]string{"k": " a"}, false},
		{"trailing blank", map[string]string{"k": "a "}, false},
		{"too large", map[string]string{"k": strings.Repeat("x", objstore.MaxMetaSize)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := objstore.ValidateMeta(tc.meta)
			if tc.ok != (err == nil) || err != nil && !errors.Is(err, objstore.ErrInvalid) {
				t.Fatalf("got %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestETagHelpers(t *testing.T) {
	for _, tc := range []struct {
		in, norm string
		parts    int
		multi    bool
	}{
		{`"abc"`, "abc", 0, false},
		{`W/"abc-3"`, "abc-3", 3, true},
		{"abc-", "abc-", 0, false},
		{"abc-x1", "abc-x1", 0, false},
		{"d41d8cd98f00b204e9800998ecf8427e-10000", "d41d8cd98f00b204e9800998ecf8427e-10000", 10000, true},
	} {
		if got := objstore.NormalizeETag(tc.in); got != tc.norm {
			t.Errorf("NormalizeETag(%q) = %q", tc.in, got)
		}
		if n, ok := objstore.IsMultipartETag(tc.in); ok != tc.multi || n != tc.parts && ok {
			t.Errorf("IsMultipartETag(%q) = %d, %v", tc.in, n, ok)
		}
	}
}

func TestMaybeApplied(t *testing.T) {
	pre := fmt.Errorf("put: %w", objstore.ErrPrecondition)
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain precondition", pre, false},
		{"not found", objstore.ErrNotFound, false},
		{"precondition after a lost response", &objstore.UncertainError{Err: pre, Cause: objstore.ErrUnavailable, Attempts: 2}, true},
		{"unavailable", fmt.Errorf("x: %w", objstore.ErrUnavailable), true},
		{"cancelled", context.Canceled, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := objstore.MaybeApplied(tc.err); got != tc.want {
				t.Fatalf("MaybeApplied(%v) = %v", tc.err, got)
			}
		})
	}
	u := &objstore.UncertainError{Err: pre, Cause: objstore.ErrUnavailable, Attempts: 2}
	if !errors.Is(u, objstore.ErrPrecondition) || errors.Is(u, objstore.ErrUnavailable) {
		t.Fatal("an UncertainError wraps exactly the final error's sentinel")
	}
}

func TestFitsPlainKeepsLargeBodiesOffAPlainLimitedStore(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int64
		size  int64
		want  bool
	}{
		{"no limit: up to 5 GiB", 0, 5 << 30, true},
		{"no limit: not above 5 GiB", 0, 5<<30 + 1, false},
		{"at the limit", 56 << 10, 56 << 10, true},
		{"above the limit", 56 << 10, 56<<10 + 1, false},
		{"a negative limit is none", -1, 8 * MiB, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			z := objstore.Sizing{PlainLimit: tc.limit}.Normalize()
			if got := z.FitsPlain(tc.size); got != tc.want {
				t.Fatalf("FitsPlain(%d) with limit %d = %v, want %v", tc.size, tc.limit, got, tc.want)
			}
		})
	}
}
