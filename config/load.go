package config

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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
		v := &typedString{typ: s.TypeName()}
		fs.Var(v, s.Flag, usage)
		f := fs.Lookup(s.Flag)
		f.DefValue = s.Default
		_ = v.Set(s.Default)
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
	l := newLoader(src)
	ro, err := l.parseOptions()
	if err != nil {
		return nil, err
	}
	if err := l.read(checkEnv, settings); err != nil {
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
		return nil, l.withOrigin(err)
	}
	return c, nil
}

func newLoader(src Source) *loader {
	return &loader{src: src, v: viper.New(), opts: map[string]optVal{}, inFile: map[string]bool{}}
}

// read refuses unknown variables (checkEnv), reads the config file and
// gives viper the defaults, variables and flags of list.
func (l *loader) read(checkEnv func() error, list []Setting) error {
	if err := checkEnv(); err != nil {
		return err
	}
	if err := l.readFile(); err != nil {
		return err
	}
	return l.bind(list)
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

// build reads every setting out of viper into a Config: the table's
// settings by their declared kind (fill), then the values computed from
// others.
func (l *loader) build() (*Config, error) {
	c := &Config{File: l.file}
	c.Mount.UID, c.Mount.GID = uint32(os.Getuid()), uint32(os.Getgid())
	if err := l.fill(c); err != nil {
		return nil, l.withOrigin(err)
	}
	c.S3.Endpoint = strings.TrimSuffix(c.S3.Endpoint, "/")
	c.S3.Prefix = NormalizePrefix(c.S3.Prefix)
	if strings.EqualFold(c.Fence.Token, TokenAuto) {
		c.Fence.Token = TokenAuto
	}
	if c.Mount.CacheDir == "" {
		abs, err := filepath.Abs(DefaultCacheDir(os.Getenv, os.Getuid()))
		if err != nil {
			return nil, err
		}
		c.Mount.CacheDir = abs
	}
	c.Mount.DefaultPermissions = c.Mount.DefaultPermissions || c.Mount.AllowOther
	if c.Log.Level == "warning" {
		c.Log.Level = "warn"
	}
	if c.S3.AccessKey != "" || c.S3.SecretKey != "" {
		c.S3.CredentialsSource = l.origin("s3.access_key")
	}
	c.S3.profileFrom, c.S3.credentialsFileFrom = l.origin("s3.profile"), l.origin("s3.credentials_file")
	return c, nil
}

// withOrigin adds to the key of a configuration error where its value was
// set (flag, -o, variable or file).
func (l *loader) withOrigin(err error) error {
	var ke *Error
	if errors.As(err, &ke) {
		if from := l.origin(ke.Key); from != "" {
			ke.Key += " (" + from + ")"
		}
	}
	return err
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

// typedString is a flag's text value, parsed by Load like the same key from
// any other source; its type name is only what the help shows.
type typedString struct {
	typ string
	s   string
}

func (v *typedString) String() string     { return v.s }
func (v *typedString) Set(s string) error { v.s = s; return nil }
func (v *typedString) Type() string       { return v.typ }
