package config

import (
	"errors"
	"os"
	"strings"
)

// What the coordinators' sections (etcd.*, zookeeper.*) share: refusing
// unknown variables of the section, and reading a password from the
// environment, the config file or a file, never from a flag.

// checkEnvPrefix returns a check that refuses the environment variables
// starting with prefix that name no setting of list.
func checkEnvPrefix(prefix string, list []Setting) func() error {
	return func() error {
		var acc []string
		known := map[string]bool{}
		for _, s := range list {
			acc = append(acc, s.Env...)
			for _, v := range s.Env {
				known[v] = true
			}
		}
		for _, kv := range os.Environ() {
			name, _, _ := strings.Cut(kv, "=")
			if strings.HasPrefix(name, prefix) && !known[name] {
				return keyErr(name, "unknown environment variable (accepted: %s)", strings.Join(acc, ", "))
			}
		}
		return nil
	}
}

// password reads SECTION.password or SECTION.password_file (one of them)
// and checks it against SECTION.username: a password needs a user, a user
// a password. noun names the coordinator in messages ("etcd").
func (l *loader) password(section, noun string) (Secret, error) {
	pwKey, fileKey, userKey := section+".password", section+".password_file", section+".username"
	pw := strings.TrimSpace(l.v.GetString(pwKey))
	file := strings.TrimSpace(l.v.GetString(fileKey))
	user := strings.TrimSpace(l.v.GetString(userKey))
	switch {
	case pw != "" && file != "":
		return "", keyErr(pwKey, "set together with %s (accepted: one of them)", fileKey)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", keyErr(fileKey, "cannot read %s: %v", file, errors.Unwrap(err))
		}
		pw = strings.TrimRight(string(b), "\r\n")
		if pw == "" {
			return "", keyErr(fileKey, "%s is empty", file)
		}
	}
	switch {
	case user == "" && pw != "":
		article := "a"
		if strings.ContainsRune("aeiouAEIOU", rune(noun[0])) {
			article = "an"
		}
		return "", keyErr(userKey, "missing while %s %s password is set", article, noun)
	case user != "" && pw == "":
		env, flag := mustSetting(pwKey).Env[0], mustSetting(fileKey).Flag
		return "", keyErr(pwKey, "missing for %s user %q (set %s, or %s / --%s; never on the command line)", noun, user, env, fileKey, flag)
	}
	return Secret(pw), nil
}
