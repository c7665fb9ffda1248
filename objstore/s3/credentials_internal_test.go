package s3

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

const testCredentials = `[default]
aws_access_key_id = DEFKEY
aws_secret_access_key = defsecret

[ci]
aws_access_key_id=CIKEY
aws_secret_access_key=cisecret
aws_session_token=citoken

[profile old-style]
aws_access_key_id = OLDKEY
aws_secret_access_key = oldsecret

[half]
aws_access_key_id = HALFKEY

[empty]
`

// isolateCredentials clears the variables resolveCredentials reads, turns
// the instance metadata service off and gives the test a fresh HOME; it
// returns HOME.
func isolateCredentials(t *testing.T) string {
	t.Helper()
	for _, e := range []string{"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_SESSION_TOKEN",
		"MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD", "MINIO_ACCESS_KEY", "MINIO_SECRET_KEY",
		"AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME", "AWS_REGION",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"} {
		t.Setenv(e, "")
	}
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	home := t.TempDir()
	t.Setenv("HOME", home)
	return home
}

// lookupCredentials resolves cfg's credentials as New does, with the
// real clock, and says where they came from.
func lookupCredentials(cfg Config) (*credentials.Credentials, string, error) {
	f, err := resolveCredentials(cfg, http.DefaultClient, nil, time.Now)
	return f.creds, f.from, err
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCredentialsLookupOrderAndSource: static keys, then the environment,
// then the shared credentials file; and where they came from.
func TestCredentialsLookupOrderAndSource(t *testing.T) {
	for _, tc := range []struct {
		name      string
		env       []string // K=V
		homeFile  bool     // write testCredentials to ~/.aws/credentials
		namedFile bool     // write testCredentials elsewhere and name it
		cfg       Config
		wantKey   string // "" means anonymous
		wantToken string
		wantFrom  string // "HOME" and "FILE" are replaced by the paths
	}{
		{"static keys win over the environment and the file", []string{"AWS_ACCESS_KEY_ID=ENVKEY", "AWS_SECRET_ACCESS_KEY=envsecret"}, true, false,
			Config{AccessKey: "STATIC", SecretKey: "s"}, "STATIC", "", "static keys"},
		{"AWS variables win over the file", []string{"AWS_ACCESS_KEY_ID=ENVKEY", "AWS_SECRET_ACCESS_KEY=envsecret"}, true, false,
			Config{}, "ENVKEY", "", "$AWS_ACCESS_KEY_ID"},
		{"AWS variables win over a named profile", []string{"AWS_ACCESS_KEY_ID=ENVKEY", "AWS_SECRET_ACCESS_KEY=envsecret"}, false, true,
			Config{Profile: "ci"}, "ENVKEY", "", "$AWS_ACCESS_KEY_ID"},
		{"MinIO variables when nothing is named", []string{"MINIO_ROOT_USER=MINIOKEY", "MINIO_ROOT_PASSWORD=miniosecret"}, true, false,
			Config{}, "MINIOKEY", "", "$MINIO_ROOT_USER"},
		{"a named profile wins over the MinIO variables", []string{"MINIO_ROOT_USER=MINIOKEY", "MINIO_ROOT_PASSWORD=miniosecret"}, false, true,
			Config{Profile: "ci"}, "CIKEY", "citoken", "FILE [ci]"},
		{"~/.aws/credentials [default] by default", nil, true, false,
			Config{}, "DEFKEY", "", "HOME/.aws/credentials [default]"},
		{"a profile of ~/.aws/credentials", nil, true, false,
			Config{Profile: "ci"}, "CIKEY", "citoken", "HOME/.aws/credentials [ci]"},
		{"a named file, default profile", nil, false, true,
			Config{}, "DEFKEY", "", "FILE [default]"},
		{"a [profile NAME] section", nil, false, true,
			Config{Profile: "old-style"}, "OLDKEY", "", "FILE [old-style]"},
		{"AWS_PROFILE is not read here (the caller passes Profile)", []string{"AWS_PROFILE=ci"}, true, false,
			Config{}, "DEFKEY", "", "HOME/.aws/credentials [default]"},
		{"no ~/.aws/credentials is anonymous", nil, false, false,
			Config{}, "", "", ""},
		{"a named profile without keys is anonymous", nil, false, true,
			Config{Profile: "empty"}, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := isolateCredentials(t)
			for _, kv := range tc.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			if tc.homeFile {
				writeFile(t, filepath.Join(home, ".aws", "credentials"), testCredentials)
			}
			cfg := tc.cfg
			file := "-"
			if tc.namedFile {
				file = writeFile(t, filepath.Join(t.TempDir(), "creds"), testCredentials)
				cfg.CredentialsFile = file
			}
			creds, from, err := lookupCredentials(cfg)
			if err != nil {
				t.Fatal(err)
			}
			v, err := creds.GetWithContext(nil)
			if err != nil {
				t.Fatal(err)
			}
			if v.AccessKeyID != tc.wantKey || v.SessionToken != tc.wantToken {
				t.Errorf("credentials %q (token %q), want %q (token %q)", v.AccessKeyID, v.SessionToken, tc.wantKey, tc.wantToken)
			}
			want := strings.NewReplacer("HOME", home, "FILE", file).Replace(tc.wantFrom)
			if from != want {
				t.Errorf("source %q, want %q", from, want)
			}
		})
	}
}

