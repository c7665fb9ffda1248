package config

import (
	"net"
	"strconv"
	"strings"
	"time"
)

// GroupZooKeeper is the ZooKeeper connection of `fencefs run
// --zookeeper`. It is not in GroupAll: a mount has no use for it.
const GroupZooKeeper Group = 1 << 17

// DefaultZooKeeperPrefix is the default of zookeeper.prefix (the same as
// lease.DefaultZooKeeperPrefix).
const DefaultZooKeeperPrefix = "/fencefs/elections"

// zkSettings are the keys zookeeper.*, appended to the table at init so
// that the config file accepts them and `fencefs run` registers their
// flags.
var zkSettings = []Setting{
	{Key: "zookeeper.servers", Flag: "zookeeper", Env: []string{"FENCEFS_ZOOKEEPER_SERVERS"}, Group: GroupZooKeeper,
		Usage: "elect the leader in the ZooKeeper ensemble at these servers (HOST:PORT[,HOST:PORT…]) instead of the S3 lease; --ttl is the session timeout"},
	{Key: "zookeeper.prefix", Flag: "zookeeper-prefix", Env: []string{"FENCEFS_ZOOKEEPER_PREFIX"}, Default: DefaultZooKeeperPrefix, Group: GroupZooKeeper,
		Usage: "ZooKeeper path of the elections (also the place for a chroot): the election NAME lives at PREFIX/NAME"},
	{Key: "zookeeper.username", Flag: "zookeeper-username", Env: []string{"FENCEFS_ZOOKEEPER_USERNAME"}, Group: GroupZooKeeper,
		Usage: "ZooKeeper digest user (its password from FENCEFS_ZOOKEEPER_PASSWORD or zookeeper.password_file); the znodes created are then this user's alone"},
	{Key: "zookeeper.password", Env: []string{"FENCEFS_ZOOKEEPER_PASSWORD"}, Group: GroupZooKeeper, kind: kindSecret,
		Usage: "ZooKeeper digest password (environment or config file only)"},
	{Key: "zookeeper.password_file", Flag: "zookeeper-password-file", Env: []string{"FENCEFS_ZOOKEEPER_PASSWORD_FILE"}, Group: GroupZooKeeper,
		Usage: "file holding the ZooKeeper digest password (trailing newline ignored)"},
	{Key: "zookeeper.dial_timeout", Flag: "zookeeper-dial-timeout", Env: []string{"FENCEFS_ZOOKEEPER_DIAL_TIMEOUT"}, Default: "5s", Group: GroupZooKeeper, kind: kindDuration,
		Usage: "how long to try to get a ZooKeeper session at start before giving up"},
}

func init() { settings = append(settings, zkSettings...) }

// ZooKeeper is the ZooKeeper connection of `fencefs run --zookeeper`
// (keys zookeeper.*).
type ZooKeeper struct {
	// Servers are HOST:PORT; none means: elect with the S3 lease.
	Servers     []string
	Prefix      string // an absolute znode path, without a trailing "/"
	Username    string
	Password    Secret // from zookeeper.password or zookeeper.password_file
	DialTimeout time.Duration
}

// Enabled reports whether ZooKeeper servers are configured.
func (z *ZooKeeper) Enabled() bool { return len(z.Servers) > 0 }

// Digest returns "user:password" for ZooKeeper's digest scheme, or "".
func (z *ZooKeeper) Digest() string {
	if z.Username == "" {
		return ""
	}
	return z.Username + ":" + string(z.Password)
}

// Secrets returns the non-empty secret values, for redacting logs.
func (z *ZooKeeper) Secrets() []string {
	if z.Password == "" {
		return nil
	}
	return []string{string(z.Password)}
}

// LoadZooKeeper reads the zookeeper.* settings with the same precedence as
// Load and validates them. Errors are *Error values naming the key and
// where it was set; they never contain the password.
func LoadZooKeeper(src Source) (*ZooKeeper, error) {
	l := newLoader(src)
	if err := l.read(checkEnvPrefix("FENCEFS_ZOOKEEPER_", zkSettings), zkSettings); err != nil {
		return nil, err
	}
	z, err := l.buildZooKeeper()
	if err != nil {
		return nil, l.withOrigin(err)
	}
	return z, nil
}

// buildZooKeeper reads and checks the zookeeper.* values.
func (l *loader) buildZooKeeper() (*ZooKeeper, error) {
	str := func(key string) string { return strings.TrimSpace(l.v.GetString(key)) }
	z := &ZooKeeper{Username: str("zookeeper.username")}
	raw := str("zookeeper.servers")
	if list, chroot, ok := strings.Cut(raw, "/"); ok {
		return nil, keyErr("zookeeper.servers", "%q names a chroot (/%s): give the path as zookeeper.prefix instead (--zookeeper %s --zookeeper-prefix /%s/fencefs/elections)", raw, chroot, list, strings.TrimSuffix(chroot, "/"))
	}
	for _, srv := range strings.Split(raw, ",") {
		if srv = strings.TrimSpace(srv); srv == "" {
			continue
		}
		host, port, err := net.SplitHostPort(srv)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			return nil, keyErr("zookeeper.servers", "%q is not a ZooKeeper server (accepted: HOST:PORT, comma-separated, such as zk1:2181,zk2:2181)", srv)
		}
		z.Servers = append(z.Servers, srv)
	}
	raw = str("zookeeper.dial_timeout")
	d, err := time.ParseDuration(raw)
	if err != nil || d <= 0 {
		return nil, keyErr("zookeeper.dial_timeout", "%q is not a positive duration (accepted: such as 5s)", raw)
	}
	z.DialTimeout = d
	if z.Prefix, err = zkPath(str("zookeeper.prefix")); err != nil {
		return nil, err
	}
	if z.Password, err = l.password("zookeeper", "ZooKeeper"); err != nil {
		return nil, err
	}
	if strings.Contains(z.Username, ":") {
		return nil, keyErr("zookeeper.username", "%q holds a colon, which ZooKeeper's digest scheme cannot carry in a user name", z.Username)
	}
	return z, nil
}

// zkPath checks an election prefix: an absolute znode path ZooKeeper
// accepts, outside its own /zookeeper tree; a trailing "/" is dropped.
func zkPath(p string) (string, error) {
	bad := func(why string) (string, error) {
		return "", keyErr("zookeeper.prefix", "%q is not a usable znode path: %s (accepted: such as %s)", p, why, DefaultZooKeeperPrefix)
	}
	if !strings.HasPrefix(p, "/") {
		return bad("it must start with /")
	}
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return bad("the root itself")
	}
	for _, part := range strings.Split(p[1:], "/") {
		switch {
		case part == "":
			return bad("empty component (//)")
		case part == "." || part == "..":
			return bad("relative component (. or ..)")
		}
		for _, r := range part {
			if r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff) {
				return bad("a character ZooKeeper refuses in names")
			}
		}
	}
	if p == "/zookeeper" || strings.HasPrefix(p, "/zookeeper/") {
		return bad("/zookeeper is ZooKeeper's own")
	}
	return p, nil
}
