package integration

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/moby/sys/mountinfo"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
)

// TestDemoTellsTheTakeoverThenCleansUp runs `make run`'s demo binary
// (bin/fencefs-demo --once) twice on one state directory, through the real
// fencefs binary, FUSE mounts and gateway: each run must tell the whole
// takeover (A's close refused with EROFS), leave B's bytes in the bucket as
// a plain S3 client reads them afterwards, and leave nothing mounted or
// serving; the second run must take the next two epochs.
func TestDemoTellsTheTakeoverThenCleansUp(t *testing.T) {
	harness.RequireFUSE(t)
	gwBin, err := gateway.FindBinary()
	if err != nil {
		gateway.SkipOrFail(t, "%v", err)
	}
	bin := harness.Binary(t)
	demo := demoBinary(t)
	dir := t.TempDir()
	state, mntA := filepath.Join(dir, "state"), filepath.Join(dir, "mnt")
	mntB := mntA + "-b"
	t.Cleanup(func() {
		for _, d := range []string{mntA, mntB} {
			if demoMounted(t, d) {
				t.Errorf("%s is still mounted after the demo exited", d)
				_ = exec.Command("fusermount3", "-uz", d).Run()
			}
		}
	})

	runs := []struct {
		name           string
		tokenA, tokenB string
		says           string // how the story announces the tokens
	}{
		{"fresh bucket takes 17 and 18", "17", "18", "Leader A takes token 17, leader B token 18."},
		{"second run takes the next epochs", "19", "20", "The bucket's epoch is already 18 from an earlier run, so leader A takes token 19 and leader B token 20."},
	}
	for _, r := range runs {
		ok := t.Run(r.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, demo, "--bin", bin, "--gateway", gwBin, "--state", state, "--mountpoint", mntA, "--once")
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("fencefs-demo --once: %v\n%s", err, out)
			}
			text := string(out)
			for _, want := range []string{
				r.says,
				"with token " + r.tokenA + " and writes report.txt",
				"\"report v1 by leader A (token " + r.tokenA + ")\", stamped epoch " + r.tokenA + " by holder demo-a",
				"keeps it open: written, not closed",
				"A freezes: SIGSTOP",
				"with token " + r.tokenB + " (sealing A's intent journal",
				"close(2) on A: EROFS",
				"A's state: fenced (epoch " + r.tokenB + " held by holder demo-b is newer than our token " + r.tokenA,
				"B's bytes, stamped epoch " + r.tokenB + ": A's late write never landed.",
				"unmounted ./mnt-b (B)",
				"unmounted ./mnt (A)",
				"gateway stopped.",
			} {
				if !strings.Contains(text, want) {
					t.Errorf("the demo's output lacks %q:\n%s", want, text)
				}
			}
			for _, d := range []string{mntA, mntB} {
				if demoMounted(t, d) {
					t.Errorf("%s is still mounted after the demo exited", d)
				}
			}
			if m := regexp.MustCompile(`serving at http://(127\.0\.0\.1:\d+)`).FindStringSubmatch(text); m == nil {
				t.Errorf("the demo did not say where its gateway served")
			} else if c, err := net.DialTimeout("tcp", m[1], time.Second); err == nil {
				c.Close()
				t.Errorf("the demo's gateway still accepts connections at %s after it exited", m[1])
			}

			body, epoch, holder := demoReport(t, gwBin, state)
			if want := "report v2 by leader B (token " + r.tokenB + ")\n"; body != want || epoch != r.tokenB || holder != "demo-b" {
				t.Errorf("the bucket's report.txt = %q stamped epoch %q by %q; want %q stamped %s by demo-b", body, epoch, holder, want, r.tokenB)
			}
		})
		if !ok {
			break // the second run builds on the first
		}
	}
}

// demoBinary is $FENCEFS_DEMO_BIN (the Makefile's bin/fencefs-demo), else a
// fresh build of ./integration/demo.
func demoBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FENCEFS_DEMO_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("FENCEFS_DEMO_BIN=%s: %v", p, err)
		}
		return p
	}
	root, err := gateway.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "fencefs-demo")
	cmd := exec.Command("go", "build", "-o", p, "./integration/demo")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./integration/demo: %v\n%s", err, out)
	}
	return p
}

func demoMounted(t *testing.T, dir string) bool {
	t.Helper()
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir))
	if err != nil {
		t.Fatal(err)
	}
	return len(mounts) > 0
}

// demoReport starts a gateway of its own on the demo's data, with the
// credentials from the demo's env file, and reads report.txt with a plain
// S3 client: its body and fencing stamp.
func demoReport(t *testing.T, gwBin, state string) (body, epoch, holder string) {
	t.Helper()
	env := map[string]string{}
	f, err := os.Open(filepath.Join(state, "env"))
	if err != nil {
		t.Fatalf("the demo's env file: %v", err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gw, err := gateway.Start(ctx, gateway.Options{Bin: gwBin, Dir: filepath.Join(state, "gateway"),
		AccessKey: env["AWS_ACCESS_KEY_ID"], SecretKey: env["AWS_SECRET_ACCESS_KEY"]})
	if err != nil {
		t.Fatalf("restarting a gateway on the demo's data: %v", err)
	}
	defer func() {
		if err := gw.Stop(); err != nil {
			t.Errorf("stop gateway: %v", err)
		}
	}()
	o, err := gw.Client().GetObject(ctx, "demo", "report.txt", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil {
		t.Fatalf("reading report.txt from the bucket: %v", err)
	}
	info, err := o.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return string(b), info.UserMetadata["Fencefs-Epoch"], info.UserMetadata["Fencefs-Holder"]
}
