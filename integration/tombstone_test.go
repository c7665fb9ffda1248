package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
)

// metricLine returns the value text of metric name in a /metrics body ("" if
// absent).
func metricLine(body, name string) string {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	return ""
}

// pollMetric polls addr's /metrics until metric name reads want, failing
// after limit.
func pollMetric(t *testing.T, addr, name, want string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		_, body := harness.Scrape(t, "http://"+addr+"/metrics")
		got := metricLine(body, name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %q after %v, want %s", name, got, limit, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRestartedMountRemovesTheTombstonesOfItsSweep kills (-9) a mount with
// five new files open (written, not closed) and restarts it with the same
// token and holder and a short fence.signed_request_validity: its takeover
// sweep blocks the dead instance's possible late creates with tombstones
// f0…f4, which a plain S3 client lists, and the restarted mount removes them
// by itself once they are older than the validity (conditional DELETE: the
// Versity gateway honours If-Match on DELETE); the metrics show them come
// and go, and no ledger is left.
func TestRestartedMountRemovesTheTombstonesOfItsSweep(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	// The files' closes are held at the after-validate failpoint, their
	// intents written: the mount dies with their commits in flight (a
	// dirty file that never began its commit names nothing).
	pause := filepath.Join(t.TempDir(), "pause")
	a := harness.MountWith(t, gw, bucket, harness.Options{Failpoints: true,
		Env: []string{"FENCEFS_FAILPOINTS=after-validate=pause-file:" + pause}}, "--token", "17", "--holder", "A")
	const n = 5
	names := make([]string, n)
	files := make([]*os.File, n)
	for i := range files {
		names[i] = fmt.Sprintf("f%d", i)
		f, err := os.OpenFile(a.Path(names[i]), os.O_CREATE|os.O_WRONLY, 0o644) // no O_EXCL: the object appears at close
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte("never closed " + names[i])); err != nil {
			t.Fatal(err)
		}
		files[i] = f
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := os.WriteFile(pause, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		go func() { _ = f.Close() }() // returns once the mount is gone
	}
	for intentKeyCount(ctx, t, gw, bucket) < n {
		if ctx.Err() != nil {
			t.Fatal("the open files' intents never appeared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	a.Kill()
	_ = a.Unmount()

	const validity = 10 * time.Second
	addr := metricsAddr(t)
	a2 := harness.Mount(t, gw, bucket, "--token", "17", "--holder", "A",
		"--signed-request-validity", validity.String(), "--metrics-addr", addr)
	restarted := time.Now()
	// The sweep ran before the mount appeared: every name holds a tombstone
	// that other S3 clients list as a file, and the mount knows of them.
	for _, name := range names {
		if got := readObject(t, gw, bucket, name); !got.tombstone {
			t.Fatalf("%s after the restart: %+v, want a sweep tombstone (the test would test nothing)", name, got)
		}
	}
	pollMetric(t, addr, "fencefs_fencing_tombstones", "5", 15*time.Second)

	// Gone by themselves once older than the validity (generous bound).
	limit := validity + 90*time.Second
	for {
		var left []string
		for _, k := range listKeys(ctx, t, gw, bucket, "") {
			if !strings.HasPrefix(k, ".fencefs/") {
				left = append(left, k)
			}
		}
		if len(left) == 0 {
			t.Logf("the plain S3 listing is clean %v after the restart (validity %v)", time.Since(restarted).Round(10*time.Millisecond), validity)
			break
		}
		if time.Since(restarted) > limit {
			t.Fatalf("%v after the restart a plain S3 listing still shows %v; mount log:\n%s", limit, left, a2.Log())
		}
		time.Sleep(200 * time.Millisecond)
	}
	pollMetric(t, addr, "fencefs_fencing_tombstones", "0", 15*time.Second)
	pollMetric(t, addr, "fencefs_fencing_tombstones_removed_total", "5", 15*time.Second)
	if l := listKeys(ctx, t, gw, bucket, ".fencefs/tombstones/"); len(l) != 0 {
		t.Errorf("ledgers left after every tombstone went: %v", l)
	}
	// The names are free again through the mount.
	if err := os.WriteFile(a2.Path("f0"), []byte("again"), 0o644); err != nil {
		t.Fatalf("create f0 after its tombstone went: %v", err)
	}
	if got := readObject(t, gw, bucket, "f0"); string(got.body) != "again" {
		t.Fatalf("f0 = %q, want again", got.body)
	}
}
