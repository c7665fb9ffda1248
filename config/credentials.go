package config

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// sharedCredentials fills the credentials from the AWS shared credentials
// file (s3.credentials_file, default ~/.aws/credentials), profile s3.profile.
// A missing default file is not an error (anonymous access); a missing named
// file or profile, or a file that cannot be read to the end, is.
//
// objstore/s3 falls back on minio-go's credential chain only when the
// Config has no credentials; this reader stays so that a bad profile or
// file is a configuration error at Load (exit 2, naming the key and where
// it was set), the profile and file can come from --profile, -o, the
// FENCEFS_S3_* variables or the config file (which minio-go's chain does
// not see), and error messages can say which file and profile the
// credentials came from (Config.S3.CredentialsSource).
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
	vals, found, err := parseINISection(f, profile)
	if err != nil {
		return l.withOrigin(keyErr("s3.credentials_file", "cannot read %s: %v", path, err))
	}
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

// parseINISection returns the key = value pairs of [section] (or
// [profile section]) in an INI file, whether the section was found, and
// the error that stopped reading, if any.
func parseINISection(r io.Reader, section string) (map[string]string, bool, error) {
	vals := map[string]string{}
	in, found := false, false
	sc := bufio.NewScanner(r)
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
		if k, v, ok := strings.Cut(line, "="); ok {
			vals[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, false, err
	}
	return vals, found, nil
}
