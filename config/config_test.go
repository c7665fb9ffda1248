package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// isolate clears every environment variable the package reads and points
// HOME and the config search path at empty temporary directories.
func isolate(t *testing.T) {
	t.Helper()
	for _, s := range settings {
		for _, e := range s.Env {
			t.Setenv(e, "")
			os.Unsetenv(e)
		}
	}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "FENCEFS_") {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	t.Setenv("XDG_CACHE_HOME", filepath.Join(home, ".cache"))
}

// invocation is one command line for load.
type invocation struct {
	file   string   // YAML content of a config file given with --config ("" none)
	env    []string // K=V
	args   []string // flags
	target string   // BUCKET[/PREFIX]
	mp     string
}

func load(t *testing.T, inv invocation) (*Config, error) {
	t.Helper()
	fs, err := inv.flags(t, GroupAll)
	if err != nil {
		return nil, err
	}
	target := inv.target
	if target == "" {
		target = "bucket"
	}
	mp := inv.mp
	if mp == "" {
		mp = "/mnt/x"
	}
	return Load(Source{Flags: fs, Target: target, Mountpoint: mp, SearchPaths: []string{}}, true)
}

func TestPrecedenceFlagOverEnvOverFileOverDefault(t *testing.T) {
	const file = "fence:\n  mode: fast\n  holder: from-file\nmount:\n  attr_ttl: 3s\n  entry_ttl: 4s\n  meta_ttl: 7s\n"
	tests := []struct {
		name string
		inv  invocation
		get  func(*Config) any
		want any
	}{
		{"default when nothing is set", invocation{}, func(c *Config) any { return c.Fence.Mode }, "strict"},
		{"file over default", invocation{file: file}, func(c *Config) any { return c.Fence.Mode }, "fast"},
		{"env over file", invocation{file: file, env: []string{"FENCEFS_FENCE_MODE=off"}}, func(c *Config) any { return c.Fence.Mode }, "off"},
		{"flag over env", invocation{file: file, env: []string{"FENCEFS_FENCE_MODE=off"}, args: []string{"--fence-mode", "strict"}}, func(c *Config) any { return c.Fence.Mode }, "strict"},
		{"-o over env", invocation{file: file, env: []string{"FENCEFS_FENCE_MODE=off"}, args: []string{"-o", "fence_mode=strict"}}, func(c *Config) any { return c.Fence.Mode }, "strict"},
		{"explicit flag over -o", invocation{args: []string{"-o", "fence_mode=off", "--fence-mode", "fast"}}, func(c *Config) any { return c.Fence.Mode }, "fast"},
		{"-o accepts the dotted key", invocation{args: []string{"-o", "fence.mode=fast"}}, func(c *Config) any { return c.Fence.Mode }, "fast"},
		{"file value kept when env sets another key", invocation{file: file, env: []string{"FENCEFS_FENCE_MODE=off"}}, func(c *Config) any { return c.Fence.Holder }, "from-file"},
		{"file duration", invocation{file: file}, func(c *Config) any { return c.Mount.MetaTTL }, 7 * time.Second},
		{"flag duration over file", invocation{file: file, args: []string{"--attr-ttl", "250ms"}}, func(c *Config) any { return c.Mount.AttrTTL }, 250 * time.Millisecond},
		{"FENCEFS_ env wins over the AWS variable", invocation{env: []string{"AWS_REGION=eu-west-1", "FENCEFS_S3_REGION=eu-central-1"}}, func(c *Config) any { return c.S3.Region }, "eu-central-1"},
		{"AWS_REGION", invocation{env: []string{"AWS_REGION=eu-west-1"}}, func(c *Config) any { return c.S3.Region }, "eu-west-1"},
		{"AWS_DEFAULT_REGION after AWS_REGION", invocation{env: []string{"AWS_DEFAULT_REGION=ap-south-1"}}, func(c *Config) any { return c.S3.Region }, "ap-south-1"},
		{"AWS_ENDPOINT_URL_S3", invocation{env: []string{"AWS_ENDPOINT_URL_S3=http://127.0.0.1:9000"}}, func(c *Config) any { return c.S3.Endpoint }, "http://127.0.0.1:9000"},
		{"--endpoint over AWS_ENDPOINT_URL_S3", invocation{env: []string{"AWS_ENDPOINT_URL_S3=http://127.0.0.1:9000"}, args: []string{"--endpoint", "http://127.0.0.1:9001/"}}, func(c *Config) any { return c.S3.Endpoint }, "http://127.0.0.1:9001"},
		{"credentials from the AWS env", invocation{env: []string{"AWS_ACCESS_KEY_ID=AKID", "AWS_SECRET_ACCESS_KEY=s3cr3t-value"}}, func(c *Config) any { return c.S3.AccessKey + "/" + c.S3.SecretKey.Reveal() }, "AKID/s3cr3t-value"},
		{"credentials from the config file", invocation{file: "s3:\n  access_key: FILEKEY\n  secret_key: filesecret\n"}, func(c *Config) any { return c.S3.AccessKey + "/" + c.S3.SecretKey.Reveal() }, "FILEKEY/filesecret"},
		{"bucket and prefix from the target", invocation{target: "data/a/b"}, func(c *Config) any { return c.S3.Bucket + "|" + c.S3.Prefix }, "data|a/b/"},
		{"s3:// target", invocation{target: "s3://data/logs/"}, func(c *Config) any { return c.S3.Bucket + "|" + c.S3.Prefix }, "data|logs/"},
		{"ro generic option", invocation{args: []string{"-o", "ro,_netdev"}}, func(c *Config) any { return c.Mount.ReadOnly }, true},
		{"read_only option wins over rw", invocation{args: []string{"-o", "rw,read_only"}}, func(c *Config) any { return c.Mount.ReadOnly }, true},
		{"bare boolean option", invocation{args: []string{"-o", "allow_other"}}, func(c *Config) any { return c.Mount.AllowOther }, true},
		{"allow_other turns on permission checks", invocation{args: []string{"-o", "allow_other"}}, func(c *Config) any { return c.Mount.DefaultPermissions }, true},
		{"default_permissions alone turns on permission checks", invocation{args: []string{"-o", "default_permissions"}}, func(c *Config) any { return c.Mount.DefaultPermissions }, true},
		{"permission checks are off by default for a private mount", invocation{}, func(c *Config) any { return c.Mount.DefaultPermissions }, false},
		{"token from -o", invocation{args: []string{"-o", "endpoint=http://127.0.0.1:9000,token=17,_netdev,nofail,x-systemd.automount"}}, func(c *Config) any { return c.Fence.Token }, "17"},
		{"token auto is case-insensitive", invocation{args: []string{"--token", "AUTO"}}, func(c *Config) any { return c.Fence.Token }, "auto"},
		{"octal mode flag", invocation{args: []string{"--file-mode", "0600"}}, func(c *Config) any { return c.Mount.FileMode }, os.FileMode(0o600)},
		{"YAML octal number mode", invocation{file: "mount:\n  dir_mode: 0700\n"}, func(c *Config) any { return c.Mount.DirMode }, os.FileMode(0o700)},
		{"YAML quoted mode", invocation{file: "mount:\n  dir_mode: \"0750\"\n"}, func(c *Config) any { return c.Mount.DirMode }, os.FileMode(0o750)},
		{"uid defaults to the caller", invocation{}, func(c *Config) any { return c.Mount.UID }, uint32(os.Getuid())},
		{"uid from -o", invocation{args: []string{"-o", "uid=1234,gid=99"}}, func(c *Config) any { return fmt.Sprint(c.Mount.UID, c.Mount.GID) }, "1234 99"},
		{"relative cache dir made absolute", invocation{args: []string{"--cache-dir", "rel/cache"}}, func(c *Config) any { return filepath.IsAbs(c.Mount.CacheDir) }, true},
		{"log level warning alias", invocation{args: []string{"--log-level", "warning"}}, func(c *Config) any { return c.Log.Level }, "warn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(t, tt.inv)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got := tt.get(c); got != tt.want {
				t.Fatalf("got %v (%T), want %v", got, got, tt.want)
			}
		})
	}
}

