package main

// End-to-end tests of the fencefs binary against the real S3 gateway and real
// FUSE mounts. The binary runs in subprocesses (never in the test process).
// Without the gateway or /dev/fuse they skip locally and fail when CI is set.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
)

// TestMain builds the binary once (unless FENCEFS_BIN is set). In CI it
// also runs harness.Main's check that no mount is left behind; locally that
// check is skipped because it would unmount other packages' tests' mounts
// running at the same time (every test here checks its own mounts).
func TestMain(m *testing.M) {
	if gateway.InCI() {
		os.Exit(harness.Main(m))
	}
	if os.Getenv("FENCEFS_BIN") == "" {
		dir, err := os.MkdirTemp("", "fencefs-cmd-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		bin := filepath.Join(dir, "fencefs")
		out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
		os.Setenv("FENCEFS_BIN", bin)
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// result is the outcome of one run of the binary.
type result struct {
	stdout, stderr string
	code           int
}

// runBin runs the binary with args and env added to the environment, and
// waits for it (bounded by 2 minutes).
func runBin(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, harness.Binary(t), args...)
	cmd.Env = append(cleanEnv(t), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("run %v: %v", args, err)
	}
	return r
}

// cleanEnv is the test's environment without the variables fencefs reads,
// so that the developer's own AWS settings don't leak into the tests.
func cleanEnv(t *testing.T) []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "AWS_") || (strings.HasPrefix(name, "FENCEFS_") && name != "FENCEFS_BIN" && name != "FENCEFS_VERSITYGW") || name == "NOTIFY_SOCKET" {
			continue
		}
		out = append(out, kv)
	}
	home := t.TempDir()
	return append(out, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
}

