package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
)

// TestNoCredentialsAnywhereNamesEveryPlaceTried: the mount helper runs
// without HOME; the shared credentials file is then looked for in the
// user database's home, and a refusal of anonymous access names, on one
// line, every place where credentials were looked for.
func TestNoCredentialsAnywhereNamesEveryPlaceTried(t *testing.T) {
	u, err := user.Current()
	if err != nil {
		gateway.SkipOrFail(t, "no user database entry: %v", err)
	}
	homeCreds := filepath.Join(u.HomeDir, ".aws", "credentials")
	if _, err := os.Stat(homeCreds); err == nil {
		gateway.SkipOrFail(t, "%s exists on this machine: the test needs a home without credentials", homeCreds)
	}
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	conf := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(conf, []byte("s3:\n  path_style: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range cleanEnv(t) {
		if !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			env = append(env, kv)
		}
	}
	env = append(env, "FENCEFS_CONFIG="+conf, "AWS_EC2_METADATA_DISABLED=true", "AWS_REGION="+gw.Region)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, harness.Binary(t), "probe", bucket, "--endpoint", gw.Endpoint)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	oneErrorLine(t, r, "fencefs: probe: ",
		`access denied to bucket "`+bucket+`" at `+gw.Endpoint,
		"credentials from none found; tried $FENCEFS_S3_ACCESS_KEY (unset), s3.access_key in "+conf+" (not set), "+
			"$AWS_ACCESS_KEY_ID (unset), $MINIO_ROOT_USER and $MINIO_ACCESS_KEY (unset), web identity (no token file set), "+
			homeCreds+" [default] (no such file), "+
			"container credentials ($AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI unset), "+
			"EC2 instance metadata (disabled by $AWS_EC2_METADATA_DISABLED)")
	if r.code != exitFailure {
		t.Errorf("exit status %d, want %d", r.code, exitFailure)
	}
}