func TestDefaultCacheDirDependsOnUser(t *testing.T) {
	env := map[string]string{"XDG_CACHE_HOME": "/home/u/.xdg", "HOME": "/home/u"}
	get := func(k string) string { return env[k] }
	if got := DefaultCacheDir(get, 0); got != "/var/cache/fencefs" {
		t.Errorf("root: %s", got)
	}
	if got := DefaultCacheDir(get, 1000); got != "/home/u/.xdg/fencefs" {
		t.Errorf("user with XDG_CACHE_HOME: %s", got)
	}
	delete(env, "XDG_CACHE_HOME")
	if got := DefaultCacheDir(get, 1000); got != "/home/u/.cache/fencefs" {
		t.Errorf("user without XDG_CACHE_HOME: %s", got)
	}
}

func TestLoadErrorsNameTheKeyAndAcceptedValues(t *testing.T) {
	tests := []struct {
		name string
		inv  invocation
		want []string // substrings of the error
	}{
		{"unknown -o option", invocation{args: []string{"-o", "endpoint=http://h:1,bogus=1"}}, []string{"-o bogus", "unknown mount option", "accepted:", "fence_mode"}},
		{"secret key as -o is refused", invocation{args: []string{"-o", "secret_key=hunter2"}}, []string{"-o secret_key", "AWS_SECRET_ACCESS_KEY"}},
		{"dotted secret key as -o is refused", invocation{args: []string{"-o", "s3.secret_key=hunter2"}}, []string{"-o s3.secret_key", "not accepted"}},
		{"access key as -o is refused", invocation{args: []string{"-o", "access_key=AKID"}}, []string{"-o access_key", "AWS_ACCESS_KEY_ID"}},
		{"-o without a value", invocation{args: []string{"-o", "token"}}, []string{"-o token", "needs a value"}},
		{"-o given twice differently", invocation{args: []string{"-o", "token=1,token=2"}}, []string{"-o token", "twice"}},
		{"unknown file key", invocation{file: "fence:\n  tokn: 3\n"}, []string{"fence.tokn", "unknown key", "fence.token"}},
		{"unknown file section", invocation{file: "fuse:\n  x: 1\n"}, []string{"fuse.x", "unknown key"}},
		{"unparsable file", invocation{file: "fence: [\n"}, []string{"config", "cannot parse"}},
		{"unknown FENCEFS env", invocation{env: []string{"FENCEFS_FENCE_TOKN=3"}}, []string{"FENCEFS_FENCE_TOKN", "unknown environment variable", "FENCEFS_FENCE_TOKEN"}},
		{"bad mode", invocation{args: []string{"--fence-mode", "paranoid"}}, []string{"fence.mode (--fence-mode)", `"paranoid"`, "strict, fast, off"}},
		{"bad mode from env", invocation{env: []string{"FENCEFS_FENCE_MODE=paranoid"}}, []string{"fence.mode ($FENCEFS_FENCE_MODE)", "strict, fast, off"}},
		{"bad mode from file", invocation{file: "fence:\n  mode: paranoid\n"}, []string{"fence.mode (in ", "strict, fast, off"}},
		{"bad domain", invocation{args: []string{"--fence-domain", "dir"}}, []string{"fence.domain", "bucket, prefix"}},
		{"bad tombstone reaping", invocation{args: []string{"--reap-tombstones", "sometimes"}}, []string{"fence.reap_tombstones (--reap-tombstones)", `"sometimes"`, "auto, always, off"}},
		{"prefix domain without prefix", invocation{args: []string{"--fence-domain", "prefix"}}, []string{"fence.domain", "needs a mount prefix"}},
		{"zero token", invocation{args: []string{"--token", "0"}}, []string{"fence.token (--token)", "decimal number >= 1, or auto"}},
		{"negative token", invocation{args: []string{"-o", "token=-3"}}, []string{"fence.token (-o token)", "decimal number >= 1"}},
		{"token above the largest", invocation{args: []string{"--token", "18446744073709551615"}}, []string{"fence.token (--token)", "token 18446744073709551615 is above the largest token, 9223372036854775807"}},
		{"token above the largest from env", invocation{env: []string{"FENCEFS_FENCE_TOKEN=9223372036854775808"}}, []string{"fence.token ($FENCEFS_FENCE_TOKEN)", "above the largest token"}},
		{"token and token file", invocation{args: []string{"--token", "3", "--token-file", "/tmp/t"}}, []string{"fence.token", "fence.token_file"}},
		{"read-only with token", invocation{args: []string{"--token", "3", "--read-only"}}, []string{"mount.read_only", "token"}},
		{"bad signed request validity", invocation{args: []string{"--signed-request-validity", "soon"}}, []string{"fence.signed_request_validity", "duration"}},
		{"zero signed request validity", invocation{args: []string{"--signed-request-validity", "0s"}}, []string{"fence.signed_request_validity", "not positive"}},
		{"bad s3 timeout", invocation{args: []string{"--s3-timeout", "fast"}}, []string{"s3.timeout", "duration"}},
		{"zero s3 timeout", invocation{args: []string{"--s3-timeout", "0s"}}, []string{"s3.timeout", "not positive"}},
		{"bad connect timeout", invocation{args: []string{"-o", "s3_connect_timeout=soon"}}, []string{"s3.connect_timeout (-o s3_connect_timeout)", "duration"}},
		{"zero retry deadline", invocation{env: []string{"FENCEFS_S3_RETRY_DEADLINE=0s"}}, []string{"s3.retry_deadline", "not positive"}},
		{"concurrency not a number", invocation{args: []string{"--s3-concurrency", "many"}}, []string{"s3.concurrency", "not a number"}},
		{"concurrency out of range", invocation{args: []string{"--s3-concurrency", "0"}}, []string{"s3.concurrency", "1 to 64"}},
		{"part size too small", invocation{args: []string{"--part-size-mib", "4"}}, []string{"s3.part_size_mib", "5 to 5120"}},
		{"negative refresh interval", invocation{args: []string{"--refresh-interval", "-5s"}}, []string{"fence.refresh_interval", "negative"}},
		{"bad duration", invocation{args: []string{"-o", "attr_ttl=fast"}}, []string{"mount.attr_ttl (-o attr_ttl)", "not a duration", "500ms"}},
		{"negative duration", invocation{args: []string{"--entry-ttl", "-1s"}}, []string{"mount.entry_ttl", "negative"}},
		{"bad bool", invocation{args: []string{"-o", "allow_other=maybe"}}, []string{"mount.allow_other", "true, false"}},
		{"bad bool from env", invocation{env: []string{"FENCEFS_S3_PATH_STYLE=sometimes"}}, []string{"s3.path_style ($FENCEFS_S3_PATH_STYLE)", "true, false"}},
		{"bad file mode", invocation{args: []string{"--file-mode", "rw-r--r--"}}, []string{"mount.file_mode", "octal"}},
		{"file mode out of range", invocation{args: []string{"--file-mode", "4755"}}, []string{"mount.file_mode", "0777"}},
		{"YAML decimal mode", invocation{file: "mount:\n  file_mode: 644\n"}, []string{"mount.file_mode", "quote it"}},
		{"bad uid", invocation{args: []string{"--uid", "root"}}, []string{"mount.uid", "numeric id"}},
		{"bad max_dir_rename", invocation{args: []string{"--max-dir-rename", "many"}}, []string{"mount.max_dir_rename", "number"}},
		{"negative max_dir_rename", invocation{args: []string{"--max-dir-rename", "-1"}}, []string{"mount.max_dir_rename", "negative"}},
		{"bad log level", invocation{args: []string{"--log-level", "loud"}}, []string{"log.level", "debug, info, warn, error"}},
		{"bad log format", invocation{args: []string{"--log-format", "xml"}}, []string{"log.format", "text, json"}},
		{"bad metrics address", invocation{args: []string{"--metrics-addr", "9100"}}, []string{"metrics.addr", "HOST:PORT"}},
		{"bad endpoint scheme", invocation{args: []string{"--endpoint", "ftp://h"}}, []string{"s3.endpoint", "http://HOST"}},
		{"endpoint with a path", invocation{args: []string{"--endpoint", "http://h:9000/bucket"}}, []string{"s3.endpoint", "without path"}},
		{"endpoint with user info hides it", invocation{args: []string{"--endpoint", "http://user:pw@h:9000/x"}}, []string{"s3.endpoint", "[REDACTED]"}},
		{"bad bucket", invocation{target: "Bad_Bucket"}, []string{"s3.bucket", "not a valid bucket name", "a-z"}},
		{"empty bucket", invocation{target: "/prefix"}, []string{"s3.bucket", "BUCKET[/PREFIX]"}},
		{"access key without secret", invocation{env: []string{"AWS_ACCESS_KEY_ID=AKID"}}, []string{"s3.secret_key", "AWS_SECRET_ACCESS_KEY"}},
		{"secret without access key", invocation{env: []string{"AWS_SECRET_ACCESS_KEY=verysecret"}}, []string{"s3.access_key", "AWS_ACCESS_KEY_ID"}},
		{"missing CA file", invocation{args: []string{"--ca-file", "/nonexistent/ca.pem"}}, []string{"s3.ca_file", "/nonexistent/ca.pem"}},
		{"missing config file", invocation{args: []string{"--config", "/nonexistent/fencefs.yaml"}}, []string{"config", "cannot read config file"}},
		{"profile with brackets", invocation{args: []string{"--profile", "[ci]"}}, []string{"s3.profile (--profile)", "not a profile name"}},
		{"missing region", invocation{args: []string{"--region", ""}}, []string{"s3.region", "missing"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.inv)
			if err == nil {
				t.Fatalf("Load succeeded, want an error containing %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans several lines: %q", err)
			}
			for _, secret := range []string{"hunter2", "verysecret", "pw@"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q reveals a secret", err)
				}
			}
		})
	}
}