// oneErrorLine checks that r failed with a non-zero status and exactly one
// line on stderr starting with prefix and containing every want.
func oneErrorLine(t *testing.T, r result, prefix string, want ...string) {
	t.Helper()
	if r.code == 0 {
		t.Fatalf("exit status 0, want non-zero; stdout %q stderr %q", r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	if len(lines) != 1 || lines[0] == "" {
		t.Fatalf("stderr has %d lines, want exactly one:\n%s", len(lines), r.stderr)
	}
	if !strings.HasPrefix(lines[0], prefix) {
		t.Errorf("stderr %q does not start with %q", lines[0], prefix)
	}
	for _, w := range want {
		if !strings.Contains(lines[0], w) {
			t.Errorf("stderr %q does not contain %q", lines[0], w)
		}
	}
}

func TestVersionCommandPrintsVersion(t *testing.T) {
	r := runBin(t, nil, "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "fencefs ") || !strings.Contains(r.stdout, "go1.") {
		t.Fatalf("version: status %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

func TestCommandLineErrorsGiveOneLineAndStatus2(t *testing.T) {
	mnt := t.TempDir()
	tests := []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"unknown -o option in the helper form", nil, []string{"bucket", mnt, "-o", "endpoint=http://127.0.0.1:1,colour=blue"}, []string{"fencefs: mount: ", "-o colour", "unknown mount option"}},
		{"secret as -o option", nil, []string{"bucket", mnt, "-o", "secret_key=hunter2hunter2"}, []string{"-o secret_key", "AWS_SECRET_ACCESS_KEY"}},
		{"bad token", nil, []string{"mount", "bucket", mnt, "--token", "seven"}, []string{"fencefs: mount: ", "fence.token", "auto"}},
		{"bad fence mode from env", []string{"FENCEFS_FENCE_MODE=loose"}, []string{"mount", "bucket", mnt}, []string{"fence.mode ($FENCEFS_FENCE_MODE)", "strict, fast, off"}},
		{"unknown flag", nil, []string{"mount", "bucket", mnt, "--colour", "blue"}, []string{"fencefs: mount: ", "unknown flag"}},
		{"unknown command", nil, []string{"mout", "bucket", mnt}, []string{"fencefs: unknown command"}},
		{"missing mountpoint argument", nil, []string{"mount", "bucket"}, []string{"fencefs: mount: ", "2 arg"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runBin(t, tt.env, tt.args...)
			oneErrorLine(t, r, "fencefs: ", tt.want...)
			if r.code != exitUsage {
				t.Errorf("exit status %d, want %d", r.code, exitUsage)
			}
			if strings.Contains(r.stderr, "hunter2") {
				t.Errorf("the secret was printed: %q", r.stderr)
			}
		})
	}
}

// daemonPids returns the pids of fencefs processes whose command line names
// mountpoint.
func daemonPids(bin, mountpoint string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != filepath.Base(bin) {
			continue
		}
		for _, a := range args[1:] {
			if a == mountpoint {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

func mounted(t *testing.T, dir string) bool {
	t.Helper()
	_, ok, err := mountAt(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// waitFor polls cond every 20 ms until it holds or 30 s pass (a bound on a
// wait, not a timing assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cleanupBackground makes sure nothing started for mountpoint survives the
// test: unmount (which ends the daemon), then kill any leftover process.
func cleanupBackground(t *testing.T, bin, mnt string) {
	t.Cleanup(func() {
		for i := 0; i < 20 && mounted(t, mnt); i++ {
			if exec.Command("fusermount3", "-u", mnt).Run() != nil {
				time.Sleep(100 * time.Millisecond)
			}
		}
		if mounted(t, mnt) {
			_ = exec.Command("fusermount3", "-uz", mnt).Run()
			t.Errorf("%s stayed mounted", mnt)
		}
		deadline := time.Now().Add(30 * time.Second)
		for len(daemonPids(bin, mnt)) > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		for _, pid := range daemonPids(bin, mnt) {
			t.Errorf("fencefs process %d still running after unmount; killing it", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

func TestHelperFormMountsInBackgroundReadyOnExit(t *testing.T) {
	harness.RequireFUSE(t)
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	bin := harness.Binary(t)
	tmp := t.TempDir()
	mnt := filepath.Join(tmp, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	cleanupBackground(t, bin, mnt)
	logFile := filepath.Join(tmp, "mount.log")
	// As mount.fuse3 runs a helper for an fstab line
	// "BUCKET MNT fuse.fencefs _netdev,nofail,endpoint=…,token=7,…".
	env := []string{"AWS_ACCESS_KEY_ID=" + gw.AccessKey, "AWS_SECRET_ACCESS_KEY=" + gw.SecretKey, "AWS_REGION=" + gw.Region}
	r := runBin(t, env, bucket, mnt, "-o", "rw,_netdev,nofail,x-systemd.automount,endpoint="+gw.Endpoint+",token=7,holder=bg",
		"-o", "cache_dir="+filepath.Join(tmp, "cache")+",log_file="+logFile+",log_level=debug")
	if r.code != 0 {
		log, _ := os.ReadFile(logFile)
		t.Fatalf("helper form: status %d, stderr %q; log:\n%s", r.code, r.stderr, log)
	}
	// Readiness: the parent exits only once the mount is serving.
	if !mounted(t, mnt) {
		t.Fatalf("the parent exited 0 but %s is not mounted yet", mnt)
	}
	if len(daemonPids(bin, mnt)) != 1 {
		t.Errorf("want one background fencefs process, found %v", daemonPids(bin, mnt))
	}
	body := []byte("written through a background mount")
	if err := os.WriteFile(filepath.Join(mnt, "f.txt"), body, 0o644); err != nil {
		t.Fatalf("write: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o, err := gw.Client().GetObject(ctx, bucket, "f.txt", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(o)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("object = %q, %v; want %q", got, err, body)
	}

	st := runBin(t, nil, "status", mnt)
	if st.code != 0 || !strings.Contains(st.stdout, "active") || !strings.Contains(st.stdout, "7") || !strings.Contains(st.stdout, "bg") {
		t.Fatalf("status: %d %q %q", st.code, st.stdout, st.stderr)
	}
	// An external unmount ends the background process.
	if out, err := exec.Command("fusermount3", "-u", mnt).CombinedOutput(); err != nil {
		t.Fatalf("fusermount3 -u: %v %s", err, out)
	}
	waitFor(t, "the background process to exit after unmount", func() bool { return len(daemonPids(bin, mnt)) == 0 })
	log, _ := os.ReadFile(logFile)
	if !bytes.Contains(log, []byte("mounted")) {
		t.Errorf("the log file has no mount record:\n%s", log)
	}
	if bytes.Contains(log, []byte(gw.SecretKey)) {
		t.Errorf("the debug log contains the secret key")
	}
	for _, pid := range daemonPids(bin, mnt) {
		t.Errorf("process %d still running", pid)
	}
}

func TestStatusOfANonFencefsDirectoryFails(t *testing.T) {
	r := runBin(t, nil, "status", t.TempDir())
	oneErrorLine(t, r, "fencefs: status: ", "not a fencefs mount")
}

func TestSIGTERMCommitsDirtyFileUnmountsAndExitsZero(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	fs := harness.Mount(t, gw, bucket, "--token", "3")
	f, err := os.Create(fs.Path("dirty.txt"))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	body := []byte("dirty until SIGTERM")
	if _, err := f.Write(body); err != nil {
		t.Fatalf("write: %v", err)
	}
	// f stays open: the data is only staged, not committed.
	sigtermWantsCleanStop(t, fs)
	f.Close() // the mount is gone; the error does not matter
	wantObject(t, gw, bucket, "dirty.txt", body)
}

// sigtermWantsCleanStop sends SIGTERM to fs and expects an orderly stop:
// exit status 0 within 60 s, nothing left mounted.
func sigtermWantsCleanStop(t *testing.T, fs *harness.FS) {
	t.Helper()
	if err := fs.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fs.Done():
	case <-time.After(60 * time.Second):
		t.Fatalf("fencefs did not exit within 60s of SIGTERM; log:\n%s", fs.Log())
	}
	if err := fs.ExitErr(); err != nil {
		t.Fatalf("exit after SIGTERM: %v, want status 0; log:\n%s", err, fs.Log())
	}
	if mounted(t, fs.Dir) {
		t.Fatalf("%s still mounted after SIGTERM", fs.Dir)
	}
}

// wantObject checks that the bucket holds body at key.
func wantObject(t *testing.T, gw *gateway.Gateway, bucket, key string, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o, err := gw.Client().GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(o); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("%s in the bucket = %q, %v; want %q", key, got, err, body)
	}
}

// TestSIGTERMJustAfterTheKernelMountIsANormalStop sends SIGTERM while the
// mount process is still finishing its startup (paused by a failpoint right
// after the kernel mount appeared) and a file is already being written
// through the mount: the process must stop the normal way — commit, unmount,
// exit 0 — not give up as if the mount had never happened (it used to exit
// 1 with "interrupted", which `make test` hit once in the SIGTERM test).
func TestSIGTERMJustAfterTheKernelMountIsANormalStop(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	pause := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(pause, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fs := harness.MountWith(t, gw, bucket, harness.Options{Failpoints: true,
		Env: []string{"FENCEFS_FAILPOINTS=after-mount=pause-file:" + pause}}, "--token", "3")
	waitFor(t, "the startup to pause after the kernel mount", func() bool {
		_, err := os.Stat(pause + ".reached")
		return err == nil
	})
	body := []byte("written during startup")
	if err := os.WriteFile(fs.Path("early.txt"), body, 0o644); err != nil {
		t.Fatalf("write through the mount during startup: %v", err)
	}
	sigtermWantsCleanStop(t, fs)
	wantObject(t, gw, bucket, "early.txt", body)
}

func TestMountFailuresGiveOneClearLineAndLeaveNothingMounted(t *testing.T) {
	harness.RequireFUSE(t)
	gw := gateway.ForTest(t)
	bin := harness.Binary(t)
	bucket := gateway.NewBucket(t, gw)
	// Epoch 5 is bound, so token 3 is stale.
	if r := runBin(t, gw.Env(), "epoch", "raise", bucket, "5"); r.code != 0 {
		t.Fatalf("epoch raise: %d %q", r.code, r.stderr)
	}
	port, err := gateway.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("http://127.0.0.1:%d", port)
	creds := []string{"AWS_ACCESS_KEY_ID=" + gw.AccessKey, "AWS_SECRET_ACCESS_KEY=" + gw.SecretKey, "AWS_REGION=" + gw.Region}
	wrong := []string{"AWS_ACCESS_KEY_ID=" + gw.AccessKey, "AWS_SECRET_ACCESS_KEY=not-the-secret", "AWS_REGION=" + gw.Region}
	badTok := filepath.Join(t.TempDir(), "epoch")
	if err := os.WriteFile(badTok, []byte("leader-17\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Keys only in a shared credentials file, which objstore/s3 reads.
	noKeys := []string{"AWS_REGION=" + gw.Region}
	credFile := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(credFile, []byte("[ci]\naws_access_key_id = "+gw.AccessKey+"\naws_secret_access_key = not-the-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		env        []string
		target     string
		extra      []string
		foreground bool
		want       []string
		code       int
	}{
		{"wrong credentials", wrong, bucket, []string{"-o", "endpoint=" + gw.Endpoint + ",token=9"}, false, []string{"access denied", gw.Endpoint}, exitFailure},
		{"missing bucket", creds, "no-such-bucket-here", []string{"-o", "endpoint=" + gw.Endpoint}, false, []string{`bucket "no-such-bucket-here" does not exist at ` + gw.Endpoint}, exitFailure},
		{"unreachable endpoint", creds, bucket, []string{"-o", "endpoint=" + dead}, false, []string{"cannot reach " + dead}, exitFailure},
		{"stale token", creds, bucket, []string{"-o", "endpoint=" + gw.Endpoint + ",token=3"}, false, []string{"cannot bind token 3", bucket}, exitFailure},
		{"stale token in the foreground", creds, bucket, []string{"--foreground", "--log-file", "/dev/null", "-o", "endpoint=" + gw.Endpoint + ",token=3"}, true, []string{"cannot bind token 3"}, exitFailure},
		{"unknown option", creds, bucket, []string{"-o", "endpoint=" + gw.Endpoint + ",speed=max"}, false, []string{"-o speed", "unknown mount option"}, exitUsage},
		{"missing mountpoint directory", creds, bucket, []string{"-o", "endpoint=" + gw.Endpoint}, false, []string{"mountpoint", "does not exist"}, exitFailure},
		// A bad token file is a configuration mistake (exit 2), reported
		// before any network error could hide it, in both forms.
		{"bad token file, unreachable endpoint", creds, bucket, []string{"-o", "endpoint=" + dead + ",token_file=" + badTok}, false, []string{"fence.token_file " + badTok, `"leader-17" is not a valid token`}, exitUsage},
		// A named credentials file or profile that cannot be used is a
		// configuration mistake too (exit 2), found by objstore/s3.
		{"missing credentials file", noKeys, bucket, []string{"-o", "endpoint=" + gw.Endpoint + ",credentials_file=" + credFile + ".missing"}, false, []string{"s3.credentials_file (-o credentials_file): cannot read " + credFile + ".missing"}, exitUsage},
		{"profile not in the credentials file", noKeys, bucket, []string{"--profile", "nope", "--credentials-file", credFile, "-o", "endpoint=" + gw.Endpoint}, false, []string{`s3.profile (--profile): profile "nope" not found in ` + credFile}, exitUsage},
		{"profile not in the credentials file in the foreground", append([]string{"AWS_PROFILE=nope", "AWS_SHARED_CREDENTIALS_FILE=" + credFile}, noKeys...), bucket, []string{"--foreground", "--log-file", "/dev/null", "-o", "endpoint=" + gw.Endpoint}, true, []string{`s3.profile ($AWS_PROFILE): profile "nope" not found in ` + credFile}, exitUsage},
		{"refused keys from the credentials file", noKeys, bucket, []string{"--profile", "ci", "--credentials-file", credFile, "-o", "endpoint=" + gw.Endpoint}, false, []string{"access denied", "credentials from " + credFile + " [ci]"}, exitFailure},
		{"missing token file in the foreground", creds, bucket, []string{"--foreground", "--log-file", "/dev/null", "-o", "endpoint=" + gw.Endpoint + ",token_file=" + badTok + ".missing"}, true, []string{"fence.token_file: cannot read " + badTok + ".missing"}, exitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmp := t.TempDir()
			mnt := filepath.Join(tmp, "mnt")
			if tt.name != "missing mountpoint directory" {
				if err := os.Mkdir(mnt, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cleanupBackground(t, bin, mnt)
			args := append([]string{tt.target, mnt, "--cache-dir", filepath.Join(tmp, "cache")}, tt.extra...)
			r := runBin(t, tt.env, args...)
			oneErrorLine(t, r, "fencefs: mount: ", tt.want...)
			if r.code != tt.code {
				t.Errorf("exit status %d, want %d (stderr %q)", r.code, tt.code, r.stderr)
			}
			if strings.Contains(r.stderr, gw.SecretKey) || strings.Contains(r.stderr, "not-the-secret") {
				t.Errorf("a secret was printed: %q", r.stderr)
			}
			if mounted(t, mnt) {
				t.Errorf("%s is mounted after a failed mount", mnt)
			}
			waitFor(t, "no fencefs process left", func() bool { return len(daemonPids(bin, mnt)) == 0 })
		})
	}
}

func TestEpochRaiseFencesALiveMount(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	fs := harness.Mount(t, gw, bucket, "--token", "3", "--holder", "old-leader")
	if err := os.WriteFile(fs.Path("a.txt"), []byte("by epoch 3"), 0o644); err != nil {
		t.Fatalf("write as leader: %v", err)
	}
	r := runBin(t, gw.Env(), "epoch", "raise", bucket, "4", "--holder", "script")
	if r.code != 0 || !strings.Contains(r.stdout, "epoch raised to 4") {
		t.Fatalf("epoch raise: %d %q %q", r.code, r.stdout, r.stderr)
	}
	err := os.WriteFile(fs.Path("a.txt"), []byte("stale write"), 0o644)
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write after epoch raise: %v, want EROFS", err)
	}
	st := runBin(t, nil, "status", fs.Dir)
	if st.code != 0 || !strings.Contains(st.stdout, "fenced") {
		t.Fatalf("status after raise: %d %q %q", st.code, st.stdout, st.stderr)
	}
	show := runBin(t, gw.Env(), "epoch", "show", bucket)
	if show.code != 0 || !regexpMatch(`(?m)^epoch\s+4$`, show.stdout) || !regexpMatch(`(?m)^holder\s+script$`, show.stdout) || !strings.Contains(show.stdout, "4 3") {
		t.Fatalf("epoch show: %d\n%s%s", show.code, show.stdout, show.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o, err := gw.Client().GetObject(ctx, bucket, "a.txt", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(o); string(got) != "by epoch 3" {
		t.Fatalf("object = %q; the fenced write must not land", got)
	}
}

func TestProbeReportsStrictPossibleOnEveryServer(t *testing.T) {
	gateway.ForEachServer(t, gateway.AllServers, testProbeReportsStrictPossible)
}

func testProbeReportsStrictPossible(t *testing.T, gw *gateway.Gateway) {
	bucket := gateway.NewBucket(t, gw)
	r := runBin(t, gw.Env(), "probe", bucket)
	if r.code != 0 {
		t.Fatalf("probe: status %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"if-none-match-create", "if-match-cas", "conditional-complete", "conditional-delete", "parallel-create-one-winner", "strict mode: possible"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("probe output lacks %q:\n%s", want, r.stdout)
		}
	}
	// MinIO ignores If-Match on DELETE (docs/DESIGN.md §6): the probe
	// must notice, and deletes become tombstones there.
	deleteRow, deletes := `(?m)^conditional-delete\s+ok`, `(?m)^deletes:\s+conditional DELETE`
	if gw.DeleteIgnoresIfMatch() {
		deleteRow, deletes = `(?m)^conditional-delete\s+FAIL`, `(?m)^deletes:.*tombstones`
	}
	for _, want := range []string{deleteRow, deletes} {
		if !regexpMatch(want, r.stdout) {
			t.Errorf("%s: probe output does not match %q:\n%s", gw.Kind, want, r.stdout)
		}
	}
	// The probe leaves nothing behind.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for o := range gw.Client().ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		t.Errorf("probe left %q (%v)", o.Key, o.Err)
	}
	bad := runBin(t, gw.Env(), "probe", "no-such-bucket-probe")
	oneErrorLine(t, bad, "fencefs: probe: ", "does not exist")
}

// mountWithMetrics mounts bucket with args and --metrics-addr on a free
// port, writes m.txt through it, and returns the mount and the address.
func mountWithMetrics(t *testing.T, gw *gateway.Gateway, bucket string, args ...string) (*harness.FS, string) {
	t.Helper()
	port, err := gateway.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	fs := harness.Mount(t, gw, bucket, append(args, "--metrics-addr", addr)...)
	if err := os.WriteFile(fs.Path("m.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	return fs, addr
}

func TestMetricsShowTheStateChangeWhenFenced(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	fs, addr := mountWithMetrics(t, gw, bucket, "--token", "3", "--refresh-interval", "50ms")
	code, body := harness.Scrape(t, "http://"+addr+"/healthz")
	if code != 200 || !strings.Contains(body, "state=active") {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	_, m := harness.Scrape(t, "http://"+addr+"/metrics")
	for _, want := range []string{`fencefs_fencing_state{state="active"} 1`, "fencefs_fencing_token 3", "fencefs_mount_up 1", `fencefs_probe_check{check="if-match-cas"} 1`, "fencefs_s3_requests_total",
		`fencefs_fuse_op_duration_seconds_count{op="flush"}`, `fencefs_s3_request_duration_seconds_bucket`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if r := runBin(t, gw.Env(), "epoch", "raise", bucket, "4"); r.code != 0 {
		t.Fatalf("epoch raise: %q", r.stderr)
	}
	if err := os.WriteFile(fs.Path("m.txt"), []byte("y"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write after raise: %v, want EROFS", err)
	}
	_, m = harness.Scrape(t, "http://"+addr+"/metrics")
	for _, want := range []string{`fencefs_fencing_state{state="fenced"} 1`, `fencefs_fencing_state{state="active"} 0`, "fencefs_fencing_fenced_refusals_total"} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics after fencing lacks %q", want)
		}
	}
	// The refused file stays dirty until the kernel's RELEASE, which comes
	// after close(2) returned; then its changes are dropped.
	waitFor(t, "fencefs_fuse_dirty_files 0", func() bool {
		_, m := harness.Scrape(t, "http://"+addr+"/metrics")
		return strings.Contains(m, "fencefs_fuse_dirty_files 0")
	})
	// The periodic refresh brings the epoch seen up to date.
	waitFor(t, "fencefs_fencing_epoch_seen 4", func() bool {
		_, m := harness.Scrape(t, "http://"+addr+"/metrics")
		return strings.Contains(m, "fencefs_fencing_epoch_seen 4")
	})
	code, body = harness.Scrape(t, "http://"+addr+"/healthz")
	if code != 200 || !strings.Contains(body, "state=fenced") {
		t.Errorf("/healthz when fenced = %d %q", code, body)
	}
	// Once the mount knows it is fenced, the filesystem refuses an open
	// for writing up front; that refusal counts too.
	refusedOpens := func() int {
		_, m := harness.Scrape(t, "http://"+addr+"/metrics")
		for _, l := range strings.Split(m, "\n") {
			if v, ok := strings.CutPrefix(l, `fencefs_fencing_fenced_refusals_total{op="open"} `); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		return 0
	}
	before := refusedOpens()
	if err := os.WriteFile(fs.Path("m.txt"), []byte("z"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write when fenced: %v, want EROFS", err)
	}
	if after := refusedOpens(); after != before+1 {
		t.Errorf("fenced_refusals_total{op=open} went %d → %d; want one more for the refused open", before, after)
	}
}

func TestTokenFileChangeRebinds(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte("3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := harness.Mount(t, gw, bucket, "--token-file", tokFile)
	if st := runBin(t, nil, "status", fs.Dir); !regexpMatch(`(?m)^token\s+3$`, st.stdout) {
		t.Fatalf("status: %q %q", st.stdout, st.stderr)
	}
	// Replace the file atomically, as a leader-election agent would.
	tmp := filepath.Join(dir, "token.new")
	if err := os.WriteFile(tmp, []byte("6\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, tokFile); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the mount to bind token 6", func() bool {
		st := runBin(t, nil, "status", fs.Dir)
		return regexpMatch(`(?m)^token\s+6$`, st.stdout) && regexpMatch(`(?m)^state\s+active$`, st.stdout)
	})
	if err := os.WriteFile(fs.Path("after.txt"), []byte("epoch 6"), 0o644); err != nil {
		t.Fatalf("write after re-bind: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	info, err := gw.Client().StatObject(ctx, bucket, "after.txt", minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if e := info.UserMetadata["Fencefs-Epoch"]; e != "6" {
		t.Fatalf("written under epoch %q, want 6", e)
	}
	if err := fs.Stop(); err != nil {
		t.Fatalf("SIGTERM on an idle mount: %v, want exit status 0 and nothing mounted; log:\n%s", err, fs.Log())
	}
}

func TestSystemdNotifyReady(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fs := harness.MountWith(t, gw, bucket, harness.Options{Env: []string{"NOTIFY_SOCKET=" + sock}}, "--token", "2")
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v; log:\n%s", err, fs.Log())
	}
	msg := string(buf[:n])
	if !strings.Contains(msg, "READY=1") || !strings.Contains(msg, fmt.Sprintf("MAINPID=%d", fs.Pid())) {
		t.Fatalf("notification %q lacks READY=1 and MAINPID", msg)
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// TestGCRemovesSweepTombstonesAndStaleUploads runs on the gateway; on MinIO
// gc keeps tombstones (TestGCKeepsTombstonesWhereDeleteIgnoresIfMatch).
func TestGCRemovesSweepTombstonesAndStaleUploads(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	pause := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(pause, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	a := harness.MountWith(t, gw, bucket, harness.Options{Failpoints: true, Env: []string{"FENCEFS_FAILPOINTS=after-intent=pause-file:" + pause}}, "--token", "3")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := gw.Client()

	// A writes a new file and pauses between its intent and its validation.
	writeErr := make(chan error, 1)
	go func() { writeErr <- os.WriteFile(a.Path("k.txt"), []byte("late write"), 0o644) }()
	// The failpoint appends the key to pause.reached when A is paused:
	// its intent is in the journal, and close(2) is in progress (so the
	// fd is gone: the fork below cannot inherit it and flush it).
	waitFor(t, "A's paused commit", func() bool {
		b, _ := os.ReadFile(pause + ".reached")
		return strings.Contains(string(b), "k.txt")
	})
	// A new epoch sweeps A's intent: k.txt is absent, so it gets a tombstone.
	if r := runBin(t, gw.Env(), "epoch", "raise", bucket, "4"); r.code != 0 {
		t.Fatalf("epoch raise: %q", r.stderr)
	}
	os.Remove(pause)
	if err := <-writeErr; !errors.Is(err, syscall.EROFS) {
		t.Fatalf("A's paused write: %v, want EROFS", err)
	}
	if _, err := cl.StatObject(ctx, bucket, "k.txt", minio.StatObjectOptions{}); err != nil {
		t.Fatalf("no tombstone at k.txt after the sweep: %v", err)
	}
	reader := harness.Mount(t, gw, bucket, "--read-only")
	if _, err := os.Stat(reader.Path("k.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the tombstone is visible through a mount: %v", err)
	}
	// An abandoned multipart upload.
	core := minio.Core{Client: cl}
	if _, err := core.NewMultipartUpload(ctx, bucket, "big.bin", minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}

	dry := runBin(t, gw.Env(), "gc", bucket, "--dry-run", "-v", "--signed-request-validity", "1ms", "--upload-age", "0s")
	if dry.code != 0 || !strings.Contains(dry.stdout, "would remove 0 intents, 1 tombstones, 1 incomplete uploads") {
		t.Fatalf("gc --dry-run: %d\n%s%s", dry.code, dry.stdout, dry.stderr)
	}
	if _, err := cl.StatObject(ctx, bucket, "k.txt", minio.StatObjectOptions{}); err != nil {
		t.Fatalf("--dry-run removed the tombstone: %v", err)
	}
	r := runBin(t, gw.Env(), "gc", bucket, "--signed-request-validity", "1ms", "--upload-age", "0s")
	if r.code != 0 || !strings.Contains(r.stdout, "removed 0 intents, 1 tombstones, 1 incomplete uploads; 0 failed") {
		t.Fatalf("gc: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := cl.StatObject(ctx, bucket, "k.txt", minio.StatObjectOptions{}); minio.ToErrorResponse(err).Code != "NoSuchKey" {
		t.Fatalf("tombstone still there after gc: %v", err)
	}
	for u := range cl.ListIncompleteUploads(ctx, bucket, "", true) {
		t.Errorf("upload %q (%v) left after gc", u.Key, u.Err)
	}
	// The register and reservations are untouched.
	show := runBin(t, gw.Env(), "epoch", "show", bucket)
	if !regexpMatch(`(?m)^epoch\s+4$`, show.stdout) || !strings.Contains(show.stdout, "4 3") {
		t.Fatalf("epoch show after gc:\n%s%s", show.stdout, show.stderr)
	}
}

func TestIdleMountLearnsItIsFencedByRefresh(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	fs := harness.Mount(t, gw, bucket, "--token", "3", "--refresh-interval", "50ms")
	if r := runBin(t, gw.Env(), "epoch", "raise", bucket, "4"); r.code != 0 {
		t.Fatalf("epoch raise: %q", r.stderr)
	}
	// No write: the periodic refresh alone must latch the state.
	waitFor(t, "the idle mount to show fenced", func() bool {
		st := runBin(t, nil, "status", fs.Dir)
		return regexpMatch(`(?m)^state\s+fenced$`, st.stdout)
	})
}

func TestRuntimeTokenXattrMakesAReadOnlyMountWritable(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	fs := harness.Mount(t, gw, bucket) // no token
	if err := os.WriteFile(fs.Path("x"), []byte("1"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write without a token: %v, want EROFS", err)
	}
	if err := unixSetxattr(fs.Dir, "user.fencefs.token", "5"); err != nil {
		t.Fatalf("setfattr token: %v", err)
	}
	if err := os.WriteFile(fs.Path("x"), []byte("1"), 0o644); err != nil {
		t.Fatalf("write after binding by xattr: %v", err)
	}
	st := runBin(t, nil, "status", fs.Dir)
	if !regexpMatch(`(?m)^token\s+5$`, st.stdout) || !regexpMatch(`(?m)^state\s+active$`, st.stdout) {
		t.Fatalf("status: %q", st.stdout)
	}
}

func TestMountFuse3RunsFencefsAsAnFstabHelper(t *testing.T) {
	harness.RequireFUSE(t)
	helper := "/sbin/mount.fuse3"
	if _, err := os.Stat(helper); err != nil {
		gateway.SkipOrFail(t, "no %s (apt-get install fuse3): %v", helper, err)
	}
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	bin := harness.Binary(t)
	tmp := t.TempDir()
	mnt := filepath.Join(tmp, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	cleanupBackground(t, bin, mnt)
	// What mount(8) does for the fstab line
	//   BUCKET MNT fuse.fencefs _netdev,endpoint=…,token=11,cache_dir=… 0 0
	// mount.fuse3 runs "fencefs BUCKET MNT -o <options>" through the shell,
	// adding options such as dev,suid and dropping _netdev.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helper, bucket, mnt, "-t", "fuse.fencefs", "-o",
		"_netdev,nofail,endpoint="+gw.Endpoint+",token=11,cache_dir="+filepath.Join(tmp, "cache")+",log_file="+filepath.Join(tmp, "log"))
	cmd.Env = append(cleanEnv(t), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"),
		"AWS_ACCESS_KEY_ID="+gw.AccessKey, "AWS_SECRET_ACCESS_KEY="+gw.SecretKey, "AWS_REGION="+gw.Region)
	if filepath.Base(bin) != "fencefs" {
		gateway.SkipOrFail(t, "the binary under test is named %s; mount.fuse3 looks for fencefs", filepath.Base(bin))
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(tmp, "log"))
		t.Fatalf("mount.fuse3: %v: %s\nlog:\n%s", err, out, log)
	}
	if !mounted(t, mnt) {
		t.Fatalf("mount.fuse3 returned but %s is not mounted", mnt)
	}
	st := runBin(t, nil, "status", mnt)
	if !regexpMatch(`(?m)^token\s+11$`, st.stdout) || !regexpMatch(`(?m)^state\s+active$`, st.stdout) {
		t.Fatalf("status: %q %q", st.stdout, st.stderr)
	}
	if err := os.WriteFile(filepath.Join(mnt, "fstab.txt"), []byte("ok"), 0o644); err != nil {
		t.Fatalf("write: %v", err)
	}
	umount := exec.Command("umount", mnt)
	if os.Geteuid() != 0 {
		umount = exec.Command("fusermount3", "-u", mnt)
	}
	if out, err := umount.CombinedOutput(); err != nil {
		t.Fatalf("umount: %v %s", err, out)
	}
	waitFor(t, "fencefs to exit after umount", func() bool { return len(daemonPids(bin, mnt)) == 0 })
}

// TestStatusShowsFilesNotYetStored checks the attributes an operator reads
// before unmounting or killing a mount: a file written but not closed is a
// dirty file with staged bytes; once closed (stored) both are 0.
func TestStatusShowsFilesNotYetStored(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	fs := harness.Mount(t, gw, bucket, "--token", "1")
	xattr := func(name string) string {
		t.Helper()
		buf := make([]byte, 64)
		n, err := syscall.Getxattr(fs.Dir, "user.fencefs."+name, buf)
		if err != nil {
			t.Fatalf("getxattr %s: %v", name, err)
		}
		return string(buf[:n])
	}
	// No subprocess while the descriptor is open: exec would close its
	// copy, which flushes (stores) the file.
	f, err := os.OpenFile(fs.Path("pending.txt"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 5000)); err != nil {
		t.Fatal(err)
	}
	if got := xattr("dirty_files"); got != "1" {
		t.Errorf("dirty_files with a file written and open = %q, want 1", got)
	}
	if got := xattr("staging_bytes"); got != "5000" {
		t.Errorf("staging_bytes = %q, want 5000", got)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got := xattr("dirty_files"); got != "0" {
		t.Errorf("dirty_files after close (stored) = %q, want 0", got)
	}
	// The staging file goes with the kernel's RELEASE, which follows
	// close(2) asynchronously.
	waitFor(t, "staging_bytes 0", func() bool { return xattr("staging_bytes") == "0" })
	st := runBin(t, nil, "status", fs.Dir)
	if st.code != 0 || !regexpMatch(`(?m)^dirty_files\s+0$`, st.stdout) || !regexpMatch(`(?m)^staging_bytes\s+0$`, st.stdout) {
		t.Errorf("status after close: %d %q %q; want dirty_files 0 and staging_bytes 0", st.code, st.stdout, st.stderr)
	}
}

// TestBackgroundMountSaysWhatIsMountedAndHowToStopIt: the explicit mount
// form prints one line once the mount is ready; the helper form, whose
// output mount(8) shows, prints nothing.
func TestBackgroundMountSaysWhatIsMountedAndHowToStopIt(t *testing.T) {
	harness.RequireFUSE(t)
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	bin := harness.Binary(t)
	tests := []struct {
		name string
		args func(mnt, tmp string) []string
		want []string // "" = no output
	}{
		{"mount with a token and a log file", func(mnt, tmp string) []string {
			return []string{"mount", bucket + "/app", mnt, "--token", "4", "--log-file", filepath.Join(tmp, "log"), "--cache-dir", filepath.Join(tmp, "cache")}
		}, []string{"mounted " + bucket + "/app at ", "token 4, active", "stop with: fusermount3 -u ", "log: "}},
		{"mount without a token", func(mnt, tmp string) []string {
			return []string{"mount", bucket, mnt, "--cache-dir", filepath.Join(tmp, "cache")}
		}, []string{"mounted " + bucket + " at ", "no token", "no log (give --log-file"}},
		{"helper form", func(mnt, tmp string) []string {
			return []string{bucket, mnt, "-o", "cache_dir=" + filepath.Join(tmp, "cache")}
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmp := t.TempDir()
			mnt := filepath.Join(tmp, "mnt")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			cleanupBackground(t, bin, mnt)
			r := runBin(t, gw.Env(), tt.args(mnt, tmp)...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("status %d, stderr %q", r.code, r.stderr)
			}
			if !mounted(t, mnt) {
				t.Fatalf("%s is not mounted", mnt)
			}
			lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
			if tt.want == nil {
				if r.stdout != "" {
					t.Errorf("the helper form printed %q, want nothing", r.stdout)
				}
				return
			}
			if len(lines) != 1 {
				t.Fatalf("stdout has %d lines, want one: %q", len(lines), r.stdout)
			}
			for _, w := range append(tt.want, mnt) {
				if !strings.Contains(lines[0], w) {
					t.Errorf("%q does not contain %q", lines[0], w)
				}
			}
		})
	}
}
