package fusefs

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
)

// User metadata keys (without "x-amz-meta-"), as s3fs writes them. rclone
// writes the same "mtime" key (as float seconds).
const (
	metaMode  = "mode"
	metaUID   = "uid"
	metaGID   = "gid"
	metaMtime = "mtime"
	metaCtime = "ctime"
	metaAtime = "atime"
	metaXattr = "xattr"
	metaRdev  = "rdev" // device number of a device node (special.go)
)

// metaReserve is the room left in the 2 KiB of user metadata for the stamp
// keys the Guard adds (fencefs-epoch, -holder, -wid) and its ETag-ABA
// records.
const metaReserve = 512

// Kinds of inode fencefs represents, besides the special files (FIFOs,
// sockets, devices: special.go), whose kind is their S_IF* type.
const (
	kindFile    = syscall.S_IFREG
	kindDir     = syscall.S_IFDIR
	kindSymlink = syscall.S_IFLNK
)

// posixAttr is the POSIX view of one object: what the s3fs keys say, with
// the mount's defaults where they are missing.
type posixAttr struct {
	Mode  uint32 // full st_mode: type bits | permission bits
	UID   uint32
	GID   uint32
	Mtime time.Time
	Ctime time.Time
	Atime time.Time
	Rdev  uint32 // device number of a device node, else 0
	// Xattrs holds the user extended attributes (full names such as
	// "user.comment"). nil when there are none.
	Xattrs map[string][]byte
}

// attrDefaults are the values used for objects without POSIX metadata.
type attrDefaults struct {
	UID, GID uint32
	FileMode uint32 // permission bits only
	DirMode  uint32
}

// kindOf tells which kind of inode an object is, from its metadata. A
// marker key (ending in "/") is always a directory; otherwise the s3fs mode
// decides (S_IFDIR without the slash is an old s3fs directory object, shown
// as a directory too), and plain objects are files.
func kindOf(key string, meta map[string]string) uint32 {
	if strings.HasSuffix(key, "/") {
		return kindDir
	}
	if m, ok := parseMode(meta[metaMode]); ok {
		switch m & syscall.S_IFMT {
		case syscall.S_IFLNK:
			return kindSymlink
		case syscall.S_IFDIR:
			return kindDir
		case syscall.S_IFIFO, syscall.S_IFSOCK, syscall.S_IFCHR, syscall.S_IFBLK:
			return m & syscall.S_IFMT
		}
	}
	return kindFile
}

// decodeAttr reads the POSIX attributes of an object. kind is the inode kind
// the caller decided on; lastModified is used for missing times.
func decodeAttr(kind uint32, meta map[string]string, lastModified time.Time, def attrDefaults) posixAttr {
	a := posixAttr{UID: def.UID, GID: def.GID}
	perm := def.FileMode
	if kind == kindDir {
		perm = def.DirMode
	}
	if kind == kindSymlink {
		perm = 0o777
	}
	if m, ok := parseMode(meta[metaMode]); ok {
		perm = m & 0o7777
	}
	a.Mode = kind | perm
	if v, ok := parseID(meta[metaUID]); ok {
		a.UID = v
	}
	if v, ok := parseID(meta[metaGID]); ok {
		a.GID = v
	}
	a.Mtime = lastModified
	if t, ok := parseTime(meta[metaMtime]); ok {
		a.Mtime = t
	}
	a.Ctime = a.Mtime
	if t, ok := parseTime(meta[metaCtime]); ok {
		a.Ctime = t
	}
	a.Atime = a.Mtime
	if t, ok := parseTime(meta[metaAtime]); ok {
		a.Atime = t
	}
	if v, ok := parseID(meta[metaRdev]); ok {
		a.Rdev = v
	}
	if v := meta[metaXattr]; v != "" {
		if x, err := decodeXattrs(v); err == nil && len(x) > 0 {
			a.Xattrs = x
		}
	}
	return a
}

// encodeAttr returns meta with the POSIX keys replaced by a's values (as
// s3fs writes them). Keys of base that fencefs does not own are kept, except
// the Guard's stamp keys (fencing.IsStampKey), which the Guard writes on
// every commit. base may be nil.
func encodeAttr(a posixAttr, base map[string]string) map[string]string {
	out := make(map[string]string, len(base)+7)
	for k, v := range base {
		if !fencing.IsStampKey(k) {
			out[k] = v
		}
	}
	out[metaMode] = strconv.FormatUint(uint64(a.Mode), 10)
	out[metaUID] = strconv.FormatUint(uint64(a.UID), 10)
	out[metaGID] = strconv.FormatUint(uint64(a.GID), 10)
	out[metaMtime] = formatTime(a.Mtime)
	out[metaCtime] = formatTime(a.Ctime)
	out[metaAtime] = formatTime(a.Atime)
	if a.Rdev != 0 {
		out[metaRdev] = strconv.FormatUint(uint64(a.Rdev), 10)
	} else {
		delete(out, metaRdev)
	}
	if len(a.Xattrs) > 0 {
		out[metaXattr] = encodeXattrs(a.Xattrs)
	} else {
		delete(out, metaXattr)
	}
	return out
}

