package config

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// Flag names that are not settings.
const (
	FlagConfig  = "config"
	FlagOptions = "options"
	EnvConfig   = "FENCEFS_CONFIG"
)

// RegisterFlags adds to fs the flags of every setting in groups, and, when
// groups includes GroupMount, -o/--options. The --config flag is the
// caller's (usually a persistent flag on the root command) so that every
// command shares it; Load finds it by name in fs.
func RegisterFlags(fs *pflag.FlagSet, groups Group) {
	for _, s := range settings {
		if s.Flag == "" || s.Group&groups == 0 {
			continue
		}
		usage := s.Usage
		if len(s.Env) > 0 {
			usage += " [env " + strings.Join(s.Env, ", ") + "]"
		}
		if s.kind == kindBool {
			fs.Bool(s.Flag, s.Default == "true", usage)
			continue
		}
		fs.String(s.Flag, s.Default, usage)
	}
	if groups&GroupMount != 0 {
		fs.StringArrayP(FlagOptions, "o", nil, "mount options opt[=val],… as in fstab (see docs/CLI.md)")
	}
}

// Source is the command line of one invocation, besides the environment
// (read from the process) and the config file (found from --config, -o
// config=, $FENCEFS_CONFIG or the search path).
type Source struct {
	// Flags holds the parsed flags registered with RegisterFlags (and
	// --config). May be nil.
	Flags *pflag.FlagSet
	// Target is the BUCKET[/PREFIX] argument ("" when the command has none).
	// An "s3://" scheme is accepted.
	Target string
	// Mountpoint is the MOUNTPOINT argument ("" when the command has none).
	Mountpoint string
	// SearchPaths overrides the config file search path (tests); nil means
	// DefaultSearchPaths().
	SearchPaths []string
}

// DefaultSearchPaths returns the config files looked for, in order, when no
// file is named: $XDG_CONFIG_HOME/fencefs/config.yaml (or
// ~/.config/fencefs/config.yaml) and /etc/fencefs/config.yaml.
func DefaultSearchPaths() []string {
	var out []string
	if x := os.Getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) {
		out = append(out, filepath.Join(x, "fencefs", "config.yaml"))
	} else if h, err := os.UserHomeDir(); err == nil {
		out = append(out, filepath.Join(h, ".config", "fencefs", "config.yaml"))
	}
	return append(out, "/etc/fencefs/config.yaml")
}

type optVal struct {
	s     Setting
	name  string // as the user wrote it
	value string
}

// loader keeps the state of one Load.
type loader struct {
	src    Source
	v      *viper.Viper
	file   string
	opts   map[string]optVal // by setting key
	inFile map[string]bool
}

// Load merges defaults < config file < environment < command line (flags and
// -o options; an explicit --flag wins over -o for the same key) and returns
// the validated Config. requireMount says whether the mount settings must be
// complete (the mount command). Errors name the key (and where it was set)
// and the accepted values, and never contain a secret.
func Load(src Source, requireMount bool) (*Config, error) {
	l := &loader{src: src, v: viper.New(), opts: map[string]optVal{}, inFile: map[string]bool{}}
	ro, err := l.parseOptions()
	if err != nil {
		return nil, err
	}
	if err := checkEnv(); err != nil {
		return nil, err
	}
	if err := l.readFile(); err != nil {
		return nil, err
	}
	if err := l.bind(settings); err != nil {
		return nil, err
	}
	for key, o := range l.opts {
		if f := l.flag(o.s); f != nil && f.Changed {
			continue
		}
		l.v.Set(key, o.value)
	}
	if ro != nil {
		if f := l.flag(mustSetting("mount.read_only")); f == nil || !f.Changed {
			if _, ok := l.opts["mount.read_only"]; !ok {
				l.v.Set("mount.read_only", strconv.FormatBool(*ro))
			}
		}
	}
	if src.Target != "" {
		bucket, prefix, err := SplitTarget(src.Target)
		if err != nil {
			return nil, err
		}
		l.v.Set("s3.bucket", bucket)
		if prefix != "" {
			l.v.Set("s3.prefix", prefix)
		}
	}

	c, err := l.build()
	if err != nil {
		return nil, err
	}
	if src.Mountpoint != "" {
		mp, err := filepath.Abs(src.Mountpoint)
		if err != nil {
			return nil, keyErr("mountpoint", "%v", err)
		}
		c.Mount.Mountpoint = mp
	}
	if err := c.Validate(requireMount); err != nil {
		var ke *Error
		if errors.As(err, &ke) {
			if from := l.origin(ke.Key); from != "" {
				ke.Key += " (" + from + ")"
			}
		}
		return nil, err
	}
	return c, nil
}

