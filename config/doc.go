// Package config is fencefs's configuration: one plain Config struct, the
// table of every setting (Settings), and Load, which merges the sources with
// viper and validates the result. No viper type leaves this package:
// cmd/fencefs turns a Config into objstore/s3.Config, fencing.Config and
// fusefs.Options.
//
// # Keys
//
// Every setting has one dotted key, the same everywhere:
//
//	YAML file     fence:            -o option     fence.mode=strict  (or its
//	                mode: strict                   short name: fence_mode=strict)
//	environment   FENCEFS_FENCE_MODE=strict
//	flag          --fence-mode strict
//
// The short -o names (endpoint, token, fence_mode, cache_dir, …) and the
// standard AWS variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN, AWS_REGION, AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3,
// AWS_ENDPOINT_URL, AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE, AWS_CA_BUNDLE)
// are listed in Settings; docs/CLI.md has the full table.
//
// # Precedence
//
// flag > environment > config file > default. -o options count as flags;
// when a key is given both as --flag and as -o, the --flag wins. The
// BUCKET[/PREFIX] argument sets s3.bucket and s3.prefix at flag level. Among
// the environment variables of one key the first listed wins
// (FENCEFS_S3_REGION before AWS_REGION before AWS_DEFAULT_REGION).
// Credentials not given by env or file are looked up by objstore/s3, in the
// shared credentials file (s3.credentials_file, default ~/.aws/credentials,
// profile s3.profile): this package carries those two settings (and where
// they were set: Config.NamedProfile, Config.SettingError) but never opens
// the file.
//
// The config file is --config, else -o config=PATH, else $FENCEFS_CONFIG,
// else the first of $XDG_CONFIG_HOME/fencefs/config.yaml (or
// ~/.config/fencefs/config.yaml) and /etc/fencefs/config.yaml that exists.
//
// # Errors
//
// Unknown keys in the file, unknown -o options, unknown FENCEFS_<GROUP>_*
// variables and bad values are errors (*Error) that name the key, where it
// was set (flag, -o, variable or file) and the accepted values, on one line.
// mount(8)'s generic options (rw, ro, _netdev, nofail, noauto, auto, user,
// users, exec, noexec, suid, nosuid, dev, nodev, defaults, x-*,
// allow_other, default_permissions, atime variants) are accepted; ro and rw
// set mount.read_only unless read_only is given explicitly.
//
// # Secrets
//
// s3.access_key, s3.secret_key and s3.session_token are never accepted as
// flags or -o options (they would show in ps and /etc/fstab): such an option
// is refused with a pointer to the environment and the config file. Secret
// values have the type Secret, whose String, Format and MarshalText redact
// them; Config.Secrets lists them so that logs and messages can be scrubbed.
//
// # Concurrency
//
// Load reads the process environment and must not run concurrently with code
// that modifies it. A Config is a plain value, safe to share read-only.
package config
