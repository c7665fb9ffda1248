package config

import (
	"sort"
	"strings"
)

// Group selects a set of settings, so that each command registers only the
// flags it uses.
type Group uint

// Setting groups.
const (
	GroupS3 Group = 1 << iota
	GroupFence
	GroupMount
	GroupLog
	GroupMetrics

	// GroupAll is every group (the mount command).
	GroupAll = GroupS3 | GroupFence | GroupMount | GroupLog | GroupMetrics
)

// kind is a setting's declared type: how its text value is parsed
// (parse.go) and which Go type its Config field (Setting.to) has.
type kind int

const (
	kindString   kind = iota // string, trimmed
	kindWord                 // string, trimmed and lower-cased (a choice such as strict)
	kindPath                 // string, made absolute
	kindSecret               // Secret
	kindBool                 // bool: true, false, 1, 0, yes, no, on, off
	kindDuration             // time.Duration; a bare 0 is accepted
	kindInt                  // int
	kindUint32               // uint32, a numeric id; unset keeps the computed default
	kindMode                 // os.FileMode, octal; a YAML number is taken as is
)

// Setting describes one configuration key: its dotted name (the YAML path),
// its -o mount option name, its command-line flag, and the environment
// variables that set it, in the order they are consulted.
type Setting struct {
	Key     string   // dotted key, e.g. "fence.token"; also accepted as an -o name
	Option  string   // short -o name, e.g. "token"; "" when not an -o option
	Flag    string   // long flag name without "--"; "" when no flag
	Env     []string // environment variables, first set wins
	Default string   // default value as text ("" = none or computed)
	Usage   string   // one-line help text
	Group   Group
	kind    kind
	// to returns the Config field the setting fills, a pointer of kind's
	// type (nil for the etcd.* and zookeeper.* keys, which LoadEtcd and
	// LoadZooKeeper read themselves).
	to func(c *Config) any
}

// TypeName names the kind of value the setting takes, as the help shows it
// (--attr-ttl duration): duration, number, id, mode, path, bool or string.
func (s Setting) TypeName() string {
	switch s.kind {
	case kindDuration:
		return "duration"
	case kindInt:
		return "number" // not "int": viper would convert a bound flag of that type itself
	case kindUint32:
		return "id"
	case kindMode:
		return "mode"
	case kindPath:
		return "path"
	case kindBool:
		return "bool"
	}
	return "string"
}

// Secret reports whether the setting holds a credential, which is never
// accepted from a flag or -o option and never printed.
func (s Setting) Secret() bool { return s.kind == kindSecret || s.Key == "s3.access_key" }