func mustSetting(key string) Setting {
	s, ok := settingByKey(key)
	if !ok {
		panic("config: no setting " + key)
	}
	return s
}

func (l *loader) flag(s Setting) *pflag.Flag {
	if l.src.Flags == nil || s.Flag == "" {
		return nil
	}
	return l.src.Flags.Lookup(s.Flag)
}

// parseOptions reads the -o values. It returns the rw/ro generic option, if
// any, separately: an explicit read_only option wins over it.
func (l *loader) parseOptions() (*bool, error) {
	if l.src.Flags == nil || l.src.Flags.Lookup(FlagOptions) == nil {
		return nil, nil
	}
	lists, err := l.src.Flags.GetStringArray(FlagOptions)
	if err != nil {
		return nil, err
	}
	var ro *bool
	for _, list := range lists {
		for _, item := range strings.Split(list, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			name, value, hasValue := strings.Cut(item, "=")
			switch {
			case name == "rw" || name == "ro":
				b := name == "ro"
				ro = &b
				continue
			case name == "config":
				if !hasValue || value == "" {
					return nil, keyErr("-o config", "needs a value (accepted: config=PATH)")
				}
				l.opts["config"] = optVal{name: name, value: value}
				continue
			case genericMountOptions[name] && name != "allow_other" && name != "default_permissions":
				continue
			case strings.HasPrefix(name, "x-"):
				// x-systemd.*, x-gvfs-* and other userspace-only options.
				continue
			}
			s, ok := settingByOption(name)
			if !ok {
				return nil, keyErr("-o "+name, "unknown mount option (accepted: %s, and the generic mount options rw, ro, _netdev, nofail, noauto, defaults, x-systemd.*, …)", acceptedOptions())
			}
			if s.Secret() {
				return nil, keyErr("-o "+name, "credentials are not accepted as mount options or flags (they would show in ps and /etc/fstab); set %s in the environment, s3.%s in the config file, or use the shared credentials file",
					strings.Join(s.Env, " or "), strings.TrimPrefix(s.Key, "s3."))
			}
			if s.Option == "" && s.Key != "s3.bucket" {
				return nil, keyErr("-o "+name, "is not a mount option (accepted: %s)", acceptedOptions())
			}
			if !hasValue {
				if s.kind != kindBool {
					return nil, keyErr("-o "+name, "needs a value (%s=VALUE)", name)
				}
				value = "true"
			}
			if prev, dup := l.opts[s.Key]; dup && prev.value != value {
				return nil, keyErr("-o "+name, "given twice with different values (%q and %q)", prev.value, value)
			}
			l.opts[s.Key] = optVal{s: s, name: name, value: value}
		}
	}
	return ro, nil
}

// checkEnv refuses FENCEFS_<GROUP>_* variables that name no setting, so a
// misspelt variable is not silently ignored.
func checkEnv() error {
	known := map[string]bool{}
	for _, s := range settings {
		for _, e := range s.Env {
			known[e] = true
		}
	}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		for _, p := range []string{"FENCEFS_S3_", "FENCEFS_FENCE_", "FENCEFS_MOUNT_", "FENCEFS_LOG_", "FENCEFS_METRICS_"} {
			if strings.HasPrefix(name, p) && !known[name] {
				var acc []string
				for _, s := range settings {
					if strings.HasPrefix(s.Env[0], p) {
						acc = append(acc, s.Env[0])
					}
				}
				return keyErr(name, "unknown environment variable (accepted: %s)", strings.Join(acc, ", "))
			}
		}
	}
	return nil
}

