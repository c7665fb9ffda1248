package s3_test

// Credentials that rotate under a running store, on a real MinIO server:
// its users are created and removed through its admin API, so the keys a
// store used are really refused afterwards.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/s3"
	"github.com/fencefs/fencefs/objstore/storetest"
)

// minioUsers starts MinIO and creates n users with the readwrite policy;
// their keys are "USERi"/"secret-of-useri-…" (all the same length).
func minioUsers(t *testing.T, n int) (*gateway.Gateway, [][2]string) {
	t.Helper()
	gw := gateway.ForKind(t, gateway.MinIO)
	ctx := ctxT(t)
	var users [][2]string
	for i := 1; i <= n; i++ {
		u := [2]string{fmt.Sprintf("USER%d", i), fmt.Sprintf("secret-of-user%d-0123456789", i)}
		if err := gw.AddUser(ctx, u[0], u[1], "readwrite"); err != nil {
			t.Fatalf("add MinIO user: %v", err)
		}
		users = append(users, u)
	}
	return gw, users
}

func credentialsFile(user [2]string) string {
	return "[default]\naws_access_key_id = " + user[0] + "\naws_secret_access_key = " + user[1] + "\n"
}

// replaceFile puts content at path as a Kubernetes Secret update does: a
// new file renamed over the old one.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".new", []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

func fileStore(t *testing.T, gw *gateway.Gateway, file string, set func(*s3.Config)) *s3.Store {
	t.Helper()
	for _, e := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "MINIO_ROOT_USER", "MINIO_ACCESS_KEY"} {
		t.Setenv(e, "")
	}
	cfg := config(t, gw)
	cfg.AccessKey, cfg.SecretKey, cfg.CredentialsFile = "", "", file
	if set != nil {
		set(&cfg)
	}
	return newStore(t, cfg)
}

// TestCredentialsFileRotationWhileWritingOnMinIO: the credentials file is
// rewritten with a second user's keys and the first user is then removed,
// while conditional writes go on: none fails, each lands once.
func TestCredentialsFileRotationWhileWritingOnMinIO(t *testing.T) {
	gw, users := minioUsers(t, 2)
	file := filepath.Join(t.TempDir(), "credentials")
	replaceFile(t, file, credentialsFile(users[0]))
	s := fileStore(t, gw, file, nil)
	ctx := ctxT(t)
	var etag string
	for i := 0; i < 60; i++ {
		switch i {
		case 20:
			replaceFile(t, file, credentialsFile(users[1]))
		case 25:
			if err := gw.RemoveUser(ctx, users[0][0]); err != nil {
				t.Fatal(err)
			}
		}
		cond := objstore.Condition{IfNoneMatch: true}
		if etag != "" {
			cond = objstore.Condition{IfMatch: etag}
		}
		info, err := put(ctx, s, "k", fmt.Sprintf("write %d", i), objstore.PutOptions{Cond: cond})
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		etag = info.ETag
	}
	got, _ := storetest.ReadAll(t, ctx, s, "k", objstore.GetOptions{})
	if string(got) != "write 59" {
		t.Fatalf("the object holds %q, want the last write", got)
	}
}

// TestRefusedCredentialsAreReadAgainOnMinIO: a file rewritten so that its
// size, time and identity look unchanged is not read again until the
// server refuses the old keys; that refusal is retried once with the file
// read again, and the write lands.
func TestRefusedCredentialsAreReadAgainOnMinIO(t *testing.T) {
	gw, users := minioUsers(t, 2)
	file := filepath.Join(t.TempDir(), "credentials")
	replaceFile(t, file, credentialsFile(users[0]))
	var logged strings.Builder
	s := fileStore(t, gw, file, func(c *s3.Config) { c.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: &logged}, nil)) })
	ctx := ctxT(t)
	info, err := put(ctx, s, "k", "by user 1", objstore.PutOptions{Cond: objstore.Condition{IfNoneMatch: true}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(credentialsFile(users[1])), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(file, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := gw.RemoveUser(ctx, users[0][0]); err != nil {
		t.Fatal(err)
	}
	if _, err := put(ctx, s, "k", "by user 2", objstore.PutOptions{Cond: objstore.Condition{IfMatch: info.ETag}}); err != nil {
		t.Fatalf("the write after user 1 was removed: %v", err)
	}
	got, _ := storetest.ReadAll(t, ctx, s, "k", objstore.GetOptions{})
	if string(got) != "by user 2" {
		t.Fatalf("the object holds %q", got)
	}
	if log := logged.String(); !strings.Contains(log, "credentials refused; retrying once") || !strings.Contains(log, "InvalidAccessKeyId") {
		t.Fatalf("the write was not a refusal retried once; log:\n%s", log)
	}
}

// lockedWriter serializes a log's writes.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestAssumeRoleOnMinIO: MinIO's root user and an ordinary user exchange
// their keys for temporary ones by AssumeRole at the S3 endpoint; when the
// user behind temporary credentials is removed and the credentials file
// names another, the refused request is retried with a new AssumeRole made
// with the new keys.
func TestAssumeRoleOnMinIO(t *testing.T) {
	gw, users := minioUsers(t, 2)
	ctx := ctxT(t)

	t.Run("root keys", func(t *testing.T) {
		cfg := config(t, gw)
		cfg.AssumeRole = true
		s := newStore(t, cfg)
		if got, want := s.CredentialsSource(), "AssumeRole (STS at "+gw.Endpoint+") with keys from static keys"; got != want {
			t.Fatalf("CredentialsSource %q, want %q", got, want)
		}
		storetest.MustPut(t, ctx, s, "root", []byte("x"), objstore.PutOptions{})
	})

	t.Run("a user's keys from a file that rotates", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "credentials")
		replaceFile(t, file, credentialsFile(users[0]))
		s := fileStore(t, gw, file, func(c *s3.Config) { c.AssumeRole = true })
		if got := s.CredentialsSource(); !strings.HasPrefix(got, "AssumeRole") || !strings.HasSuffix(got, file+" [default]") {
			t.Fatalf("CredentialsSource %q", got)
		}
		storetest.MustPut(t, ctx, s, "user", []byte("by user 1"), objstore.PutOptions{})
		replaceFile(t, file, credentialsFile(users[1]))
		if err := gw.RemoveUser(ctx, users[0][0]); err != nil {
			t.Fatal(err)
		}
		// The temporary keys of user 1 are refused now; the retry assumes
		// the role again with user 2's keys.
		storetest.MustPut(t, ctx, s, "user", []byte("by user 2"), objstore.PutOptions{})
	})

	t.Run("refused AssumeRole", func(t *testing.T) {
		cfg := config(t, gw)
		cfg.AccessKey, cfg.SecretKey, cfg.AssumeRole = users[1][0], "not-the-secret", true
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := s3.New(ctx, cfg)
		if !errors.Is(err, objstore.ErrAuth) || !strings.Contains(err.Error(), "getting credentials from AssumeRole") {
			t.Fatalf("got %v, want ErrAuth from the STS refusal", err)
		}
		if from, _ := s3.CredentialsSourceOf(err); !strings.HasPrefix(from, "AssumeRole") {
			t.Fatalf("CredentialsSourceOf %q", from)
		}
	})
}