// checkMetaSize reports errTooBig when meta would not fit in S3's user
// metadata once the Guard has added its keys, and wraps objstore's
// validation error for anything that would not round-trip.
func checkMetaSize(meta map[string]string) error {
	total := 0
	for k, v := range meta {
		total += len(k) + len(v)
	}
	if total > objstore.MaxMetaSize-metaReserve {
		return fmt.Errorf("%w: metadata would be %d bytes (at most %d)", errTooBig, total, objstore.MaxMetaSize-metaReserve)
	}
	return objstore.ValidateMeta(meta)
}

func (a posixAttr) clone() posixAttr {
	b := a
	if a.Xattrs != nil {
		b.Xattrs = maps.Clone(a.Xattrs)
	}
	return b
}

// parseMode parses s3fs's decimal st_mode. Values that do not fit a mode
// are rejected.
func parseMode(s string) (uint32, bool) {
	if s == "" {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	if err != nil || v > 0o177777 {
		return 0, false
	}
	return uint32(v), true
}

func parseID(s string) (uint32, bool) {
	if s == "" {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	if err != nil {
		return 0, false
	}
	return uint32(v), true
}

// formatTime writes a time as s3fs does: decimal Unix seconds, with a
// nine-digit fraction when the nanoseconds are not zero. rclone and older
// s3fs versions (which stop at the '.') read it too.
func formatTime(t time.Time) string {
	sec, nsec := t.Unix(), t.Nanosecond()
	if nsec == 0 {
		return strconv.FormatInt(sec, 10)
	}
	return fmt.Sprintf("%d.%09d", sec, nsec)
}

// parseTime reads s3fs's decimal seconds ("1700000000", "1700000000.5"),
// rclone's float seconds (also with an exponent), and RFC 3339 timestamps.
func parseTime(s string) (time.Time, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, false
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, true
	}
	// Exact decimal form first, so that nanoseconds are not rounded.
	intPart, frac, hasFrac := strings.Cut(s, ".")
	if sec, err := strconv.ParseInt(intPart, 10, 64); err == nil {
		if !hasFrac {
			return time.Unix(sec, 0), true
		}
		if len(frac) > 0 && len(frac) <= 9 && isDigits(frac) {
			ns, _ := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
			if sec < 0 {
				ns = -ns
			}
			return time.Unix(sec, ns), true
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > 1e15 {
		return time.Time{}, false
	}
	sec := math.Floor(f)
	return time.Unix(int64(sec), int64((f-sec)*1e9)), true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// encodeXattrs writes xattrs in s3fs's format: a JSON object mapping each
// name to the base64 of its value, URL-encoded so that it is a valid header
// value. Names are sorted, so equal maps encode equally.
func encodeXattrs(x map[string][]byte) string {
	names := make([]string, 0, len(x))
	for k := range x {
		names = append(names, k)
	}
	sort.Strings(names)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		kj, _ := jsonString(k)
		b.WriteString(kj)
		b.WriteByte(':')
		b.WriteByte('"')
		b.WriteString(base64.StdEncoding.EncodeToString(x[k]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return urlEncode(b.String())
}

func jsonString(s string) (string, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// decodeXattrs reads s3fs's xattr value. It accepts the URL-encoded and the
// raw form, parses proper JSON, and falls back to s3fs's own tolerant
// splitting (on ',' and the first ':') for values s3fs wrote without JSON
// escaping.
func decodeXattrs(v string) (map[string][]byte, error) {
	raw, err := url.PathUnescape(v)
	if err != nil {
		raw = v
	}
	raw = strings.TrimSpace(raw)
	var m map[string]string
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		m, err = splitXattrs(raw)
		if err != nil {
			return nil, err
		}
	}
	out := make(map[string][]byte, len(m))
	for k, b64 := range m {
		val, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			val, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(b64, "="))
			if err != nil {
				return nil, fmt.Errorf("xattr %q: bad base64 value: %v", k, err)
			}
		}
		out[k] = val
	}
	return out, nil
}

func splitXattrs(raw string) (map[string]string, error) {
	if !strings.HasPrefix(raw, "{") || !strings.HasSuffix(raw, "}") {
		return nil, fmt.Errorf("xattr metadata %q is not an object", raw)
	}
	body := raw[1 : len(raw)-1]
	m := map[string]string{}
	if strings.TrimSpace(body) == "" {
		return m, nil
	}
	for _, pair := range strings.Split(body, ",") {
		k, v, ok := strings.Cut(pair, ":")
		if !ok {
			return nil, fmt.Errorf("xattr pair %q has no ':'", pair)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if len(k) < 2 || k[0] != '"' || k[len(k)-1] != '"' || len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
			return nil, fmt.Errorf("xattr pair %q is not quoted", pair)
		}
		m[k[1:len(k)-1]] = v[1 : len(v)-1]
	}
	return m, nil
}

// urlEncode percent-encodes every byte outside RFC 3986's unreserved set.
func urlEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// contentMeta is the metadata kept when the content is rewritten: everything
// but checksums of the old content that other tools store.
func contentMeta(m map[string]string) map[string]string {
	if _, ok := m["md5chksum"]; !ok {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if k != "md5chksum" {
			out[k] = v
		}
	}
	return out
}