func TestValidateRejectsEachBadField(t *testing.T) {
	good := func() *Config {
		return &Config{
			S3:      S3{Region: "us-east-1", Bucket: "bucket", Timeout: time.Minute, ConnectTimeout: time.Second, RetryDeadline: time.Minute, Concurrency: 4, PartSizeMiB: 8},
			Fence:   Fence{Mode: ModeStrict, Domain: DomainBucket, SignedRequestValidity: time.Minute},
			Mount:   Mount{Mountpoint: "/mnt", FileMode: 0o644, DirMode: 0o755, CacheDir: "/c"},
			Log:     Log{Level: "info", Format: "text"},
			Metrics: Metrics{},
		}
	}
	if err := good().Validate(true); err != nil {
		t.Fatalf("the good config fails: %v", err)
	}
	tests := []struct {
		name    string
		mutate  func(*Config)
		mount   bool
		wantKey string
	}{
		{"missing bucket", func(c *Config) { c.S3.Bucket = "" }, true, "s3.bucket"},
		{"zero timeout", func(c *Config) { c.S3.Timeout = 0 }, true, "s3.timeout"},
		{"zero connect timeout", func(c *Config) { c.S3.ConnectTimeout = 0 }, true, "s3.connect_timeout"},
		{"zero retry deadline", func(c *Config) { c.S3.RetryDeadline = 0 }, true, "s3.retry_deadline"},
		{"part size too large", func(c *Config) { c.S3.PartSizeMiB = 6000 }, true, "s3.part_size_mib"},
		{"IP address bucket", func(c *Config) { c.S3.Bucket = "10.0.0.1" }, true, "s3.bucket"},
		{"prefix with leading slash", func(c *Config) { c.S3.Prefix = "/a/" }, true, "s3.prefix"},
		{"prefix without trailing slash", func(c *Config) { c.S3.Prefix = "a" }, true, "s3.prefix"},
		{"prefix with doubled slash", func(c *Config) { c.S3.Prefix = "a//b/" }, true, "s3.prefix"},
		{"missing mountpoint", func(c *Config) { c.Mount.Mountpoint = "" }, true, "mountpoint"},
		{"missing cache dir", func(c *Config) { c.Mount.CacheDir = "" }, true, "mount.cache_dir"},
		{"dir mode with type bits", func(c *Config) { c.Mount.DirMode = os.ModeDir | 0o755 }, true, "mount.dir_mode"},
		{"metrics without port", func(c *Config) { c.Metrics.Addr = "localhost:" }, true, "metrics.addr"},
		{"holder with newline", func(c *Config) { c.Fence.Holder = "a\nb" }, true, "fence.holder"},
		{"holder too long", func(c *Config) { c.Fence.Holder = strings.Repeat("h", 129) }, true, "fence.holder"},
		{"holder with @", func(c *Config) { c.Fence.Holder = "svc@host" }, true, "fence.holder"},
		{"holder with comma", func(c *Config) { c.Fence.Holder = "a,b" }, true, "fence.holder"},
		{"holder with surrounding blank", func(c *Config) { c.Fence.Holder = "a " }, true, "fence.holder"},
		{"holder not ASCII", func(c *Config) { c.Fence.Holder = "h\u00e9" }, true, "fence.holder"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good()
			tt.mutate(c)
			err := c.Validate(tt.mount)
			var ke *Error
			if !errors.As(err, &ke) {
				t.Fatalf("Validate = %v, want a *config.Error", err)
			}
			if ke.Key != tt.wantKey {
				t.Fatalf("error names %q, want %q (%v)", ke.Key, tt.wantKey, err)
			}
		})
	}
	t.Run("mount settings not required by other commands", func(t *testing.T) {
		c := good()
		c.Mount.Mountpoint = ""
		if err := c.Validate(false); err != nil {
			t.Fatalf("Validate(false) = %v", err)
		}
	})
}