// TestRemovedCredentialsFileKeepsTheKeysReadBefore: a credentials file
// removed while mounted (a Secret being swapped) leaves the keys read
// before in use.
func TestRemovedCredentialsFileKeepsTheKeysReadBefore(t *testing.T) {
	isolateCredentials(t)
	file := writeFile(t, filepath.Join(t.TempDir(), "creds"), testCredentials)
	creds, _, err := lookupCredentials(Config{CredentialsFile: file, Profile: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		v, err := creds.GetWithContext(nil)
		if err != nil || v.AccessKeyID != "CIKEY" || v.SessionToken != "citoken" {
			t.Fatalf("after the file was removed: %q (token %q), %v; want the keys read before", v.AccessKeyID, v.SessionToken, err)
		}
	}
}

// TestUnusableNamedCredentialsAreOneLineErrors: a named file that cannot be
// read, or a profile it does not hold, is a *CredentialsError naming the
// setting, never anonymous access; so is a broken ~/.aws/credentials.
func TestUnusableNamedCredentialsAreOneLineErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		homeFile string // content of ~/.aws/credentials ("" none)
		file     string // content of a named file; "-" names a missing one, "/" a directory, "" names none
		profile  string
		wantKey  string
		want     []string // "FILE" and "HOME" replaced by the paths
	}{
		{"missing named file", "", "-", "", "s3.credentials_file", []string{"cannot read FILE", "no such file"}},
		{"missing named file with a profile", "", "-", "ci", "s3.credentials_file", []string{"cannot read FILE"}},
		{"named file is a directory", "", "/", "", "s3.credentials_file", []string{"cannot read FILE", "directory"}},
		{"profile not in the named file", "", testCredentials, "nope", "s3.profile", []string{`profile "nope" not found in FILE`}},
		{"default profile not in the named file", "", "[ci]\naws_access_key_id=A\naws_secret_access_key=B\n", "", "s3.profile", []string{`profile "default" not found in FILE`}},
		{"profile not in ~/.aws/credentials", testCredentials, "", "nope", "s3.profile", []string{`profile "nope" not found in HOME/.aws/credentials`}},
		{"profile without ~/.aws/credentials", "", "", "ci", "s3.profile", []string{`profile "ci" not found`, "HOME/.aws/credentials does not exist"}},
		{"profile with half a key pair", "", testCredentials, "half", "s3.profile", []string{`profile "half" in FILE`, "partial"}},
		{"~/.aws/credentials is a directory", "/", "", "", "s3.credentials_file", []string{"cannot read HOME/.aws/credentials"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := isolateCredentials(t)
			homeCreds := filepath.Join(home, ".aws", "credentials")
			switch tc.homeFile {
			case "":
			case "/":
				if err := os.MkdirAll(homeCreds, 0o700); err != nil {
					t.Fatal(err)
				}
			default:
				writeFile(t, homeCreds, tc.homeFile)
			}
			cfg := Config{Profile: tc.profile}
			if tc.file != "" {
				cfg.CredentialsFile = filepath.Join(t.TempDir(), "creds")
				switch tc.file {
				case "-":
				case "/":
					if err := os.Mkdir(cfg.CredentialsFile, 0o700); err != nil {
						t.Fatal(err)
					}
				default:
					writeFile(t, cfg.CredentialsFile, tc.file)
				}
			}
			_, _, err := lookupCredentials(cfg)
			var ce *CredentialsError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a *CredentialsError", err)
			}
			if ce.Key != tc.wantKey {
				t.Errorf("key %q, want %q (%v)", ce.Key, tc.wantKey, err)
			}
			if !errors.Is(err, objstore.ErrInvalid) {
				t.Errorf("%v is not objstore.ErrInvalid", err)
			}
			for _, w := range tc.want {
				w = strings.NewReplacer("FILE", cfg.CredentialsFile, "HOME", home).Replace(w)
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans several lines: %q", err)
			}
		})
	}
}

// TestNewReportsUnusableCredentialsBeforeAnyRequest: New resolves the
// credentials eagerly, so a bad profile is reported as such even when the
// endpoint does not answer (and the caller can refuse to mount at once).
func TestNewReportsUnusableCredentialsBeforeAnyRequest(t *testing.T) {
	isolateCredentials(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := New(ctx, Config{Endpoint: "http://127.0.0.1:1", Bucket: "b", Profile: "nope", MaxRetries: -1})
	var ce *CredentialsError
	if !errors.As(err, &ce) || ce.Key != "s3.profile" {
		t.Fatalf("got %v, want the s3.profile *CredentialsError", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("New took %v: it sent requests before checking the credentials", d)
	}
}
