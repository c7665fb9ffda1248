package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
)

// TestDebianPackageInstallsMountsAndRemovesCleanly builds the .deb of the
// binary under test (deploy/debian/build-deb, what `make deb` runs),
// installs it with dpkg -i, mounts through `mount -t fencefs` and through
// an fstab line, and removes it: nothing of it is left.
func TestDebianPackageInstallsMountsAndRemovesCleanly(t *testing.T) {
	harness.RequireFUSE(t)
	if os.Geteuid() != 0 {
		gateway.SkipOrFail(t, "dpkg -i needs root")
	}
	for _, tool := range []string{"dpkg", "dpkg-deb", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			gateway.SkipOrFail(t, "%s is missing: %v", tool, err)
		}
	}
	if out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", "fencefs").CombinedOutput(); err == nil && strings.Contains(string(out), "installed") {
		gateway.SkipOrFail(t, "a fencefs package is installed on this machine already; the test would replace it")
	}
	root, err := gateway.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(cleanEnv(t), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	deb := strings.TrimSpace(run(nil, filepath.Join(root, "deploy/debian/build-deb"), harness.Binary(t), tmp))
	if !strings.HasPrefix(filepath.Base(deb), "fencefs_") || !strings.HasSuffix(deb, ".deb") {
		t.Fatalf("build-deb printed %q", deb)
	}
	run(nil, "dpkg", "-i", deb)
	installed := true
	t.Cleanup(func() {
		if installed {
			_ = exec.Command("dpkg", "--purge", "fencefs").Run()
		}
	})
	files := strings.Fields(run(nil, "dpkg-query", "-L", "fencefs"))
	for _, want := range []string{"/usr/bin/fencefs", "/usr/sbin/mount.fencefs", "/usr/sbin/mount.fuse.fencefs",
		"/usr/share/man/man1/fencefs-mount.1.gz", "/usr/share/bash-completion/completions/fencefs",
		"/usr/lib/systemd/system/fencefs@.service", "/usr/share/fencefs/prometheus/fencefs-alerts.yml"} {
		if _, err := os.Stat(want); err != nil {
			t.Errorf("%s not installed: %v (the package lists %d paths)", want, err, len(files))
		}
	}
	if v := run(nil, "/usr/bin/fencefs", "version"); !strings.HasPrefix(v, "fencefs ") {
		t.Errorf("the installed fencefs version says %q", v)
	}

	creds := []string{"AWS_ACCESS_KEY_ID=" + gw.AccessKey, "AWS_SECRET_ACCESS_KEY=" + gw.SecretKey, "AWS_REGION=" + gw.Region}
	opts := func(tok, name string) string {
		return "endpoint=" + gw.Endpoint + ",token=" + tok + ",cache_dir=" + filepath.Join(tmp, "cache-"+name) + ",log_file=" + filepath.Join(tmp, name+".log")
	}
	wantMounted := func(mnt, tok, file string) {
		t.Helper()
		t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
		st := run(nil, "/usr/bin/fencefs", "status", mnt)
		if !regexpMatch(`(?m)^token\s+`+tok+`$`, st) || !regexpMatch(`(?m)^state\s+active$`, st) {
			t.Fatalf("status of %s:\n%s", mnt, st)
		}
		if err := os.WriteFile(filepath.Join(mnt, file), []byte(file), 0o644); err != nil {
			t.Fatalf("write through %s: %v", mnt, err)
		}
		run(nil, "umount", mnt)
		waitFor(t, mnt+" unmounted", func() bool { return !mounted(t, mnt) })
	}

	// mount -t fencefs finds /usr/sbin/mount.fencefs.
	mntA := filepath.Join(tmp, "a")
	if err := os.Mkdir(mntA, 0o755); err != nil {
		t.Fatal(err)
	}
	run(creds, "mount", "-t", "fencefs", bucket, mntA, "-o", opts("5", "a"))
	wantMounted(mntA, "5", "by-mount-t.txt")

	// An fstab line (in a file of its own: mount -T), of type fuse.fencefs
	// as deploy/systemd/fstab.example shows.
	mntB := filepath.Join(tmp, "b")
	if err := os.Mkdir(mntB, 0o755); err != nil {
		t.Fatal(err)
	}
	fstab := filepath.Join(tmp, "fstab")
	line := bucket + " " + mntB + " fuse.fencefs _netdev,nofail," + opts("6", "b") + " 0 0\n"
	if err := os.WriteFile(fstab, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	run(creds, "mount", "-T", fstab, mntB)
	wantMounted(mntB, "6", "by-fstab.txt")
	for _, key := range []string{"by-mount-t.txt", "by-fstab.txt"} {
		wantObject(t, gw, bucket, key, []byte(key))
	}

	run(nil, "dpkg", "--purge", "fencefs")
	installed = false
	for _, f := range files {
		if fi, err := os.Lstat(f); err == nil && !fi.IsDir() {
			t.Errorf("%s is left after dpkg --purge", f)
		}
	}
	if out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", "fencefs").CombinedOutput(); err == nil && strings.Contains(string(out), "installed") {
		t.Errorf("dpkg still lists fencefs: %s", out)
	}
}