func TestSecretsNeverPrinted(t *testing.T) {
	c, err := load(t, invocation{env: []string{"AWS_ACCESS_KEY_ID=AKID", "AWS_SECRET_ACCESS_KEY=topsecret-1", "AWS_SESSION_TOKEN=sessiontok-2"}})
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", *c), fmt.Sprintf("%#v", *c), fmt.Sprintf("%s %q %x", c.S3.SecretKey, c.S3.SecretKey, c.S3.SecretKey), string(js)} {
		if strings.Contains(out, "topsecret-1") || strings.Contains(out, "sessiontok-2") {
			t.Errorf("secret printed: %s", out)
		}
	}
	if !strings.Contains(fmt.Sprint(c.S3.SecretKey), "REDACTED") {
		t.Errorf("a set secret should print as [REDACTED], got %q", fmt.Sprint(c.S3.SecretKey))
	}
	if got := c.Secrets(); len(got) != 2 {
		t.Errorf("Secrets() = %d values, want 2", len(got))
	}
}

// TestCredentialsSettingsAreCarriedNotRead: s3.profile and
// s3.credentials_file only travel to objstore/s3 (which reads the file and
// checks the profile); Load never opens the file, and keeps where each was
// set for the S3 layer's errors.
func TestCredentialsSettingsAreCarriedNotRead(t *testing.T) {
	const creds = "[default]\naws_access_key_id = DEFKEY\naws_secret_access_key = defsecret\n"
	tests := []struct {
		name        string
		inv         invocation
		homeCreds   bool   // write ~/.aws/credentials
		wantNamed   string // NamedProfile
		wantFile    string
		errKey      string // SettingError(errKey, "m") must start with wantErr
		wantErr     string
		wantKeyFrom string // CredentialsSource
	}{
		{"nothing named", invocation{}, true, "", "", "s3.profile", "s3.profile: m", ""},
		{"profile from AWS_PROFILE", invocation{env: []string{"AWS_PROFILE=ci"}}, false, "ci", "", "s3.profile", "s3.profile ($AWS_PROFILE): m", ""},
		{"profile from FENCEFS_S3_PROFILE over AWS_PROFILE", invocation{env: []string{"AWS_PROFILE=ci", "FENCEFS_S3_PROFILE=prod"}}, false, "prod", "", "s3.profile", "s3.profile ($FENCEFS_S3_PROFILE): m", ""},
		{"profile from --profile", invocation{args: []string{"--profile", "ci"}}, false, "ci", "", "s3.profile", "s3.profile (--profile): m", ""},
		{"profile from -o", invocation{args: []string{"-o", "profile=ci"}}, false, "ci", "", "s3.profile", "s3.profile (-o profile): m", ""},
		{"profile from the config file", invocation{file: "s3:\n  profile: ci\n"}, false, "ci", "", "s3.profile", "s3.profile (in ", ""},
		{"default named explicitly", invocation{env: []string{"AWS_PROFILE=default"}}, false, "default", "", "s3.profile", "s3.profile ($AWS_PROFILE): m", ""},
		{"missing file from AWS_SHARED_CREDENTIALS_FILE is not opened", invocation{env: []string{"AWS_SHARED_CREDENTIALS_FILE=/nonexistent/creds"}}, false, "", "/nonexistent/creds", "s3.credentials_file", "s3.credentials_file ($AWS_SHARED_CREDENTIALS_FILE): m", ""},
		{"file from --credentials-file", invocation{args: []string{"--credentials-file", "/nonexistent/creds"}}, false, "", "/nonexistent/creds", "s3.credentials_file", "s3.credentials_file (--credentials-file): m", ""},
		{"keys from the environment", invocation{env: []string{"AWS_ACCESS_KEY_ID=AKID", "AWS_SECRET_ACCESS_KEY=s3cr3t-value", "AWS_PROFILE=ci"}}, false, "ci", "", "s3.profile", "s3.profile ($AWS_PROFILE): m", "$AWS_ACCESS_KEY_ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isolate(t)
			if tt.homeCreds {
				home := os.Getenv("HOME")
				if err := os.MkdirAll(filepath.Join(home, ".aws"), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(home, ".aws", "credentials"), []byte(creds), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			c, err := load(t, tt.inv)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.NamedProfile(); got != tt.wantNamed {
				t.Errorf("NamedProfile() = %q, want %q", got, tt.wantNamed)
			}
			if c.S3.CredentialsFile != tt.wantFile {
				t.Errorf("CredentialsFile = %q, want %q", c.S3.CredentialsFile, tt.wantFile)
			}
			if tt.wantKeyFrom == "" && (c.S3.AccessKey != "" || c.S3.SecretKey != "") {
				t.Errorf("Load read keys %q: the credentials file is objstore/s3's to read", c.S3.AccessKey)
			}
			if c.S3.CredentialsSource != tt.wantKeyFrom {
				t.Errorf("CredentialsSource = %q, want %q", c.S3.CredentialsSource, tt.wantKeyFrom)
			}
			err = c.SettingError(tt.errKey, "m")
			var ke *Error
			if !errors.As(err, &ke) || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Errorf("SettingError = %v, want an *Error starting %q", err, tt.wantErr)
			}
		})
	}
}

