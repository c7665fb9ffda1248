package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fencefs/fencefs/fencing"
)

// Config is the whole configuration of one fencefs command, after merging
// defaults, the config file, the environment and the command line. It is a
// plain value: cmd/fencefs turns it into objstore/s3.Config, fencing.Config
// and fusefs.Options; no viper type leaves this package.
type Config struct {
	S3      S3
	Fence   Fence
	Mount   Mount
	Log     Log
	Metrics Metrics

	// File is the config file that was read ("" when none).
	File string
}

// S3 is the storage connection (keys s3.*).
type S3 struct {
	Endpoint        string // URL; "" means AWS S3 for Region
	Region          string
	Bucket          string
	Prefix          string // "" or ending in "/", never starting with "/"
	AccessKey       string
	SecretKey       Secret
	SessionToken    Secret
	Profile         string // carried to objstore/s3, see NamedProfile
	CredentialsFile string // read by objstore/s3 only, never by config
	// WebIdentityTokenFile, RoleARN, AssumeRole and STSEndpoint select
	// temporary credentials from STS (objstore/s3 documents the chain).
	WebIdentityTokenFile string // read by objstore/s3 only
	RoleARN              string
	AssumeRole           bool
	STSEndpoint          string
	CAFile               string
	PathStyle            bool
	// Timeout is the idle timeout of a request: it fails once no byte
	// has moved for this long (then it is retried within RetryDeadline).
	Timeout time.Duration
	// ConnectTimeout bounds connecting (TCP and TLS).
	ConnectTimeout time.Duration
	// RetryDeadline bounds the retries of one request, and of one fencing
	// mutation as a whole; also the bound of one fencing validation round.
	RetryDeadline time.Duration
	// Concurrency is the number of multipart parts in flight per upload.
	Concurrency int
	// PartSizeMiB is the multipart part size in MiB.
	PartSizeMiB int
	// CredentialsSource says where the static keys came from ("$VARIABLE"
	// or "in FILE"), or "" when none were set: the S3 layer then looks
	// them up (and says where: objstore/s3's CredentialsSource). For
	// messages, never the credentials themselves.
	CredentialsSource string
	// profileFrom and credentialsFileFrom are where s3.profile and
	// s3.credentials_file were set ("" when defaulted); see NamedProfile
	// and SettingError.
	profileFrom, credentialsFileFrom string
}

// NamedProfile returns s3.profile when it was set (flag, -o, variable or
// config file), else "": objstore/s3 then uses "default", and a missing
// default profile is anonymous access instead of an error.
func (c *Config) NamedProfile() string {
	if c.S3.profileFrom == "" {
		return ""
	}
	return c.S3.Profile
}

// StaticKeysTried names where only this package looked for static keys,
// for the refusal of a mount that found credentials nowhere: the FENCEFS_
// variable of s3.access_key and the config file (or that there was none).
// objstore/s3 names the AWS variables, which it looks at too.
func (c *Config) StaticKeysTried() string {
	s, _ := settingByKey("s3.access_key")
	var vars []string
	for _, e := range s.Env {
		if strings.HasPrefix(e, "FENCEFS_") {
			vars = append(vars, "$"+e)
		}
	}
	out := strings.Join(vars, ", ") + " (unset)"
	if c.File != "" {
		return out + ", s3.access_key in " + c.File + " (not set)"
	}
	return out + ", s3.access_key in a config file (none found)"
}

// SettingError is the configuration error (*Error) of key with msg, for a
// setting that another layer checks (objstore/s3 opens s3.credentials_file
// and looks up s3.profile), naming where the key was set like Load does.
func (c *Config) SettingError(key, msg string) error {
	from := map[string]string{"s3.profile": c.S3.profileFrom, "s3.credentials_file": c.S3.credentialsFileFrom}[key]
	if from != "" {
		key += " (" + from + ")"
	}
	return &Error{Key: key, Msg: msg}
}

// Fence is the fencing configuration (keys fence.*).
type Fence struct {
	Mode                  string // ModeStrict, ModeFast or ModeOff
	Domain                string // DomainBucket or DomainPrefix
	Token                 string // "", TokenAuto, or a decimal >= 1
	TokenFile             string
	Holder                string
	SignedRequestValidity time.Duration
	RefreshInterval       time.Duration // 0 = no periodic refresh
	ReapTombstones        string        // ReapAuto, ReapAlways or ReapOff
}

