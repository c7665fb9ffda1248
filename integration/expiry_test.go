package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
)

// liveKeys lists the bucket as a plain S3 client does, outside .fencefs/.
func liveKeys(ctx context.Context, t *testing.T, gw *gateway.Gateway, bucket string) []string {
	t.Helper()
	var keys []string
	for _, k := range listKeys(ctx, t, gw, bucket, "") {
		if !strings.HasPrefix(k, ".fencefs/") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// mountFiles lists the regular files under dir, as keys.
func mountFiles(t *testing.T, dir string) []string {
	t.Helper()
	var keys []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			keys = append(keys, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	return keys
}

func bash(t *testing.T, dir, script string) {
	t.Helper()
	cmd := exec.Command("bash", "-ec", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bash %q: %v\n%s", script, err, out)
	}
}

// TestTombstonesLeaveAPlainListingOnMinIO runs, on MinIO (whose DELETE
// ignores If-Match, so every delete is a tombstone), atomic saves, renames,
// rm -rf and a kill -9 with new files open, then a restart and a newer
// leader. Every tombstone in the bucket carries the tag of the lifecycle
// rule the mounts installed, and no live file does; fencefs status and the
// metrics show them and when the first goes. Then the test lets a day pass
// for the rule (it moves the rule's expiry to a date already past, the one
// thing a test cannot wait for): a plain S3 listing shows exactly the files
// the mount shows, and files the newer leader created at tombstoned names —
// also while MinIO expires the tombstones around them — are all there.
func TestTombstonesLeaveAPlainListingOnMinIO(t *testing.T) {
	gw := gateway.ForKind(t, gateway.MinIO)
	bucket := gateway.NewBucket(t, gw)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	// The files' closes are held at the after-validate failpoint, their
	// intents written: the mount dies with their commits in flight (a
	// dirty file that never began its commit names nothing).
	pause := filepath.Join(t.TempDir(), "pause")
	a := harness.MountWith(t, gw, bucket, harness.Options{Failpoints: true,
		Env: []string{"FENCEFS_FAILPOINTS=after-validate=pause-file:" + pause}}, "--token", "17", "--holder", "A")
	bash(t, a.Dir, `for i in $(seq 1 20); do echo "v$i" > doc.txt.tmp && mv doc.txt.tmp doc.txt; done
for i in $(seq 0 9); do echo "f$i" > f$i; done
for i in $(seq 0 9); do mv f$i g$i; done
mkdir -p tree && for i in $(seq 0 9); do echo "t$i" > tree/t$i; done
rm -rf tree`)
	var files []*os.File
	for i := range 3 {
		f, err := os.OpenFile(a.Path(fmt.Sprintf("open%d", i)), os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte("never closed")); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if err := os.WriteFile(pause, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		go func() { _ = f.Close() }() // returns once the mount is gone
	}
	for intentKeyCount(ctx, t, gw, bucket) < 3 {
		if ctx.Err() != nil {
			t.Fatal("the open files' intents never appeared")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // the tombstone ledger is written at most once a second
	a.Kill()
	_ = a.Unmount()

	addr := metricsAddr(t)
	a2 := harness.Mount(t, gw, bucket, "--token", "17", "--holder", "A", "--metrics-addr", addr)
	b := harness.Mount(t, gw, bucket, "--token", "18", "--holder", "B")
	// The newer leader creates files at tombstoned names.
	bash(t, b.Dir, `echo new > f3 && echo new > open1 && echo new > doc.txt.tmp && mkdir -p tree && echo new > tree/t5`)

	// Every tombstone carries the rule's tag, no live file does, and the rule is there.
	tombs := 0
	for _, k := range liveKeys(ctx, t, gw, bucket) {
		st := readObject(t, gw, bucket, k)
		tags, err := gw.Client().GetObjectTagging(ctx, bucket, k, minio.GetObjectTaggingOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tagged := tags.ToMap()["fencefs-tombstone"] == "1"
		if st.tombstone {
			tombs++
		}
		if tagged != st.tombstone {
			t.Errorf("%s: tombstone %v, tagged %v", k, st.tombstone, tagged)
		}
	}
	if tombs < 20 {
		t.Fatalf("%d tombstones in the bucket; want at least 20 (saves, renames, rm -rf, the sweep): the test would test nothing", tombs)
	}
	lc, err := gw.Client().GetBucketLifecycle(ctx, bucket)
	if err != nil {
		t.Fatalf("the mounts installed no lifecycle rule: %v", err)
	}
	var rule *lifecycle.Rule
	for i := range lc.Rules {
		if lc.Rules[i].ID == "fencefs-tombstones" {
			rule = &lc.Rules[i]
		}
	}
	if rule == nil || rule.RuleFilter.Tag.Key != "fencefs-tombstone" || rule.Expiration.Days != 1 {
		t.Fatalf("lifecycle rules %+v; want fencefs-tombstones expiring tag fencefs-tombstone=1 after 1 day", lc.Rules)
	}
	out, err := harness.Run(ctx, t, gw, nil, "status", a2.Dir)
	if err != nil || !strings.Contains(out, `removed by bucket lifecycle rule "fencefs-tombstones"`) || !strings.Contains(out, "the first goes at") {
		t.Errorf("fencefs status of the restarted mount: %v\n%s", err, out)
	}
	_, body := harness.Scrape(t, "http://"+addr+"/metrics")
	if v := metricLine(body, "fencefs_fencing_tombstone_next_removal_seconds"); v == "" || v == "0" || v == "-1" || strings.HasPrefix(v, "-") {
		t.Errorf("fencefs_fencing_tombstone_next_removal_seconds = %q; want the time until the first tombstone goes (a day or two)", v)
	}
	if v := metricLine(body, "fencefs_fencing_tombstones"); v == "" || v == "0" {
		t.Errorf("fencefs_fencing_tombstones = %q; want the tombstones the mount adopted and wrote", v)
	}

	// A day passes for the rule.
	due := time.Now().UTC().Truncate(24 * time.Hour)
	rule.Expiration = lifecycle.Expiration{Date: lifecycle.ExpirationDate{Time: due}}
	if err := gw.Client().SetBucketLifecycle(ctx, bucket, lc); err != nil {
		t.Fatal(err)
	}
	// While MinIO expires tombstones, the newer leader deletes and creates
	// again at the same names: every file it leaves must stay.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			liveKeys(ctx, t, gw, bucket) // a listing makes MinIO expire what is due
		}
	}()
	for round := range 3 {
		bash(t, b.Dir, fmt.Sprintf(`for i in $(seq 0 9); do rm -f g$i; echo "r%d" > g$i; done`, round))
	}
	close(stop)
	wg.Wait()

	want := mountFiles(t, b.Dir)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		var got []string
		for _, k := range liveKeys(ctx, t, gw, bucket) {
			if fi, err := os.Stat(b.Path(k)); strings.HasSuffix(k, "/") && err == nil && fi.IsDir() {
				continue // the marker of a directory the mount shows
			}
			got = append(got, k)
		}
		if strings.Join(got, " ") == strings.Join(want, " ") {
			break
		}
		if time.Now().After(deadline) {
			var detail []string
			for _, k := range got {
				st := readObject(t, gw, bucket, k)
				detail = append(detail, fmt.Sprintf("%s(tombstone=%v %q)", k, st.tombstone, st.body))
			}
			t.Fatalf("a plain listing once the rule is due: %v\nthe mount shows: %v", detail, want)
		}
	}
	for _, k := range []string{"f3", "open1", "doc.txt.tmp", "tree/t5"} {
		if got := readObject(t, gw, bucket, k); string(got.body) != "new\n" {
			t.Errorf("%s = %+v; want the newer leader's file", k, got)
		}
	}
	for i := range 10 {
		if got := readObject(t, gw, bucket, fmt.Sprintf("g%d", i)); string(got.body) != "r2\n" {
			t.Errorf("g%d = %+v; want the last file written there", i, got)
		}
	}
	if got := readObject(t, gw, bucket, "doc.txt"); string(got.body) != "v20\n" {
		t.Errorf("doc.txt = %+v; want the last save", got)
	}
}

// TestGCKeepsTombstonesWhereDeleteIgnoresIfMatch: on MinIO, fencefs gc
// does not delete tombstones (a DELETE there could remove a file a mount
// creates at the name at that moment) and says how many it kept and why;
// --unconditional-tombstones, for a bucket no mount writes, deletes them.
func TestGCKeepsTombstonesWhereDeleteIgnoresIfMatch(t *testing.T) {
	gw := gateway.ForKind(t, gateway.MinIO)
	bucket := gateway.NewBucket(t, gw)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := harness.Mount(t, gw, bucket, "--token", "5")
	bash(t, a.Dir, `for i in 0 1 2; do echo x > f$i; rm f$i; done; echo keep > kept`)
	if err := a.Unmount(); err != nil {
		t.Fatal(err)
	}
	if got := liveKeys(ctx, t, gw, bucket); strings.Join(got, " ") != "f0 f1 f2 kept" {
		t.Fatalf("keys after the deletes: %v; want three tombstones and kept", got)
	}
	out, err := harness.Run(ctx, t, gw, nil, "gc", bucket, "--signed-request-validity", "1ms")
	if err != nil || !strings.Contains(out, "kept 3 old tombstones: DELETE ignores If-Match") {
		t.Fatalf("fencefs gc: %v\n%s", err, out)
	}
	if got := liveKeys(ctx, t, gw, bucket); strings.Join(got, " ") != "f0 f1 f2 kept" {
		t.Fatalf("keys after gc: %v; want the tombstones kept", got)
	}
	out, err = harness.Run(ctx, t, gw, nil, "gc", bucket, "--signed-request-validity", "1ms", "--unconditional-tombstones")
	if err != nil || !strings.Contains(out, " intents, 3 tombstones, ") {
		t.Fatalf("fencefs gc --unconditional-tombstones: %v\n%s", err, out)
	}
	if got := liveKeys(ctx, t, gw, bucket); strings.Join(got, " ") != "kept" {
		t.Fatalf("keys after gc --unconditional-tombstones: %v; want only kept", got)
	}
}

// TestWithoutLifecyclePermissionTombstonesWaitForGCAndSaySo: on MinIO, a
// mount whose credentials may not read or write the bucket's lifecycle
// configuration (temporary credentials with a session policy denying
// both) deletes as before, logs one line naming the permissions, writes
// untagged tombstones, and fencefs status says they wait for gc and why.
func TestWithoutLifecyclePermissionTombstonesWaitForGCAndSaySo(t *testing.T) {
	gw := gateway.ForKind(t, gateway.MinIO)
	bucket := gateway.NewBucket(t, gw)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	deny := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:*"],"Resource":["arn:aws:s3:::*"]},` +
		`{"Effect":"Deny","Action":["s3:GetLifecycleConfiguration","s3:PutLifecycleConfiguration"],"Resource":["arn:aws:s3:::*"]}]}`
	creds, err := credentials.NewSTSAssumeRole(gw.Endpoint, credentials.STSAssumeRoleOptions{
		AccessKey: gw.AccessKey, SecretKey: gw.SecretKey, Policy: deny, Location: gw.Region})
	if err != nil {
		t.Fatal(err)
	}
	v, err := creds.GetWithContext(nil)
	if err != nil {
		t.Fatalf("temporary credentials: %v", err)
	}
	a := harness.MountWith(t, gw, bucket, harness.Options{Env: []string{"AWS_ACCESS_KEY_ID=" + v.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY=" + v.SecretAccessKey, "AWS_SESSION_TOKEN=" + v.SessionToken}}, "--token", "3")
	bash(t, a.Dir, `echo x > f && rm f && sync . && echo y > g`) // sync .: the delete is in the bucket
	st := readObject(t, gw, bucket, "f")
	if !st.tombstone {
		t.Fatalf("f after rm: %+v; want a tombstone (MinIO's DELETE ignores If-Match)", st)
	}
	tags, err := gw.Client().GetObjectTagging(ctx, bucket, "f", minio.GetObjectTaggingOptions{})
	if err != nil || len(tags.ToMap()) != 0 {
		t.Errorf("tombstone tags %v, %v; want none without the rule", tags, err)
	}
	const why = "the credentials may not install the bucket lifecycle rule that removes them (s3:GetLifecycleConfiguration and s3:PutLifecycleConfiguration)"
	if n := strings.Count(a.Log(), "tombstones stay in the bucket for fencefs gc: "+why); n != 1 {
		t.Errorf("the mount log says %d times why tombstones stay; want once:\n%s", n, a.Log())
	}
	out, err := harness.Run(ctx, t, gw, nil, "status", a.Dir)
	if err != nil || !strings.Contains(out, "kept for fencefs gc: "+why) {
		t.Errorf("fencefs status: %v\n%s", err, out)
	}
}