func TestConfigFileSearchPath(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	first, second := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	if err := os.WriteFile(second, []byte("fence:\n  holder: second\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	RegisterFlags(fs, GroupAll)
	c, err := Load(Source{Flags: fs, Target: "bkt", Mountpoint: "/m", SearchPaths: []string{first, second}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if c.Fence.Holder != "second" || c.File != second {
		t.Fatalf("holder %q from %q; want the first existing file of the search path", c.Fence.Holder, c.File)
	}
	t.Setenv(EnvConfig, first)
	if err := os.WriteFile(first, []byte("fence:\n  holder: first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = Load(Source{Flags: fs, Target: "bkt", Mountpoint: "/m", SearchPaths: []string{second}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if c.Fence.Holder != "first" {
		t.Fatalf("FENCEFS_CONFIG not used: holder %q", c.Fence.Holder)
	}
}

func TestEveryOptionHasAFlagOrIsDocumentedAsPositional(t *testing.T) {
	for _, s := range settings {
		if s.Option != "" && s.Flag == "" && s.Key != "s3.prefix" {
			t.Errorf("%s: -o %s has no flag", s.Key, s.Option)
		}
		if s.Secret() && (s.Option != "" || s.Flag != "") {
			t.Errorf("%s is a credential but has a flag or option", s.Key)
		}
		if len(s.Env) == 0 {
			t.Errorf("%s has no environment variable", s.Key)
		}
	}
}

// TestDocsListEverySetting keeps docs/CLI.md in step with the settings table.
func TestDocsListEverySetting(t *testing.T) {
	b, err := os.ReadFile("../docs/CLI.md")
	if err != nil {
		t.Fatalf("docs/CLI.md: %v", err)
	}
	doc := string(b)
	for _, s := range settings {
		names := append([]string{"`" + s.Key + "`"}, s.Env...)
		if s.Option != "" {
			names = append(names, "`"+s.Option+"`")
		}
		if s.Flag != "" {
			names = append(names, "`--"+s.Flag+"`")
		}
		for _, n := range names {
			if !strings.Contains(doc, n) {
				t.Errorf("docs/CLI.md does not mention %s (setting %s)", n, s.Key)
			}
		}
	}
}
