package lease

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
)

// FormatVersion is the format of the lease objects this package writes. A
// lease object in a newer format makes Acquire fail with ErrFormat rather
// than overwrite what it does not understand.
const FormatVersion = 1

// LeasesDir is the directory of lease objects under the protocol directory:
// the lease N of domain D is D + ".fencefs/leases/" + N.
const LeasesDir = "leases/"

// maxRecordSize bounds what is read of a lease object.
const maxRecordSize = 64 << 10

// record is the body of a lease object; see the package documentation.
type record struct {
	Format     int       `json:"format"`
	Name       string    `json:"name"`
	Holder     string    `json:"holder"`
	ID         string    `json:"id"`
	Token      uint64    `json:"token"`
	PrevToken  uint64    `json:"prev_token"`
	TTLMillis  int64     `json:"ttl_ms"`
	Seq        uint64    `json:"renewed_seq"`
	RenewedAt  time.Time `json:"renewed_at"`
	AcquiredAt time.Time `json:"acquired_at"`
	Released   bool      `json:"released"`
}

// maxToken is the highest token this record knows to have been issued
// through the lease: its own, or one carried over from earlier holders.
func (r record) maxToken() uint64 { return max(r.Token, r.PrevToken) }

func (r record) ttl() time.Duration { return time.Duration(r.TTLMillis) * time.Millisecond }

func (r record) encode() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic("lease: encoding a record: " + err.Error()) // plain fields only
	}
	return append(b, '\n')
}

// view is what a read of the lease object found.
type view struct {
	exists bool
	etag   string
	// rec is the decoded record; nil when the object exists but is not a
	// lease record of a known format (garbage: it expires like any lease).
	rec *record
}

// Key returns the object key of the lease name in the fence domain (domain
// is "" or a prefix ending in "/").
func Key(domain, name string) string {
	return domain + fencing.ProtocolDir + "/" + LeasesDir + name
}

// ValidName checks a lease name: 1 to 128 characters of A-Z, a-z, 0-9, '.',
// '_' and '-', not "." or "..". Errors wrap ErrBadName.
func ValidName(name string) error {
	if name == "" || len(name) > 128 || name == "." || name == ".." {
		return fmt.Errorf("%w: %q (accepted: 1 to 128 characters of A-Z, a-z, 0-9, '.', '_', '-')", ErrBadName, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q contains %q (accepted: A-Z, a-z, 0-9, '.', '_', '-')", ErrBadName, name, string(c))
		}
	}
	return nil
}

// readView reads the lease object at key. A missing object is a view with
// exists == false and no error. An object in a newer format is ErrFormat.
func readView(ctx context.Context, store objstore.Store, key string) (view, error) {
	rc, info, err := store.Get(ctx, key, objstore.GetOptions{})
	if errors.Is(err, objstore.ErrNotFound) {
		return view{}, nil
	}
	if err != nil {
		return view{}, err
	}
	defer rc.Close()
	body, err := io.ReadAll(io.LimitReader(rc, maxRecordSize+1))
	if err != nil {
		return view{}, err
	}
	v := view{exists: true, etag: objstore.NormalizeETag(info.ETag)}
	var r record
	dec := json.NewDecoder(bytes.NewReader(body))
	if len(body) <= maxRecordSize && dec.Decode(&r) == nil && r.Format >= 1 && r.ID != "" {
		if r.Format > FormatVersion {
			return view{}, fmt.Errorf("%w: %s has format %d, this fencefs understands up to %d", ErrFormat, key, r.Format, FormatVersion)
		}
		v.rec = &r
	}
	return v, nil
}

// describe names the holder of v for messages.
func (v view) describe() string {
	switch {
	case !v.exists:
		return "nobody (no lease object)"
	case v.rec == nil:
		return "an unreadable lease object"
	case v.rec.Released:
		return fmt.Sprintf("nobody (released by %s)", v.rec.Holder)
	}
	var b strings.Builder
	b.WriteString(v.rec.Holder)
	if v.rec.Token != 0 {
		fmt.Fprintf(&b, " (token %d)", v.rec.Token)
	}
	return b.String()
}