// Mount is the filesystem configuration (keys mount.*).
type Mount struct {
	Mountpoint string // absolute path (from the MOUNTPOINT argument)
	ReadOnly   bool
	UID, GID   uint32
	FileMode   os.FileMode
	DirMode    os.FileMode
	CacheDir   string
	// StreamStagingMiB bounds the staging of a streamed file
	// (fusefs.Options.StreamStaging); 0 = no bound.
	StreamStagingMiB int
	AttrTTL          time.Duration
	EntryTTL         time.Duration
	MetaTTL          time.Duration
	// LeaderCacheTTL is the metadata trust while leading (fusefs.Options).
	LeaderCacheTTL time.Duration
	// AttrWriteback is how long a chmod/chown/utimens may wait to be
	// stored (fusefs.Options).
	AttrWriteback time.Duration
	// SyncDeletes deletes before unlink returns instead of in the
	// background (fusefs.Options.DeleteConcurrency 0).
	SyncDeletes bool
	AllowOther  bool
	// Nonempty allows mounting over a directory that is not empty, or over
	// another mount (both are refused otherwise).
	Nonempty bool
	// DefaultPermissions has the kernel check permissions (always true
	// with AllowOther: other users must not bypass the stored modes).
	DefaultPermissions bool
	MaxDirRename       int
}

// Log is the logging configuration (keys log.*).
type Log struct {
	Level  string // debug, info, warn, error
	Format string // text, json
	File   string // "" = stderr
}

// Metrics is the metrics endpoint configuration (keys metrics.*).
type Metrics struct {
	Addr string // host:port, "" = no metrics server
}

// Accepted values.
const (
	ModeStrict = "strict"
	ModeFast   = "fast"
	ModeOff    = "off"

	DomainBucket = "bucket"
	DomainPrefix = "prefix"

	// fence.reap_tombstones
	ReapAuto   = "auto"
	ReapAlways = "always"
	// ReapOff is "off", as ModeOff.
	ReapOff = "off"

	TokenAuto = fencing.TokenAuto
)

// Secret is a credential. Its String, GoString and Format methods never
// reveal the value, so a Secret printed by accident (%v, %+v, %#v, slog)
// shows only whether it is set.
type Secret string

// String returns "[REDACTED]" when set and "" when empty.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[REDACTED]"
}

// GoString implements fmt.GoStringer with the same redaction.
func (s Secret) GoString() string { return strconv.Quote(s.String()) }

// Format implements fmt.Formatter so that every verb is redacted.
func (s Secret) Format(f fmt.State, verb rune) { _, _ = f.Write([]byte(s.String())) }

// MarshalText redacts, so JSON/YAML encodings of a Config never hold secrets.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Reveal returns the secret itself, for handing to the S3 client only.
func (s Secret) Reveal() string { return string(s) }

// Secrets returns the non-empty secret values of c, for redacting logs and
// error messages.
func (c *Config) Secrets() []string {
	var out []string
	for _, s := range []Secret{c.S3.SecretKey, c.S3.SessionToken} {
		if s != "" {
			out = append(out, string(s))
		}
	}
	return out
}

// DomainPrefix returns the key prefix of the fence domain: "" for the whole
// bucket, the mount prefix for DomainPrefix.
func (c *Config) DomainKeyPrefix() string {
	if c.Fence.Domain == DomainPrefix {
		return c.S3.Prefix
	}
	return ""
}

// EndpointURL returns the S3 endpoint, filling in AWS S3 for the region when
// none is configured.
func (c *Config) EndpointURL() string {
	if c.S3.Endpoint != "" {
		return c.S3.Endpoint
	}
	if c.S3.Region == "" || c.S3.Region == "us-east-1" {
		return "https://s3.amazonaws.com"
	}
	return "https://s3." + c.S3.Region + ".amazonaws.com"
}

// Error is a configuration error naming the offending key.
type Error struct {
	Key string // dotted key, -o option, or flag as the user wrote it
	Msg string // what is wrong and what is accepted
}

func (e *Error) Error() string { return e.Key + ": " + e.Msg }

func keyErr(key, format string, a ...any) error {
	return &Error{Key: key, Msg: fmt.Sprintf(format, a...)}
}

var bucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// Validate checks c and returns the first problem as an *Error naming the key
// and the accepted values. requireMount says whether the mount settings
// (mountpoint) must be present; other commands pass false.
func (c *Config) Validate(requireMount bool) error {
	for _, check := range []func() error{c.validateS3, c.validateFence, func() error { return c.validateMount(requireMount) }, c.validateLog} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// validateS3 checks the s3.* keys.
func (c *Config) validateS3() error {
	if c.S3.Bucket == "" {
		return keyErr("s3.bucket", "missing (give BUCKET[/PREFIX] as the first argument)")
	}
	if !bucketRE.MatchString(c.S3.Bucket) || strings.Contains(c.S3.Bucket, "..") || net.ParseIP(c.S3.Bucket) != nil {
		return keyErr("s3.bucket", "%q is not a valid bucket name (accepted: 3-63 characters of a-z, 0-9, '.' and '-', starting and ending with a letter or digit)", c.S3.Bucket)
	}
	if strings.HasPrefix(c.S3.Prefix, "/") || strings.Contains(c.S3.Prefix, "//") {
		return keyErr("s3.prefix", "%q is not a valid prefix (accepted: a key prefix without leading or doubled '/')", c.S3.Prefix)
	}
	if c.S3.Prefix != "" && !strings.HasSuffix(c.S3.Prefix, "/") {
		return keyErr("s3.prefix", "%q must end with '/'", c.S3.Prefix)
	}
	if c.S3.Endpoint != "" {
		u, err := url.Parse(c.S3.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.User != nil {
			return keyErr("s3.endpoint", "%q is not a valid endpoint (accepted: http://HOST[:PORT] or https://HOST[:PORT], without path or user info)", redactURL(c.S3.Endpoint))
		}
	}
	if c.S3.Region == "" {
		return keyErr("s3.region", "missing (accepted: a region name such as us-east-1)")
	}
	if (c.S3.AccessKey == "") != (c.S3.SecretKey == "") {
		if c.S3.AccessKey == "" {
			return keyErr("s3.access_key", "missing while a secret key is set (set AWS_ACCESS_KEY_ID or FENCEFS_S3_ACCESS_KEY, or s3.access_key in the config file)")
		}
		return keyErr("s3.secret_key", "missing while an access key is set (set AWS_SECRET_ACCESS_KEY or FENCEFS_S3_SECRET_KEY, or s3.secret_key in the config file)")
	}
	if p := c.S3.Profile; strings.ContainsAny(p, "[]\n\r") {
		return keyErr("s3.profile", "%q is not a profile name (accepted: the name of a section of the shared credentials file, such as default, without brackets)", p)
	}
	if c.S3.CAFile != "" {
		if _, err := os.Stat(c.S3.CAFile); err != nil {
			return keyErr("s3.ca_file", "cannot read %s: %v", c.S3.CAFile, errors.Unwrap(err))
		}
	}
	if c.S3.Timeout <= 0 {
		return keyErr("s3.timeout", "%v is not positive (accepted: a duration such as 30s)", c.S3.Timeout)
	}
	if c.S3.ConnectTimeout <= 0 {
		return keyErr("s3.connect_timeout", "%v is not positive (accepted: a duration such as 5s)", c.S3.ConnectTimeout)
	}
	if c.S3.RetryDeadline <= 0 {
		return keyErr("s3.retry_deadline", "%v is not positive (accepted: a duration such as 15s)", c.S3.RetryDeadline)
	}
	if c.S3.Concurrency < 1 || c.S3.Concurrency > 64 {
		return keyErr("s3.concurrency", "%d is out of range (accepted: 1 to 64)", c.S3.Concurrency)
	}
	if c.S3.PartSizeMiB < 5 || c.S3.PartSizeMiB > 5120 {
		return keyErr("s3.part_size_mib", "%d is out of range (accepted: 5 to 5120)", c.S3.PartSizeMiB)
	}
	return nil
}

// validateFence checks the fence.* keys.
func (c *Config) validateFence() error {
	switch c.Fence.Mode {
	case ModeStrict, ModeFast, ModeOff:
	default:
		return keyErr("fence.mode", "%q is not a fencing mode (accepted: strict, fast, off)", c.Fence.Mode)
	}
	switch c.Fence.ReapTombstones {
	case "", ReapAuto, ReapAlways, ReapOff: // "": a Config built in code, auto
	default:
		return keyErr("fence.reap_tombstones", "%q is not a reaping choice (accepted: auto, always, off)", c.Fence.ReapTombstones)
	}
	switch c.Fence.Domain {
	case DomainBucket:
	case DomainPrefix:
		if c.S3.Prefix == "" {
			return keyErr("fence.domain", "prefix needs a mount prefix (mount BUCKET/PREFIX), or use bucket")
		}
	default:
		return keyErr("fence.domain", "%q is not a fence domain (accepted: bucket, prefix)", c.Fence.Domain)
	}
	if c.Fence.Token != "" {
		if _, err := fencing.ParseToken(c.Fence.Token); err != nil {
			return keyErr("fence.token", "%s", err.Error())
		}
	}
	if c.Fence.Token != "" && c.Fence.TokenFile != "" {
		return keyErr("fence.token", "set together with fence.token_file (accepted: one token source)")
	}
	if c.Fence.SignedRequestValidity <= 0 {
		return keyErr("fence.signed_request_validity", "%v is not positive (accepted: a duration such as 15m)", c.Fence.SignedRequestValidity)
	}
	if c.Fence.RefreshInterval < 0 {
		return keyErr("fence.refresh_interval", "%v is negative (accepted: a duration >= 0 such as 30s; 0 disables)", c.Fence.RefreshInterval)
	}
	if !validHolder(c.Fence.Holder) {
		return keyErr("fence.holder", "%q is not a valid holder name (accepted: up to 128 printable ASCII characters, without ',' or '@' and without surrounding blanks)", c.Fence.Holder)
	}
	return nil
}

// validateMount checks the mount.* keys (the mountpoint only when
// requireMount).
func (c *Config) validateMount(requireMount bool) error {
	if requireMount {
		if c.Mount.Mountpoint == "" {
			return keyErr("mountpoint", "missing (give MOUNTPOINT as the second argument)")
		}
		if c.Mount.ReadOnly && (c.Fence.Token != "" || c.Fence.TokenFile != "") {
			return keyErr("mount.read_only", "set together with a fencing token (a read-only mount binds no token; drop one of them)")
		}
		if c.Mount.CacheDir == "" {
			return keyErr("mount.cache_dir", "missing (accepted: a directory path)")
		}
	}
	for _, m := range []struct {
		key  string
		mode os.FileMode
	}{{"mount.file_mode", c.Mount.FileMode}, {"mount.dir_mode", c.Mount.DirMode}} {
		if m.mode&^os.ModePerm != 0 {
			return keyErr(m.key, "%#o is not a permission mode (accepted: octal 0000 to 0777)", uint32(m.mode))
		}
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"mount.attr_ttl", c.Mount.AttrTTL}, {"mount.entry_ttl", c.Mount.EntryTTL}, {"mount.meta_ttl", c.Mount.MetaTTL}} {
		if d.v < 0 {
			return keyErr(d.key, "%v is negative (accepted: a duration >= 0 such as 1s)", d.v)
		}
	}
	if m := c.Mount.StreamStagingMiB; m < 0 || m > 0 && m < 2*c.S3.PartSizeMiB {
		return keyErr("mount.stream_staging_mib", "%d is out of range (accepted: 0, or at least twice s3.part_size_mib: %d)", m, 2*c.S3.PartSizeMiB)
	}
	if c.Mount.MaxDirRename < 0 {
		return keyErr("mount.max_dir_rename", "%d is negative (accepted: a number >= 0)", c.Mount.MaxDirRename)
	}
	return nil
}

// validateLog checks the log.* and metrics.* keys.
func (c *Config) validateLog() error {
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return keyErr("log.level", "%q is not a log level (accepted: debug, info, warn, error)", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return keyErr("log.format", "%q is not a log format (accepted: text, json)", c.Log.Format)
	}
	if c.Metrics.Addr != "" {
		if _, port, err := net.SplitHostPort(c.Metrics.Addr); err != nil || port == "" {
			return keyErr("metrics.addr", "%q is not an address (accepted: HOST:PORT such as 127.0.0.1:9100, or :9100)", c.Metrics.Addr)
		}
	}
	return nil
}

// redactURL drops user info from a URL for messages.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		if i := strings.Index(s, "@"); i >= 0 {
			if j := strings.Index(s, "://"); j >= 0 && j < i {
				return s[:j+3] + "[REDACTED]" + s[i:]
			}
		}
		return s
	}
	u.User = nil
	return u.Scheme + "://[REDACTED]@" + strings.TrimPrefix(u.String(), u.Scheme+"://")
}

// DefaultCacheDir returns /var/cache/fencefs for root, else
// $XDG_CACHE_HOME/fencefs, else ~/.cache/fencefs.
func DefaultCacheDir(getenv func(string) string, uid int) string {
	if uid == 0 {
		return "/var/cache/fencefs"
	}
	if x := getenv("XDG_CACHE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "fencefs")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".cache", "fencefs")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("fencefs-%d", uid))
}

// validHolder reports whether h can be stored as object metadata and in the
// register ("" means a generated one).
func validHolder(h string) bool {
	if len(h) > 128 || strings.TrimSpace(h) != h {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; c < 0x20 || c > 0x7e || c == ',' || c == '@' {
			return false
		}
	}
	return true
}
