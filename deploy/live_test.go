package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
)

// exported maps every series name a scrape showed to its label names. A
// histogram x shows as x_bucket (with le), x_sum and x_count, a summary as
// x (with quantile), x_sum and x_count, as PromQL sees them.
type exported map[string]map[string]bool

// targetLabels are attached by Prometheus to every scraped series.
var targetLabels = map[string]bool{"instance": true, "job": true}

// prometheusSeries are series Prometheus itself makes for every target
// (with only the target labels).
var prometheusSeries = map[string]bool{"up": true}

func parseExposition(t *testing.T, body string) exported {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	exp := exported{}
	add := func(name string, m *dto.Metric, extra string) {
		if exp[name] == nil {
			exp[name] = map[string]bool{}
		}
		for _, l := range m.GetLabel() {
			exp[name][l.GetName()] = true
		}
		if extra != "" {
			exp[name][extra] = true
		}
	}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				add(name+"_bucket", m, "le")
				add(name+"_sum", m, "")
				add(name+"_count", m, "")
			case dto.MetricType_SUMMARY:
				add(name, m, "quantile")
				add(name+"_sum", m, "")
				add(name+"_count", m, "")
			default:
				add(name, m, "")
			}
		}
	}
	return exp
}

func (e exported) merge(o exported) {
	for name, ls := range o {
		if e[name] == nil {
			e[name] = map[string]bool{}
		}
		maps.Copy(e[name], ls)
	}
}

// unexported lists what expr names that exp does not have: a metric
// nobody exports, a matcher label the metric does not carry, a grouping
// (or label_values) label none of the expression's metrics carries.
func (e exported) unexported(expr, extraLabel string) ([]string, error) {
	refs, err := promqlRefs(expr)
	if err != nil {
		return nil, err
	}
	var problems []string
	carried := func(l string) bool { // by some metric of the expression
		if targetLabels[l] {
			return true
		}
		for m := range refs.metrics {
			if e[m][l] {
				return true
			}
		}
		return false
	}
	for _, m := range slices.Sorted(maps.Keys(refs.metrics)) {
		labels := refs.metrics[m]
		switch {
		case m == "":
			for l := range labels {
				if l != "__name__" && !targetLabels[l] && !e.anyCarries(l) {
					problems = append(problems, fmt.Sprintf("label %s (in a bare selector) is not exported", l))
				}
			}
			continue
		case prometheusSeries[m]:
		case e[m] == nil:
			problems = append(problems, fmt.Sprintf("metric %s is not exported", m))
			continue
		}
		for _, l := range slices.Sorted(maps.Keys(labels)) {
			if l != "__name__" && !targetLabels[l] && !e[m][l] {
				problems = append(problems, fmt.Sprintf("metric %s has no label %s", m, l))
			}
		}
	}
	for _, l := range slices.Sorted(maps.Keys(refs.grouping)) {
		if !carried(l) {
			problems = append(problems, fmt.Sprintf("grouping label %s is on none of its metrics", l))
		}
	}
	if extraLabel != "" && !carried(extraLabel) {
		problems = append(problems, fmt.Sprintf("label_values label %s is on none of its metrics", extraLabel))
	}
	return problems, nil
}

func (e exported) anyCarries(l string) bool {
	for _, ls := range e {
		if ls[l] {
			return true
		}
	}
	return false
}

// TestUnexportedNamesAreFound: the check below fails on each kind of
// mistake a query can make (so that its passing means something).
func TestUnexportedNamesAreFound(t *testing.T) {
	exp := exported{
		"fencefs_mount_up":   {},
		"fencefs_x_total":    {"op": true},
		"h_seconds_bucket":   {"op": true, "le": true},
		"h_seconds_count":    {"op": true},
		"fencefs_lease_held": {"lease": true},
	}
	for _, tc := range []struct {
		expr, label string
		want        string // "" = no problem
	}{
		{`fencefs_mount_up == 0`, "", ""},
		{`sum by (op, instance) (rate(fencefs_x_total{op="put",job="j"}[5m]))`, "", ""},
		{`histogram_quantile(0.9, sum by (le, op) (rate(h_seconds_bucket[5m])))`, "", ""},
		{`up{job="fencefs"} == 0`, "", ""},
		{`fencefs_lease_held`, "lease", ""},
		{`fencefs_mount_upp == 0`, "", "metric fencefs_mount_upp is not exported"},
		{`rate(h_seconds[5m])`, "", "metric h_seconds is not exported"},
		{`fencefs_x_total{outcome="ok"}`, "", "metric fencefs_x_total has no label outcome"},
		{`sum by (result) (fencefs_x_total)`, "", "grouping label result is on none of its metrics"},
		{`fencefs_mount_up`, "lease", "label_values label lease is on none of its metrics"},
		{`{op="put"} or {nope="x"}`, "", "label nope (in a bare selector) is not exported"},
	} {
		got, err := exp.unexported(tc.expr, tc.label)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		if g := strings.Join(got, "; "); g != tc.want {
			t.Errorf("unexported(%q, %q) = %q, want %q", tc.expr, tc.label, g, tc.want)
		}
	}
}

