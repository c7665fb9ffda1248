package config

import (
	"crypto/x509"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// GroupEtcd is the etcd connection of `fencefs run --etcd`. It is not in
// GroupAll: a mount has no use for it.
const GroupEtcd Group = 1 << 16

// DefaultEtcdPrefix is the default of etcd.prefix (the same as
// lease.DefaultEtcdPrefix).
const DefaultEtcdPrefix = "/fencefs/elections/"

// etcdSettings are the keys etcd.*, appended to the table at init so that
// the config file accepts them and `fencefs run` registers their flags.
var etcdSettings = []Setting{
	{Key: "etcd.endpoints", Flag: "etcd", Env: []string{"FENCEFS_ETCD_ENDPOINTS"}, Group: GroupEtcd,
		Usage: "elect the leader in etcd at these endpoints (URL[,URL…], http:// or https://) instead of the S3 lease"},
	{Key: "etcd.ca_file", Flag: "etcd-ca-file", Env: []string{"FENCEFS_ETCD_CA_FILE"}, Group: GroupEtcd,
		Usage: "PEM file of CA certificates to trust for https etcd endpoints (default: the system's)"},
	{Key: "etcd.cert_file", Flag: "etcd-cert-file", Env: []string{"FENCEFS_ETCD_CERT_FILE"}, Group: GroupEtcd,
		Usage: "PEM client certificate for etcd (with etcd.key_file)"},
	{Key: "etcd.key_file", Flag: "etcd-key-file", Env: []string{"FENCEFS_ETCD_KEY_FILE"}, Group: GroupEtcd,
		Usage: "PEM key of the etcd client certificate"},
	{Key: "etcd.username", Flag: "etcd-username", Env: []string{"FENCEFS_ETCD_USERNAME"}, Group: GroupEtcd,
		Usage: "etcd user (its password from FENCEFS_ETCD_PASSWORD or etcd.password_file)"},
	{Key: "etcd.password", Env: []string{"FENCEFS_ETCD_PASSWORD"}, Group: GroupEtcd, kind: kindSecret,
		Usage: "etcd password (environment or config file only)"},
	{Key: "etcd.password_file", Flag: "etcd-password-file", Env: []string{"FENCEFS_ETCD_PASSWORD_FILE"}, Group: GroupEtcd,
		Usage: "file holding the etcd password (trailing newline ignored)"},
	{Key: "etcd.dial_timeout", Flag: "etcd-dial-timeout", Env: []string{"FENCEFS_ETCD_DIAL_TIMEOUT"}, Default: "5s", Group: GroupEtcd, kind: kindDuration,
		Usage: "how long to try to reach etcd at start before giving up"},
	{Key: "etcd.prefix", Flag: "etcd-prefix", Env: []string{"FENCEFS_ETCD_PREFIX"}, Default: DefaultEtcdPrefix, Group: GroupEtcd,
		Usage: "etcd key prefix of the elections: the election NAME campaigns under PREFIX/NAME/"},
}

func init() { settings = append(settings, etcdSettings...) }

// Etcd is the etcd connection of `fencefs run --etcd` (keys etcd.*).
type Etcd struct {
	// Endpoints are the client URLs; none means: elect with the S3 lease.
	Endpoints                 []string
	CAFile, CertFile, KeyFile string // absolute paths, "" = none
	Username                  string
	Password                  Secret // from etcd.password or etcd.password_file
	DialTimeout               time.Duration
	Prefix                    string // ends in "/"
}

// Enabled reports whether etcd endpoints are configured.
func (e *Etcd) Enabled() bool { return len(e.Endpoints) > 0 }

// TLS reports whether the connection uses TLS: an https endpoint, a CA or a
// client certificate.
func (e *Etcd) TLS() bool {
	for _, ep := range e.Endpoints {
		if strings.HasPrefix(ep, "https://") {
			return true
		}
	}
	return e.CAFile != "" || e.CertFile != ""
}

// Secrets returns the non-empty secret values, for redacting logs.
func (e *Etcd) Secrets() []string {
	if e.Password == "" {
		return nil
	}
	return []string{string(e.Password)}
}

// LoadEtcd reads the etcd.* settings with the same precedence as Load
// (defaults < config file < environment < flags; the file is found the
// same way) and validates them. Errors are *Error values naming the key and
// where it was set; they never contain the password.
func LoadEtcd(src Source) (*Etcd, error) {
	l := newLoader(src)
	if err := l.read(checkEnvPrefix("FENCEFS_ETCD_", etcdSettings), etcdSettings); err != nil {
		return nil, err
	}
	e, err := l.buildEtcd()
	if err != nil {
		return nil, l.withOrigin(err)
	}
	return e, nil
}

// bind gives viper the defaults, environment variables and flags of list.
func (l *loader) bind(list []Setting) error {
	for _, s := range list {
		l.v.SetDefault(s.Key, s.Default)
		if err := l.v.BindEnv(append([]string{s.Key}, s.Env...)...); err != nil {
			return err
		}
		if f := l.flag(s); f != nil {
			if err := l.v.BindPFlag(s.Key, f); err != nil {
				return err
			}
		}
	}
	return nil
}

// buildEtcd reads and checks the etcd.* values.
func (l *loader) buildEtcd() (*Etcd, error) {
	str := func(key string) string { return strings.TrimSpace(l.v.GetString(key)) }
	e := &Etcd{Username: str("etcd.username"), Prefix: str("etcd.prefix")}
	for _, ep := range strings.Split(str("etcd.endpoints"), ",") {
		if ep = strings.TrimSpace(ep); ep == "" {
			continue
		}
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.User != nil {
			return nil, keyErr("etcd.endpoints", "%q is not an etcd endpoint (accepted: http://HOST:PORT or https://HOST:PORT, comma-separated)", redactURL(ep))
		}
		e.Endpoints = append(e.Endpoints, strings.TrimSuffix(ep, "/"))
	}
	raw := str("etcd.dial_timeout")
	d, err := time.ParseDuration(raw)
	if err != nil || d <= 0 {
		return nil, keyErr("etcd.dial_timeout", "%q is not a positive duration (accepted: such as 5s)", raw)
	}
	e.DialTimeout = d
	if e.Prefix == "" {
		return nil, keyErr("etcd.prefix", "empty (accepted: a key prefix such as %s)", DefaultEtcdPrefix)
	}
	if !strings.HasSuffix(e.Prefix, "/") {
		e.Prefix += "/"
	}
	for _, f := range []struct {
		key string
		dst *string
	}{{"etcd.ca_file", &e.CAFile}, {"etcd.cert_file", &e.CertFile}, {"etcd.key_file", &e.KeyFile}} {
		if *f.dst = str(f.key); *f.dst == "" {
			continue
		}
		abs, err := filepath.Abs(*f.dst)
		if err != nil {
			return nil, keyErr(f.key, "%v", err)
		}
		if _, err := os.Stat(abs); err != nil {
			return nil, keyErr(f.key, "cannot read %s: %v", abs, errors.Unwrap(err))
		}
		*f.dst = abs
	}
	if e.CAFile != "" {
		b, err := os.ReadFile(e.CAFile)
		if err != nil {
			return nil, keyErr("etcd.ca_file", "cannot read %s: %v", e.CAFile, errors.Unwrap(err))
		}
		if !x509.NewCertPool().AppendCertsFromPEM(b) {
			return nil, keyErr("etcd.ca_file", "%s holds no PEM certificate", e.CAFile)
		}
	}
	if (e.CertFile == "") != (e.KeyFile == "") {
		if e.KeyFile == "" {
			return nil, keyErr("etcd.key_file", "missing while etcd.cert_file is set (a client certificate needs its key)")
		}
		return nil, keyErr("etcd.cert_file", "missing while etcd.key_file is set")
	}
	pw, err := l.password("etcd", "etcd")
	if err != nil {
		return nil, err
	}
	e.Password = pw
	return e, nil
}
