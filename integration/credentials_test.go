package integration

// Credentials that rotate under a live mount (issue 42): a Kubernetes
// Secret or a credentials refresher rewrites the shared credentials file,
// and the old keys are then removed from the server. Before, the mount
// never read the file again: 115 of 150 closes failed with EIO and their
// data was dropped.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
)

func TestCredentialsFileRotationUnderAWriterLosesNoClose(t *testing.T) {
	gw := gateway.ForKind(t, gateway.MinIO)
	bucket := gateway.NewBucket(t, gw)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	users := [][2]string{{"WRITER1", "secret-of-writer-one"}, {"WRITER2", "secret-of-writer-two"}}
	for _, u := range users {
		if err := gw.AddUser(ctx, u[0], u[1], "readwrite"); err != nil {
			t.Fatalf("add MinIO user: %v", err)
		}
	}
	file := filepath.Join(t.TempDir(), "credentials")
	write := func(u [2]string) {
		t.Helper()
		body := "[app]\naws_access_key_id = " + u[0] + "\naws_secret_access_key = " + u[1] + "\n"
		// As a Secret's update: a new file renamed into place.
		if err := os.WriteFile(file+".new", []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".new", file); err != nil {
			t.Fatal(err)
		}
	}
	write(users[0])
	// No keys in the environment: only the file.
	fs := harness.MountWith(t, gw, bucket, harness.Options{Env: []string{"AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY="}},
		"--token", "1", "--credentials-file", file, "--profile", "app")
	if log := fs.Log(); !strings.Contains(log, file+" [app]") {
		t.Fatalf("the mount does not say it uses %s [app]; log:\n%s", file, log)
	}

	const closes = 40
	var failed []string
	for i := 0; i < closes; i++ {
		switch i {
		case 10:
			write(users[1])
		case 15:
			if err := gw.RemoveUser(ctx, users[0][0]); err != nil {
				t.Fatal(err)
			}
		}
		f, err := os.OpenFile(fs.Path("report.txt"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err == nil {
			_, err = fmt.Fprintf(f, "close %d\n", i)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("%d: %v", i, err))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d closes failed: %s\nlog:\n%s", len(failed), closes, strings.Join(failed, "; "), fs.Log())
	}
	obj, err := gw.Client().GetObject(ctx, bucket, "report.txt", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	obj.Close()
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("close %d\n", closes-1); string(got) != want {
		t.Fatalf("the bucket holds %q, want %q", got, want)
	}
	log := fs.Log()
	if !strings.Contains(log, "its new keys are in use") {
		t.Errorf("the mount did not log that it read the new keys; log:\n%s", log)
	}
	for _, bad := range []string{"they are lost", users[0][1], users[1][1]} {
		if strings.Contains(log, bad) {
			t.Errorf("the mount's log holds %q", bad)
		}
	}
}