// TestEveryQueryNamesOnlyExportedMetricsAndLabels scrapes a live mount
// (the real binary, a real FUSE mount, the real gateway) and a live
// `fencefs run` holding a lease on it, after exercising both enough that
// every labelled metric has children (a write, a fenced refusal, retried
// and fast-failed S3 requests, lease renewals), and fails if an alert rule or a dashboard
// query names a metric or label that neither exports.
func TestEveryQueryNamesOnlyExportedMetricsAndLabels(t *testing.T) {
	harness.RequireFUSE(t)
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	proxy := harness.NewProxy(t, gw.Addr)
	mountAddr, runAddr := closedPort(t), closedPort(t)
	fs := harness.Mount(t, gw, bucket, "--endpoint", proxy.Endpoint(), "--metrics-addr", mountAddr,
		"--refresh-interval", "100ms", "--holder", "ops-a")
	run := startRun(t, gw, fs.Dir, runAddr)

	scrape := func(addr string) string {
		body, _ := tryScrape(ctx, addr) // "" until it listens
		return body
	}
	waitUntil(ctx, t, "fencefs run holds the lease, has renewed it and its command wrote through the mount", func() bool {
		m := scrape(runAddr)
		_, err := os.Stat(fs.Path("led.txt"))
		return strings.Contains(m, `fencefs_lease_held{lease="ops"} 1`) && strings.Contains(m, `fencefs_lease_renewals_total{`) && err == nil
	}, run)
	if err := os.WriteFile(fs.Path("a.txt"), []byte("written by the test"), 0o644); err != nil {
		t.Fatalf("write through the mount: %v", err)
	}
	// Connections reset: requests fail and are retried, the storage
	// counts as down and calls fail fast.
	proxy.Reset(t)
	waitUntil(ctx, t, "the mount retries S3 requests, then fails them fast", func() bool {
		m := scrape(mountAddr)
		return strings.Contains(m, "fencefs_s3_retries_total{") && strings.Contains(m, "fencefs_s3_fast_failures_total{")
	}, run)
	proxy.Unreset(t)
	// A newer epoch fences the mount; its next write is refused.
	if out, err := harness.Run(ctx, t, gw, nil, "epoch", "raise", bucket, "auto"); err != nil {
		t.Fatalf("epoch raise: %v\n%s", err, out)
	}
	waitUntil(ctx, t, "the mount sees it is fenced", func() bool {
		return strings.Contains(scrape(mountAddr), `fencefs_fencing_state{state="fenced"} 1`)
	}, run)
	if err := os.WriteFile(fs.Path("a.txt"), []byte("refused"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write on the fenced mount: %v, want EROFS", err)
	}

	exp := parseExposition(t, mustScrape(t, mountAddr))
	exp.merge(parseExposition(t, mustScrape(t, runAddr)))
	for _, must := range []string{"fencefs_fencing_fenced_refusals_total", "fencefs_fuse_errors_total", "fencefs_s3_retries_total", "fencefs_s3_fast_failures_total", "fencefs_lease_renewals_total"} {
		if exp[must] == nil {
			t.Errorf("the scrapes lack %s: the exercise above did not reach it", must)
		}
	}
	var queries []dashboardQuery
	for _, r := range loadRules(t) {
		queries = append(queries, dashboardQuery{where: "alert " + r.Alert, expr: r.Expr})
	}
	queries = append(queries, loadDashboard(t)...)
	for _, q := range queries {
		problems, err := exp.unexported(q.expr, q.label)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s\n\t%s", q.where, p, strings.ReplaceAll(q.expr, "\n", " "))
		}
	}
}

// tryScrape GETs addr's /metrics.
func tryScrape(ctx context.Context, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return string(b), err
}

func mustScrape(t *testing.T, addr string) string {
	t.Helper()
	code, body := harness.Scrape(t, "http://"+addr+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET %s/metrics: %d", addr, code)
	}
	return body
}

// runProc is a `fencefs run` under test.
type runProc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func (p *runProc) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// startRun starts `fencefs run --lease ops` on the mount at mnt with its
// metrics at addr; its command writes led.txt through the mount and sleeps.
// Cleanup stops it with SIGTERM (forwarded to the command) and waits.
func startRun(t *testing.T, gw *gateway.Gateway, mnt, addr string) *runProc {
	t.Helper()
	p := &runProc{log: filepath.Join(t.TempDir(), "run.log"), done: make(chan struct{})}
	out, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// A 9 s lease leaves each renewal 4 s for its PUT: a loaded machine
	// must not make the run lose it (and exit) while the test goes on.
	p.cmd = exec.Command(harness.Binary(t), "run", "--lease", "ops", "--mount", mnt, "--endpoint", gw.Endpoint,
		"--ttl", "9s", "--metrics-addr", addr, "--",
		"sh", "-c", `echo led > "$FENCEFS_MOUNT/led.txt" && exec sleep 600`)
	p.cmd.Env = append(os.Environ(), gw.Env()...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Errorf("fencefs run did not stop within 30 s of SIGTERM; log:\n%s", p.output())
		}
	})
	return p
}

// waitUntil polls cond every 20 ms until it holds, or fails the test when
// ctx ends or the run process exits first (with its log).
func waitUntil(ctx context.Context, t *testing.T, what string, cond func() bool, run *runProc) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s; fencefs run log:\n%s", what, run.output())
		case <-run.done:
			t.Fatalf("fencefs run exited while waiting until %s; log:\n%s", what, run.output())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