// settings is the table every other part of the package reads.
var settings = []Setting{
	{Key: "s3.endpoint", Option: "endpoint", Flag: "endpoint", Env: []string{"FENCEFS_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}, Group: GroupS3, kind: kindString, to: func(c *Config) any { return &c.S3.Endpoint },
		Usage: "S3 endpoint URL (http:// or https://); default AWS S3 for the region"},
	{Key: "s3.region", Option: "region", Flag: "region", Env: []string{"FENCEFS_S3_REGION", "AWS_REGION", "AWS_DEFAULT_REGION"}, Default: "us-east-1", Group: GroupS3, kind: kindString, to: func(c *Config) any { return &c.S3.Region },
		Usage: "S3 region"},
	{Key: "s3.bucket", Env: []string{"FENCEFS_S3_BUCKET"}, Group: GroupS3, kind: kindString, to: func(c *Config) any { return &c.S3.Bucket },
		Usage: "bucket name (normally the BUCKET[/PREFIX] argument)"},
	{Key: "s3.prefix", Option: "prefix", Env: []string{"FENCEFS_S3_PREFIX"}, Group: GroupS3, kind: kindString, to: func(c *Config) any { return &c.S3.Prefix },
		Usage: "key prefix inside the bucket that the mount shows (normally from BUCKET/PREFIX)"},
	{Key: "s3.access_key", Env: []string{"FENCEFS_S3_ACCESS_KEY", "AWS_ACCESS_KEY_ID"}, Group: GroupS3, kind: kindString, to: func(c *Config) any { return &c.S3.AccessKey },
		Usage: "access key id (env, config file or credentials file only)"},
	{Key: "s3.secret_key", Env: []string{"FENCEFS_S3_SECRET_KEY", "AWS_SECRET_ACCESS_KEY"}, Group: GroupS3, kind: kindSecret, to: func(c *Config) any { return &c.S3.SecretKey },
		Usage: "secret access key (env, config file or credentials file only)"},
	{Key: "s3.session_token", Env: []string{"FENCEFS_S3_SESSION_TOKEN", "AWS_SESSION_TOKEN"}, Group: GroupS3, kind: kindSecret, to: func(c *Config) any { return &c.S3.SessionToken },
		Usage: "session token for temporary credentials (env, config file or credentials file only)"},
	{Key: "s3.profile", Option: "profile", Flag: "profile", Env: []string{"FENCEFS_S3_PROFILE", "AWS_PROFILE"}, Default: "default", Group: GroupS3, kind: kindString, to: func(c *Config) any { return &c.S3.Profile },
		Usage: "profile to read from the shared credentials file"},
	{Key: "s3.credentials_file", Option: "credentials_file", Flag: "credentials-file", Env: []string{"FENCEFS_S3_CREDENTIALS_FILE", "AWS_SHARED_CREDENTIALS_FILE"}, Group: GroupS3, kind: kindPath, to: func(c *Config) any { return &c.S3.CredentialsFile },
		Usage: "shared credentials file (default ~/.aws/credentials)"},
	{Key: "s3.web_identity_token_file", Option: "web_identity_token_file", Flag: "web-identity-token-file", Env: []string{"FENCEFS_S3_WEB_IDENTITY_TOKEN_FILE", "AWS_WEB_IDENTITY_TOKEN_FILE"}, Group: GroupS3, kind: kindPath, to: func(c *Config) any { return &c.S3.WebIdentityTokenFile },
		Usage: "file holding an OIDC token (a Kubernetes service account token) that STS AssumeRoleWithWebIdentity exchanges for temporary credentials; read again at each renewal"},
	{Key: "s3.role_arn", Option: "role_arn", Flag: "role-arn", Env: []string{"FENCEFS_S3_ROLE_ARN", "AWS_ROLE_ARN"}, Group: GroupS3, kind: kindString, to: func(c *Config) any { return &c.S3.RoleARN },
		Usage: "role to assume: by web identity with s3.web_identity_token_file, else by STS AssumeRole with the keys found"},
	{Key: "s3.assume_role", Option: "assume_role", Flag: "assume-role", Env: []string{"FENCEFS_S3_ASSUME_ROLE"}, Default: "false", Group: GroupS3, kind: kindBool, to: func(c *Config) any { return &c.S3.AssumeRole },
		Usage: "exchange the keys found for temporary ones by STS AssumeRole, renewed before they expire (MinIO needs no s3.role_arn)"},
	{Key: "s3.sts_endpoint", Option: "sts_endpoint", Flag: "sts-endpoint", Env: []string{"FENCEFS_S3_STS_ENDPOINT", "AWS_ENDPOINT_URL_STS"}, Group: GroupS3, kind: kindString, to: func(c *Config) any { return &c.S3.STSEndpoint },
		Usage: "STS endpoint URL for AssumeRole and web identity; default the S3 endpoint (MinIO), or AWS's regional STS for an AWS endpoint"},
	{Key: "s3.ca_file", Option: "ca_file", Flag: "ca-file", Env: []string{"FENCEFS_S3_CA_FILE", "AWS_CA_BUNDLE"}, Group: GroupS3, kind: kindPath, to: func(c *Config) any { return &c.S3.CAFile },
		Usage: "PEM file of CA certificates to trust for https endpoints"},
	{Key: "s3.timeout", Option: "s3_timeout", Flag: "s3-timeout", Env: []string{"FENCEFS_S3_TIMEOUT"}, Default: "10s", Group: GroupS3, kind: kindDuration, to: func(c *Config) any { return &c.S3.Timeout },
		Usage: "idle timeout: a request fails once no byte has moved to or from the server for this long (a black hole, a stopped server); no limit on a request that keeps moving"},
	{Key: "s3.connect_timeout", Option: "s3_connect_timeout", Flag: "s3-connect-timeout", Env: []string{"FENCEFS_S3_CONNECT_TIMEOUT"}, Default: "5s", Group: GroupS3, kind: kindDuration, to: func(c *Config) any { return &c.S3.ConnectTimeout },
		Usage: "how long connecting to the server (TCP and TLS) may take"},
	{Key: "s3.retry_deadline", Option: "s3_retry_deadline", Flag: "s3-retry-deadline", Env: []string{"FENCEFS_S3_RETRY_DEADLINE"}, Default: "15s", Group: GroupS3, kind: kindDuration, to: func(c *Config) any { return &c.S3.RetryDeadline },
		Usage: "how long after a request (a mutation: its whole protocol) started a transient failure (503, 500, 499, a reset, a timeout) is still retried; then EIO"},
	{Key: "s3.concurrency", Option: "s3_concurrency", Flag: "s3-concurrency", Env: []string{"FENCEFS_S3_CONCURRENCY"}, Default: "4", Group: GroupS3, kind: kindInt, to: func(c *Config) any { return &c.S3.Concurrency },
		Usage: "parts of one multipart upload or copy in flight at once; also the parts of files being written that are uploaded at once"},
	{Key: "s3.part_size_mib", Option: "part_size_mib", Flag: "part-size-mib", Env: []string{"FENCEFS_S3_PART_SIZE_MIB"}, Default: "8", Group: GroupS3, kind: kindInt, to: func(c *Config) any { return &c.S3.PartSizeMiB },
		Usage: "multipart part size in MiB (5 to 5120); files up to twice this size are uploaded in one PUT"},
	{Key: "s3.path_style", Option: "path_style", Flag: "path-style", Env: []string{"FENCEFS_S3_PATH_STYLE"}, Default: "false", Group: GroupS3, kind: kindBool, to: func(c *Config) any { return &c.S3.PathStyle },
		Usage: "force path-style bucket addressing (default: automatic)"},

	{Key: "fence.mode", Option: "fence_mode", Flag: "fence-mode", Env: []string{"FENCEFS_FENCE_MODE"}, Default: "strict", Group: GroupFence, kind: kindWord, to: func(c *Config) any { return &c.Fence.Mode },
		Usage: "fencing protocol: strict, fast or off"},
	{Key: "fence.domain", Option: "fence_domain", Flag: "fence-domain", Env: []string{"FENCEFS_FENCE_DOMAIN"}, Default: "bucket", Group: GroupFence, kind: kindWord, to: func(c *Config) any { return &c.Fence.Domain },
		Usage: "fence domain: bucket (one epoch for the whole bucket) or prefix (the mounted prefix has its own)"},
	{Key: "fence.token", Option: "token", Flag: "token", Env: []string{"FENCEFS_FENCE_TOKEN"}, Group: GroupFence, kind: kindString, to: func(c *Config) any { return &c.Fence.Token },
		Usage: "fencing token: a decimal epoch N from 1 to 9223372036854775807 (the largest token), or auto (the register's newest + 1); none = read-only"},
	{Key: "fence.token_file", Option: "token_file", Flag: "token-file", Env: []string{"FENCEFS_FENCE_TOKEN_FILE"}, Group: GroupFence, kind: kindPath, to: func(c *Config) any { return &c.Fence.TokenFile },
		Usage: "file holding the fencing token; re-read and re-bound when it changes"},
	{Key: "fence.holder", Option: "holder", Flag: "holder", Env: []string{"FENCEFS_FENCE_HOLDER"}, Group: GroupFence, kind: kindString, to: func(c *Config) any { return &c.Fence.Holder },
		Usage: "stable holder name recorded with the epoch (default: a random per-mount id)"},
	{Key: "fence.signed_request_validity", Option: "signed_request_validity", Flag: "signed-request-validity", Env: []string{"FENCEFS_FENCE_SIGNED_REQUEST_VALIDITY"}, Default: "15m", Group: GroupFence, kind: kindDuration, to: func(c *Config) any { return &c.Fence.SignedRequestValidity },
		Usage: "longest time the server accepts a signed request (ETag reuse protection window)"},
	{Key: "fence.reap_tombstones", Option: "reap_tombstones", Flag: "reap-tombstones", Env: []string{"FENCEFS_FENCE_REAP_TOMBSTONES"}, Default: "auto", Group: GroupFence, kind: kindWord, to: func(c *Config) any { return &c.Fence.ReapTombstones },
		Usage: "the leading mount removes tombstones once older than fence.signed_request_validity: auto (only where DELETE honours If-Match: exact), always (also where it does not: see docs/DECISIONS.md for the window), off (fencefs gc only)"},

	{Key: "fence.refresh_interval", Option: "refresh_interval", Flag: "refresh-interval", Env: []string{"FENCEFS_FENCE_REFRESH_INTERVAL"}, Default: "30s", Group: GroupFence, kind: kindDuration, to: func(c *Config) any { return &c.Fence.RefreshInterval },
		Usage: "how often an idle mount re-reads the epoch register, so that its state and metrics show a newer epoch without waiting for a write (0 = never)"},

	{Key: "mount.read_only", Option: "read_only", Flag: "read-only", Env: []string{"FENCEFS_MOUNT_READ_ONLY"}, Default: "false", Group: GroupMount, kind: kindBool, to: func(c *Config) any { return &c.Mount.ReadOnly },
		Usage: "mount read-only (no token is bound)"},
	{Key: "mount.uid", Option: "uid", Flag: "uid", Env: []string{"FENCEFS_MOUNT_UID"}, Group: GroupMount, kind: kindUint32, to: func(c *Config) any { return &c.Mount.UID },
		Usage: "owner of files without a uid in their metadata (default: the mounting user)"},
	{Key: "mount.gid", Option: "gid", Flag: "gid", Env: []string{"FENCEFS_MOUNT_GID"}, Group: GroupMount, kind: kindUint32, to: func(c *Config) any { return &c.Mount.GID },
		Usage: "group of files without a gid in their metadata (default: the mounting user's group)"},
	{Key: "mount.file_mode", Option: "file_mode", Flag: "file-mode", Env: []string{"FENCEFS_MOUNT_FILE_MODE"}, Default: "0644", Group: GroupMount, kind: kindMode, to: func(c *Config) any { return &c.Mount.FileMode },
		Usage: "permission bits (octal) of files without a mode in their metadata"},
	{Key: "mount.dir_mode", Option: "dir_mode", Flag: "dir-mode", Env: []string{"FENCEFS_MOUNT_DIR_MODE"}, Default: "0755", Group: GroupMount, kind: kindMode, to: func(c *Config) any { return &c.Mount.DirMode },
		Usage: "permission bits (octal) of directories without a mode in their metadata"},
	{Key: "mount.cache_dir", Option: "cache_dir", Flag: "cache-dir", Env: []string{"FENCEFS_MOUNT_CACHE_DIR"}, Group: GroupMount, kind: kindPath, to: func(c *Config) any { return &c.Mount.CacheDir },
		Usage: "directory for staging files (default /var/cache/fencefs as root, else $XDG_CACHE_HOME/fencefs)"},
	{Key: "mount.stream_staging_mib", Option: "stream_staging_mib", Flag: "stream-staging-mib", Env: []string{"FENCEFS_MOUNT_STREAM_STAGING_MIB"}, Default: "256", Group: GroupMount, kind: kindInt, to: func(c *Config) any { return &c.Mount.StreamStagingMiB },
		Usage: "most local disk (MiB) a file written front to back keeps in cache_dir: beyond it, parts already uploaded are released and a writer faster than the uploads waits; such a file then accepts only sequential writes (ESPIPE otherwise, see docs/DESIGN.md) (0 = keep whole files; at least twice s3.part_size_mib)"},
	{Key: "mount.attr_ttl", Option: "attr_ttl", Flag: "attr-ttl", Env: []string{"FENCEFS_MOUNT_ATTR_TTL"}, Default: "1s", Group: GroupMount, kind: kindDuration, to: func(c *Config) any { return &c.Mount.AttrTTL },
		Usage: "how long the kernel caches file attributes"},
	{Key: "mount.entry_ttl", Option: "entry_ttl", Flag: "entry-ttl", Env: []string{"FENCEFS_MOUNT_ENTRY_TTL"}, Default: "1s", Group: GroupMount, kind: kindDuration, to: func(c *Config) any { return &c.Mount.EntryTTL },
		Usage: "how long the kernel caches directory entries; also how long a directory's listing answers lookups of names it did not show (see docs/DECISIONS.md)"},
	{Key: "mount.meta_ttl", Option: "meta_ttl", Flag: "meta-ttl", Env: []string{"FENCEFS_MOUNT_META_TTL"}, Default: "5s", Group: GroupMount, kind: kindDuration, to: func(c *Config) any { return &c.Mount.MetaTTL },
		Usage: "how long fencefs caches object metadata and listings"},
	{Key: "mount.leader_cache_ttl", Option: "leader_cache_ttl", Flag: "leader-cache-ttl", Env: []string{"FENCEFS_MOUNT_LEADER_CACHE_TTL"}, Default: "15m", Group: GroupMount, kind: kindDuration, to: func(c *Config) any { return &c.Mount.LeaderCacheTTL },
		Usage: "while the mount is the active leader, how long what it fetched stays trusted (metadata, listings, the kernel's entries and attributes): no other fencefs writer can change the bucket meanwhile; not above meta_ttl = no extra trust"},
	{Key: "mount.attr_writeback", Option: "attr_writeback", Flag: "attr-writeback", Env: []string{"FENCEFS_MOUNT_ATTR_WRITEBACK"}, Default: "1s", Group: GroupMount, kind: kindDuration, to: func(c *Config) any { return &c.Mount.AttrWriteback },
		Usage: "how long a chmod, chown or utimens of a file nobody is writing (or of a directory, symlink, special file) may wait before it is stored, so that the calls programs make in a row (tar, cp -a, rsync) share one commit; fsync, the close of a descriptor opened for writing, rename and unmount store it at once; 0 = store each before the call returns"},
	{Key: "mount.sync_deletes", Option: "sync_deletes", Flag: "sync-deletes", Env: []string{"FENCEFS_MOUNT_SYNC_DELETES"}, Default: "false", Group: GroupMount, kind: kindBool, to: func(c *Config) any { return &c.Mount.SyncDeletes },
		Usage: "delete before unlink returns; by default unlink returns once the name is gone from the mount and the delete is sent at once in the background, in the bucket when fsync of the directory, its rmdir or unmount returns (a kill -9 in that window brings the name back)"},
	{Key: "mount.nonempty", Option: "nonempty", Flag: "nonempty", Env: []string{"FENCEFS_MOUNT_NONEMPTY"}, Default: "false", Group: GroupMount, kind: kindBool, to: func(c *Config) any { return &c.Mount.Nonempty },
		Usage: "mount over a directory that is not empty, or over another mount there (its files are hidden until unmounted)"},
	{Key: "mount.allow_other", Option: "allow_other", Flag: "allow-other", Env: []string{"FENCEFS_MOUNT_ALLOW_OTHER"}, Default: "false", Group: GroupMount, kind: kindBool, to: func(c *Config) any { return &c.Mount.AllowOther },
		Usage: "let other users access the mount (needs user_allow_other in /etc/fuse.conf unless root); turns on default_permissions"},
	{Key: "mount.default_permissions", Option: "default_permissions", Flag: "default-permissions", Env: []string{"FENCEFS_MOUNT_DEFAULT_PERMISSIONS"}, Default: "false", Group: GroupMount, kind: kindBool, to: func(c *Config) any { return &c.Mount.DefaultPermissions },
		Usage: "the kernel checks every access against the stored mode, owner and group (always on with allow_other)"},
	{Key: "mount.max_dir_rename", Option: "max_dir_rename", Flag: "max-dir-rename", Env: []string{"FENCEFS_MOUNT_MAX_DIR_RENAME"}, Default: "1000", Group: GroupMount, kind: kindInt, to: func(c *Config) any { return &c.Mount.MaxDirRename },
		Usage: "largest number of objects a directory rename may copy; beyond it rename fails with EXDEV and mv copies file by file (0 = always)"},

	{Key: "log.level", Option: "log_level", Flag: "log-level", Env: []string{"FENCEFS_LOG_LEVEL"}, Default: "info", Group: GroupLog, kind: kindWord, to: func(c *Config) any { return &c.Log.Level },
		Usage: "log level: debug, info, warn or error"},
	{Key: "log.format", Option: "log_format", Flag: "log-format", Env: []string{"FENCEFS_LOG_FORMAT"}, Default: "text", Group: GroupLog, kind: kindWord, to: func(c *Config) any { return &c.Log.Format },
		Usage: "log format: text or json"},
	{Key: "log.file", Option: "log_file", Flag: "log-file", Env: []string{"FENCEFS_LOG_FILE"}, Group: GroupLog, kind: kindPath, to: func(c *Config) any { return &c.Log.File },
		Usage: "log to this file instead of stderr"},

	{Key: "metrics.addr", Option: "metrics_addr", Flag: "metrics-addr", Env: []string{"FENCEFS_METRICS_ADDR"}, Group: GroupMetrics, kind: kindString, to: func(c *Config) any { return &c.Metrics.Addr },
		Usage: "serve Prometheus /metrics and /healthz on this host:port"},
}

// Settings returns a copy of the table of every configuration key, in
// documentation order.
func Settings() []Setting {
	out := make([]Setting, len(settings))
	copy(out, settings)
	return out
}

func settingByKey(key string) (Setting, bool) {
	for _, s := range settings {
		if s.Key == key {
			return s, true
		}
	}
	return Setting{}, false
}

// settingByOption finds a setting by its -o name or its dotted key.
func settingByOption(name string) (Setting, bool) {
	for _, s := range settings {
		if s.Key == name || (s.Option != "" && s.Option == name) {
			return s, true
		}
		// Credentials by their short names, so that they are refused with
		// advice rather than as unknown.
		if s.Secret() && strings.TrimPrefix(s.Key, "s3.") == name {
			return s, true
		}
	}
	return Setting{}, false
}

// genericMountOptions are the options mount(8), mount.fuse3 and fstab pass to
// every helper. They are accepted and either mapped (rw, ro, allow_other,
// default_permissions) or ignored.
var genericMountOptions = map[string]bool{
	"rw": true, "ro": true, "_netdev": true, "nofail": true, "noauto": true,
	"auto": true, "user": true, "users": true, "nouser": true, "owner": true,
	"group": true, "exec": true, "noexec": true, "suid": true, "nosuid": true,
	"dev": true, "nodev": true, "defaults": true, "allow_other": true,
	"default_permissions": true, "async": true, "sync": true, "atime": true,
	"noatime": true, "relatime": true, "norelatime": true, "strictatime": true,
	"nodiratime": true, "diratime": true, "lazytime": true, "nolazytime": true,
	"silent": true, "loud": true,
}

// acceptedOptions lists every -o name, for error messages.
func acceptedOptions() string {
	var names []string
	for _, s := range settings {
		if s.Option != "" && !s.Secret() {
			names = append(names, s.Option)
		}
	}
	names = append(names, "config")
	sort.Strings(names)
	return strings.Join(names, ", ")
}
