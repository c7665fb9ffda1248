package integration

// Permissions for other users: a mount with
// --allow-other lets other users in, so the kernel must check every access
// against the mode, owner and group fencefs stores (default_permissions).
// Before, user nobody could read and append to a root-owned 0600 file.

import (
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
)

// otherUser is the unprivileged identity the tests switch to.
type otherUser struct{ uid, gid uint32 }

func lookupNobody(t *testing.T) otherUser {
	t.Helper()
	if os.Geteuid() != 0 {
		gateway.SkipOrFail(t, "switching to another user needs root")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		gateway.SkipOrFail(t, "no user nobody: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return otherUser{uint32(uid), uint32(gid)}
}

// sh runs a shell command as the user and returns its combined output and
// whether it succeeded.
func (u otherUser) sh(t *testing.T, script string) (string, bool) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err == nil
}

// publicMountpoint is a mountpoint other users can reach (t.TempDir's
// directories are 0700).
func publicMountpoint(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fencefs-perm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) }) // runs after the unmount (LIFO)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestAllowOtherEnforcesStoredPermissionsForOtherUsers(t *testing.T) {
	nobody := lookupNobody(t)
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	fs := harness.MountWith(t, gw, bucket, harness.Options{Dir: publicMountpoint(t)},
		"--token", "1", "--allow-other")

	write := func(name, body string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(fs.Path(name), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(fs.Path(name), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("secret", "root only\n", 0o600)
	write("public", "everyone\n", 0o644)
	if err := os.Mkdir(fs.Path("shared"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(fs.Path("shared"), 0o1777); err != nil {
		t.Fatal(err)
	}
	write("shared/roots", "in a sticky directory\n", 0o666)
	if st, err := os.Stat(fs.Path("shared")); err != nil || st.Mode()&os.ModeSticky == 0 {
		t.Fatalf("shared: %v, mode %v; want the sticky bit", err, st.Mode())
	}
	mnt := fs.Dir

	cases := []struct {
		name   string
		script string
		wantOK bool
		want   string // part of the output (the shell's error text)
	}{
		{"read of a 0600 file of root is denied", "cat " + mnt + "/secret", false, "Permission denied"},
		{"append to a 0600 file of root is denied", "echo x >> " + mnt + "/secret", false, "Permission denied"},
		{"overwrite of a 0644 file of root is denied", "echo x > " + mnt + "/public", false, "Permission denied"},
		{"create in a 0755 directory of root is denied", "echo x > " + mnt + "/mine", false, "Permission denied"},
		{"mkdir in a 0755 directory of root is denied", "mkdir " + mnt + "/mydir", false, "Permission denied"},
		{"unlink in a 0755 directory of root is denied", "rm -f " + mnt + "/public", false, "Permission denied"},
		{"chmod of root's file is denied", "chmod 666 " + mnt + "/public", false, "not permitted"},
		{"unlink of root's file in a sticky directory is denied", "rm -f " + mnt + "/shared/roots", false, "not permitted"},
		{"rename of root's file in a sticky directory is denied", "mv " + mnt + "/shared/roots " + mnt + "/shared/stolen", false, "not permitted"},
		// What the modes allow still works.
		{"read of a 0644 file is allowed", "cat " + mnt + "/public", true, "everyone"},
		{"create in a 1777 directory is allowed", "echo mine > " + mnt + "/shared/own && cat " + mnt + "/shared/own", true, "mine"},
		{"unlink of one's own file in a sticky directory is allowed", "echo y > " + mnt + "/shared/own2 && rm " + mnt + "/shared/own2", true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, ok := nobody.sh(t, c.script)
			if ok != c.wantOK || !strings.Contains(out, c.want) {
				t.Errorf("as nobody: %s: succeeded=%v output %q; want succeeded=%v with %q", c.script, ok, out, c.wantOK, c.want)
			}
		})
	}

	// Nothing nobody was refused reached the bucket.
	e := &fsEnv{gw: gw, bucket: bucket, fs: fs}
	for key, want := range map[string]string{"secret": "root only\n", "public": "everyone\n", "shared/roots": "in a sticky directory\n"} {
		if got, ok := e.get(t, key); !ok || got != want {
			t.Errorf("bucket %s = %q (present %v), want %q", key, got, ok, want)
		}
	}
	for _, key := range []string{"mine", "mydir/", "shared/stolen"} {
		if _, ok := e.get(t, key); ok {
			t.Errorf("bucket has %s, created by a refused call", key)
		}
	}
	// The file nobody made is stored as nobody's.
	var st syscall.Stat_t
	if err := syscall.Stat(fs.Path("shared/own"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != nobody.uid {
		t.Errorf("shared/own is owned by uid %d, want nobody (%d)", st.Uid, nobody.uid)
	}
}