// readFile finds and reads the config file, refusing unknown keys.
func (l *loader) readFile() error {
	var path string
	explicit := true
	switch {
	case l.src.Flags != nil && l.src.Flags.Lookup(FlagConfig) != nil && l.src.Flags.Lookup(FlagConfig).Changed:
		path = l.src.Flags.Lookup(FlagConfig).Value.String()
	case l.opts["config"].value != "":
		path = l.opts["config"].value
	case os.Getenv(EnvConfig) != "":
		path = os.Getenv(EnvConfig)
	default:
		explicit = false
		paths := l.src.SearchPaths
		if paths == nil {
			paths = DefaultSearchPaths()
		}
		for _, p := range paths {
			if _, err := os.Stat(p); err == nil {
				path = p
				break
			}
		}
	}
	delete(l.opts, "config")
	if path == "" {
		return nil
	}
	if _, err := os.Stat(path); err != nil {
		if explicit {
			return keyErr("config", "cannot read config file %s: %v", path, errors.Unwrap(err))
		}
		return nil
	}
	fv := viper.New()
	fv.SetConfigFile(path)
	if ext := filepath.Ext(path); ext != ".yaml" && ext != ".yml" && ext != ".json" && ext != ".toml" {
		fv.SetConfigType("yaml")
	}
	if err := fv.ReadInConfig(); err != nil {
		return keyErr("config", "cannot parse %s: %s", path, oneLine(err.Error()))
	}
	for _, k := range fv.AllKeys() {
		if _, ok := settingByKey(k); !ok {
			return keyErr(k, "unknown key in %s (accepted: %s)", path, acceptedKeys())
		}
		l.inFile[k] = true
	}
	if err := l.v.MergeConfigMap(fv.AllSettings()); err != nil {
		return keyErr("config", "cannot use %s: %s", path, oneLine(err.Error()))
	}
	l.file = path
	return nil
}

