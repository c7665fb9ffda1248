package history

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
)

var replay = flag.String("replay", "", "check this saved history.json again (TestReplay)")

func TestMain(m *testing.M) {
	if spec := os.Getenv(WorkerEnv); spec != "" {
		os.Exit(RunWorker(spec))
	}
	if secs := os.Getenv(HogEnv); secs != "" {
		os.Exit(RunHog(secs))
	}
	os.Exit(harness.Main(m))
}

// servers maps the names `make history SERVER=…` takes to server kinds.
var servers = map[string]gateway.Kind{
	"gateway": gateway.Versity, "versitygw": gateway.Versity,
	"minio": gateway.MinIO, "minio4": gateway.MinIOErasure, "minio-4drives": gateway.MinIOErasure,
}

// TestHistory runs the history checker against the real binary
// ($FENCEFS_BIN) on each server of $FENCEFS_HISTORY_SERVERS (gateway,minio)
// for $FENCEFS_HISTORY_DURATION (60s) each, and fails on any anomaly. A
// failing history is saved with porcupine's visualization under
// $FENCEFS_HISTORY_DIR (testdata/out); with FENCEFS_HISTORY_DIR set, every
// history is saved.
func TestHistory(t *testing.T) {
	duration := 60 * time.Second
	if d := os.Getenv("FENCEFS_HISTORY_DURATION"); d != "" {
		var err error
		if duration, err = time.ParseDuration(d); err != nil {
			t.Fatalf("FENCEFS_HISTORY_DURATION: %v", err)
		}
	}
	if testing.Short() {
		duration = 20 * time.Second
	}
	names := os.Getenv("FENCEFS_HISTORY_SERVERS")
	if names == "" {
		names = "gateway,minio"
	}
	for _, name := range strings.Split(names, ",") {
		kind, ok := servers[strings.TrimSpace(name)]
		if !ok {
			t.Fatalf("FENCEFS_HISTORY_SERVERS: unknown server %q (gateway, minio, minio4)", name)
		}
		t.Run(string(kind), func(t *testing.T) {
			start := time.Now()
			cfg := Config{Kind: kind, Duration: duration, Churn: 1}
			if os.Getenv("FENCEFS_HISTORY_DURATION") == "" {
				// make test's short runs bound the ETag-ABA window to 2
				// minutes (the nemesis delays no request by more than
				// ~4 s): a sweep that finds both shapes of a small
				// object's content held waits out the window
				// (docs/HISTORY.md, "What it cannot catch"), and the
				// default 15 minutes would outlast the test. make
				// history keeps the default.
				cfg.MountArgs = []string{"--signed-request-validity", "2m"}
			}
			if n := os.Getenv("FENCEFS_HISTORY_CHURN"); n != "" {
				if _, err := fmt.Sscan(n, &cfg.Churn); err != nil {
					t.Fatalf("FENCEFS_HISTORY_CHURN: %v", err)
				}
			}
			if n := os.Getenv("FENCEFS_HISTORY_HOGS"); n != "" {
				if _, err := fmt.Sscan(n, &cfg.Hogs); err != nil {
					t.Fatalf("FENCEFS_HISTORY_HOGS: %v", err)
				}
			}
			if f := os.Getenv("FENCEFS_HISTORY_SKIP"); f != "" {
				cfg.Skip = strings.Split(f, ",")
			}
			if f := os.Getenv("FENCEFS_HISTORY_FAULTS"); f != "" {
				cfg.Faults = strings.Split(f, ",")
			}
			if d, ok := os.LookupEnv("FENCEFS_HISTORY_DIR"); ok {
				cfg.LogDir = filepath.Join(d, fmt.Sprintf("%s-%s-logs", kind, start.Format("20060102-150405")))
			}
			h := Run(t, cfg)
			r := Check(h, checkTimeout(duration))
			summary := r.Summary(h)
			t.Logf("%s (run %v, check %v, load %s)", summary, time.Since(start).Round(time.Second), r.CheckTime.Round(time.Millisecond), h.LoadAvg)
			t.Logf("outcomes: %v", r.Outcomes)
			if f := os.Getenv("FENCEFS_HISTORY_SUMMARY"); f != "" {
				if fh, err := os.OpenFile(f, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
					fmt.Fprintln(fh, summary)
					fh.Close()
				}
			}
			dir, keep := os.LookupEnv("FENCEFS_HISTORY_DIR")
			if !keep {
				dir = filepath.Join("testdata", "out")
			}
			if keep || len(r.Anomalies) > 0 || len(r.Undecided) > 0 {
				dir = filepath.Join(dir, fmt.Sprintf("%s-%s", kind, h.Started.Format("20060102-150405")))
				files, err := r.Save(h, dir)
				if err != nil {
					t.Errorf("save the history: %v", err)
				}
				abs, _ := filepath.Abs(dir)
				t.Logf("history saved in %s: %v (replay: go test ./integration/history -run TestReplay -replay %s/history.json)", abs, files, abs)
			}
			for _, a := range r.Anomalies {
				t.Errorf("%s %s: %s", a.Kind, a.File, a.Text)
			}
			if len(r.Undecided) > 0 {
				t.Logf("porcupine did not decide %v in time (not counted as anomalies)", r.Undecided)
			}
			if r.Outcomes["write ok"] == 0 {
				t.Errorf("no write was acknowledged: the history proves nothing")
			}
		})
	}
}

func checkTimeout(run time.Duration) time.Duration {
	if d := os.Getenv("FENCEFS_HISTORY_CHECK_TIMEOUT"); d != "" {
		if t, err := time.ParseDuration(d); err == nil {
			return t
		}
	}
	return max(2*time.Minute, run)
}

// TestReplay checks a saved history again: go test ./integration/history
// -run TestReplay -replay testdata/out/…/history.json. Without -replay it
// replays a history it saves itself (issue 39 §2's shape, a refused write
// landing after a failback), so that what a failing run saves gives the
// same verdict when loaded again; it never skips.
func TestReplay(t *testing.T) {
	path := *replay
	var want string
	if path == "" {
		b := newHB()
		b.bind(0, "m0", 1, 0)
		refused := fmt.Sprintf("f#%d.1/1\n", b.id+1)
		b.add(Op{Kind: KWrite, Flavor: "dup", Process: 0, Mount: 0, Holder: "m0", File: "f", Value: refused,
			Invoke: 30, Written: 31, Complete: 100, Outcome: Failed, Errno: "EROFS"})
		b.bind(1, "m1", 2, 40)
		b.bind(0, "m0", 3, 70)
		b.s3read(true, refused, 101, 102)
		want = kinds(Check(&b.h, 0))
		path = filepath.Join(t.TempDir(), "history.json")
		if err := b.h.Save(path); err != nil {
			t.Fatal(err)
		}
	}
	h, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	r := Check(h, 0)
	t.Log(r.Summary(h))
	if *replay == "" {
		if got := kinds(r); got != want || !strings.Contains(got, "refused-landed") {
			t.Fatalf("replayed anomalies %q, checked before saving %q: want the same, refused-landed among them", got, want)
		}
		return
	}
	for _, a := range r.Anomalies {
		t.Errorf("%s %s: %s", a.Kind, a.File, a.Text)
	}
}