func acceptedKeys() string {
	var out []string
	for _, s := range settings {
		out = append(out, s.Key)
	}
	return strings.Join(out, ", ")
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// origin says where the effective value of key was set, for messages.
func (l *loader) origin(key string) string {
	s, ok := settingByKey(key)
	if !ok {
		return ""
	}
	if f := l.flag(s); f != nil && f.Changed {
		return "--" + s.Flag
	}
	if o, ok := l.opts[key]; ok {
		return "-o " + o.name
	}
	if key == "s3.bucket" || key == "s3.prefix" {
		if l.src.Target != "" {
			return "argument " + strconv.Quote(l.src.Target)
		}
	}
	for _, e := range s.Env {
		if v, ok := os.LookupEnv(e); ok && v != "" {
			return "$" + e
		}
	}
	if l.inFile[key] {
		return "in " + l.file
	}
	return ""
}

// build reads every setting out of viper into a Config.
func (l *loader) build() (*Config, error) {
	c := &Config{File: l.file}
	var firstErr error
	str := func(key string) string { return strings.TrimSpace(l.v.GetString(key)) }
	fail := func(key, format string, a ...any) {
		if firstErr == nil {
			e := &Error{Key: key, Msg: fmt.Sprintf(format, a...)}
			if from := l.origin(key); from != "" {
				e.Key += " (" + from + ")"
			}
			firstErr = e
		}
	}
	boolean := func(key string) bool {
		raw := str(key)
		switch strings.ToLower(raw) {
		case "true", "1", "yes", "on":
			return true
		case "false", "0", "no", "off", "":
			return false
		}
		fail(key, "%q is not a boolean (accepted: true, false)", raw)
		return false
	}
	duration := func(key string) time.Duration {
		raw := str(key)
		d, err := time.ParseDuration(raw)
		if err != nil {
			if n, err2 := strconv.ParseInt(raw, 10, 64); err2 == nil && n == 0 {
				return 0
			}
			fail(key, "%q is not a duration (accepted: a number with a unit, such as 500ms, 1s, 15m)", raw)
		}
		return d
	}
	integer := func(key string) int {
		raw := str(key)
		if raw == "" {
			return 0
		}
		n, err := strconv.Atoi(raw)
		if err != nil {
			fail(key, "%q is not a number (accepted: a decimal number)", raw)
		}
		return n
	}
	mode := func(key string) os.FileMode {
		switch raw := l.v.Get(key).(type) {
		case int, int64, uint64, uint32, int32:
			// A YAML number: 0644 in YAML is already octal, so take the value.
			n, _ := strconv.ParseInt(fmt.Sprint(raw), 10, 64)
			if n < 0 || n > 0o777 {
				fail(key, "%d is not a permission mode (accepted: an octal string such as \"0644\"; quote it in YAML)", n)
			}
			return os.FileMode(n)
		default:
			s := str(key)
			n, err := strconv.ParseUint(strings.TrimPrefix(s, "0o"), 8, 32)
			if err != nil || n > 0o777 {
				fail(key, "%q is not a permission mode (accepted: octal 0000 to 0777, such as 0644)", s)
			}
			return os.FileMode(n)
		}
	}
	uid := func(key string, def int) uint32 {
		raw := str(key)
		if raw == "" {
			return uint32(def)
		}
		n, err := strconv.ParseUint(raw, 10, 32)
		if err != nil {
			fail(key, "%q is not a numeric id (accepted: a decimal number 0 to 4294967295)", raw)
		}
		return uint32(n)
	}

	c.S3.Endpoint = strings.TrimSuffix(str("s3.endpoint"), "/")
	c.S3.Region = str("s3.region")
	c.S3.Bucket = str("s3.bucket")
	c.S3.Prefix = NormalizePrefix(str("s3.prefix"))
	c.S3.AccessKey = str("s3.access_key")
	c.S3.SecretKey = Secret(str("s3.secret_key"))
	c.S3.SessionToken = Secret(str("s3.session_token"))
	c.S3.Profile = str("s3.profile")
	c.S3.CredentialsFile = str("s3.credentials_file")
	c.S3.CAFile = str("s3.ca_file")
	c.S3.PathStyle = boolean("s3.path_style")
	c.S3.Timeout = duration("s3.timeout")
	c.S3.ConnectTimeout = duration("s3.connect_timeout")
	c.S3.RetryDeadline = duration("s3.retry_deadline")
	c.S3.Concurrency = integer("s3.concurrency")
	c.S3.PartSizeMiB = integer("s3.part_size_mib")

	c.Fence.Mode = strings.ToLower(str("fence.mode"))
	c.Fence.Domain = strings.ToLower(str("fence.domain"))
	c.Fence.Token = str("fence.token")
	if strings.EqualFold(c.Fence.Token, TokenAuto) {
		c.Fence.Token = TokenAuto
	}
	c.Fence.TokenFile = str("fence.token_file")
	c.Fence.Holder = str("fence.holder")
	c.Fence.SignedRequestValidity = duration("fence.signed_request_validity")
	c.Fence.RefreshInterval = duration("fence.refresh_interval")
	c.Fence.ReapTombstones = strings.ToLower(str("fence.reap_tombstones"))

	c.Mount.ReadOnly = boolean("mount.read_only")
	c.Mount.UID = uid("mount.uid", os.Getuid())
	c.Mount.GID = uid("mount.gid", os.Getgid())
	c.Mount.FileMode = mode("mount.file_mode")
	c.Mount.DirMode = mode("mount.dir_mode")
	c.Mount.CacheDir = str("mount.cache_dir")
	if c.Mount.CacheDir == "" {
		c.Mount.CacheDir = DefaultCacheDir(os.Getenv, os.Getuid())
	}
	c.Mount.AttrTTL = duration("mount.attr_ttl")
	c.Mount.EntryTTL = duration("mount.entry_ttl")
	c.Mount.MetaTTL = duration("mount.meta_ttl")
	c.Mount.LeaderCacheTTL = duration("mount.leader_cache_ttl")
	c.Mount.AllowOther = boolean("mount.allow_other")
	c.Mount.DefaultPermissions = boolean("mount.default_permissions") || c.Mount.AllowOther
	c.Mount.MaxDirRename = integer("mount.max_dir_rename")

	c.Log.Level = strings.ToLower(str("log.level"))
	if c.Log.Level == "warning" {
		c.Log.Level = "warn"
	}
	c.Log.Format = strings.ToLower(str("log.format"))
	c.Log.File = str("log.file")
	c.Metrics.Addr = str("metrics.addr")
	if firstErr != nil {
		return nil, firstErr
	}

	if c.S3.AccessKey != "" || c.S3.SecretKey != "" {
		c.S3.CredentialsSource = l.origin("s3.access_key")
	} else if err := l.sharedCredentials(c); err != nil {
		return nil, err
	}
	for _, p := range []*string{&c.Mount.CacheDir, &c.Fence.TokenFile, &c.Log.File, &c.S3.CAFile, &c.S3.CredentialsFile} {
		if *p != "" {
			abs, err := filepath.Abs(*p)
			if err != nil {
				return nil, err
			}
			*p = abs
		}
	}
	return c, nil
}

// sharedCredentials fills the credentials from the AWS shared credentials
// file (s3.credentials_file, default ~/.aws/credentials), profile s3.profile.
// A missing default file is not an error (anonymous access); a missing named
// file or profile is.
func (l *loader) sharedCredentials(c *Config) error {
	path := c.S3.CredentialsFile
	named := path != ""
	if !named {
		h, err := os.UserHomeDir()
		if err != nil {
			return nil
		}
		path = filepath.Join(h, ".aws", "credentials")
	}
	f, err := os.Open(path)
	if err != nil {
		if named {
			return keyErr("s3.credentials_file", "cannot read %s: %v", path, errors.Unwrap(err))
		}
		return nil
	}
	defer f.Close()
	profile := c.S3.Profile
	if profile == "" {
		profile = "default"
	}
	vals, found := parseINISection(f, profile)
	if !found {
		if named || l.origin("s3.profile") != "" {
			return keyErr("s3.profile", "profile %q not found in %s", profile, path)
		}
		return nil
	}
	c.S3.AccessKey = vals["aws_access_key_id"]
	c.S3.SecretKey = Secret(vals["aws_secret_access_key"])
	c.S3.SessionToken = Secret(vals["aws_session_token"])
	c.S3.CredentialsSource = fmt.Sprintf("%s [%s]", path, profile)
	return nil
}

// parseINISection returns the key = value pairs of [section] in an INI file.
func parseINISection(f *os.File, section string) (map[string]string, bool) {
	vals := map[string]string{}
	in, found := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' && strings.HasSuffix(line, "]") {
			name := strings.TrimSpace(line[1 : len(line)-1])
			name = strings.TrimPrefix(name, "profile ")
			in = name == section
			found = found || in
			continue
		}
		if !in {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok {
			vals[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	return vals, found
}

// SplitTarget splits "BUCKET[/PREFIX]" (optionally "s3://BUCKET/PREFIX")
// into the bucket and a normalized prefix ("" or ending in "/").
func SplitTarget(target string) (bucket, prefix string, err error) {
	t := strings.TrimPrefix(target, "s3://")
	bucket, prefix, _ = strings.Cut(t, "/")
	if bucket == "" {
		return "", "", keyErr("s3.bucket", "argument %q has no bucket (accepted: BUCKET[/PREFIX])", target)
	}
	return bucket, NormalizePrefix(prefix), nil
}

// NormalizePrefix returns p without leading "/" and with a trailing "/"
// (or "" for the empty prefix).
func NormalizePrefix(p string) string {
	p = strings.TrimLeft(p, "/")
	if p == "" {
		return ""
	}
	if !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p
}
