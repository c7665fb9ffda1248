// Package deploy holds no Go code, only the tests of what operators install
// from deploy/: the Prometheus alerting rules (promtool check and test
// rules), the Grafana dashboard (its queries parse, and name only metrics
// and labels a live mount and a live `fencefs run` export), the systemd
// units (systemd-analyze verify) and the fstab example.
package deploy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
)

func TestMain(m *testing.M) { os.Exit(harness.Main(m)) }

const (
	rulesFile     = "prometheus/fencefs-alerts.yml"
	rulesTestFile = "prometheus/fencefs-alerts_test.yml"
	dashboardFile = "grafana/fencefs.json"
)

// promtool is $FENCEFS_PROMTOOL (the Makefile sets it to bin/promtool,
// which `make deps` extracts from Debian's prometheus package), else
// bin/promtool of the repository, else promtool on PATH; without one the
// test skips (fails in CI).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := gateway.FindTool("FENCEFS_PROMTOOL", "promtool", errors.New("not found"))
	if err != nil {
		gateway.SkipOrFail(t, "promtool: %v ($FENCEFS_PROMTOOL, bin/promtool or PATH; make deps installs it)", err)
	}
	return p
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// runTool runs a command in dir and fails the test with its output if it
// exits non-zero.
func runTool(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestAlertRulesPassPromtoolCheckAndUnitTests: the rules parse, and every
// alert fires on the series of fencefs-alerts_test.yml meant to trigger it
// and stays quiet on the healthy ones.
func TestAlertRulesPassPromtoolCheckAndUnitTests(t *testing.T) {
	pt := promtool(t)
	out := runTool(t, ".", pt, "check", "rules", rulesFile)
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool check rules: %s", out)
	}
	runTool(t, ".", pt, "test", "rules", rulesTestFile)
	// Every alert has a unit test, and a runbook entry in OPERATIONS.md.
	tests, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile("../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range loadRules(t) {
		if !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") {
			t.Errorf("alert %s has no test in %s", r.Alert, rulesTestFile)
		}
		if !strings.Contains(string(ops), "### "+r.Alert+"\n") {
			t.Errorf("alert %s has no section \"### %s\" in docs/OPERATIONS.md", r.Alert, r.Alert)
		}
	}
}

// TestAlertRulesTestsCanFail: promtool test rules fails when an alert's
// threshold moves, so the unit tests above pin behaviour.
func TestAlertRulesTestsCanFail(t *testing.T) {
	pt := promtool(t)
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, from, to string }{
		{"dirty age threshold", "> 15 * 60", "> 14 * 60"},
		{"staging disk threshold", "< 0.10", "< 0.01"},
		{"fenced state", `state="fenced"`, `state="active"`},
		{"refused deletes threshold", "delete_failures_total[10m]) > 0", "delete_failures_total[10m]) > 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(string(rules), tc.from) {
				t.Fatalf("%s does not contain %q", rulesFile, tc.from)
			}
			dir := t.TempDir()
			mutated := strings.Replace(string(rules), tc.from, tc.to, 1)
			if err := os.WriteFile(filepath.Join(dir, "fencefs-alerts.yml"), []byte(mutated), 0o644); err != nil {
				t.Fatal(err)
			}
			testYML, err := os.ReadFile(rulesTestFile)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "t.yml"), testYML, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(pt, "test", "rules", "t.yml")
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "FAILED") {
				t.Errorf("promtool test rules passed with %q → %q: %v\n%s", tc.from, tc.to, err, out)
			}
		})
	}
}

// rule is one alerting rule of the rules file.
type rule struct {
	Alert string `yaml:"alert"`
	Expr  string `yaml:"expr"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var rules []rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s holds no rules", rulesFile)
	}
	return rules
}

// dashboardQuery is one PromQL expression of the dashboard: a panel
// target, or the selector of a template variable's label_values(…).
type dashboardQuery struct {
	where string // panel title or variable name
	expr  string
	label string // label_values' label, if any
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

func loadDashboard(t *testing.T) []dashboardQuery {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" {
		t.Errorf("%s has no uid", dashboardFile)
	}
	var qs []dashboardQuery
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			qs = append(qs, dashboardQuery{where: "panel " + strconv.Quote(p.Title), expr: tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, q.Query)
		}
		qs = append(qs, dashboardQuery{where: "variable " + v.Name, expr: m[1], label: m[2]})
	}
	if len(qs) == 0 {
		t.Fatalf("%s holds no queries", dashboardFile)
	}
	return qs
}

// grafanaVars replaces the dashboard's variables by what Grafana would put
// there, so that promtool can parse the expression.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// TestDashboardQueriesAreValidPromQL has promtool parse every dashboard
// query, as recording rules of a scratch rules file.
func TestDashboardQueriesAreValidPromQL(t *testing.T) {
	pt := promtool(t)
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, q := range loadDashboard(t) {
		expr, err := json.Marshal(grafanaVars.Replace(q.expr)) // a JSON string is a YAML string
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "      - record: dashboard:query%d\n        expr: %s\n", i, expr)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard-rules.yml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	runTool(t, dir, pt, "check", "rules", "dashboard-rules.yml")
}

// TestSystemdUnitsVerify runs systemd-analyze verify on both units (with
// ExecStart pointing at the binary under test, as verify checks that it is
// executable); skipped where systemd-analyze is missing (a failure under CI:
// the Debian machines have systemd).
func TestSystemdUnitsVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		gateway.SkipOrFail(t, "systemd-analyze not installed: the unit files are not verified here")
	}
	bin := harness.Binary(t)
	dir := t.TempDir()
	var units []string
	for _, u := range []string{"fencefs@.service", "fencefs-run@.service"} {
		b, err := os.ReadFile(filepath.Join("systemd", u))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "ExecStart=/usr/bin/fencefs ") {
			t.Fatalf("%s: no ExecStart=/usr/bin/fencefs", u)
		}
		inst := strings.Replace(u, "@", "@demo", 1)
		if err := os.WriteFile(filepath.Join(dir, inst), []byte(strings.ReplaceAll(string(b), "/usr/bin/fencefs", bin)), 0o644); err != nil {
			t.Fatal(err)
		}
		units = append(units, "./"+inst)
	}
	cmd := exec.Command(sa, append([]string{"verify"}, units...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestFstabExampleOptionsAreAccepted runs the fstab example's line through
// the binary's helper form (as mount(8) would) with its paths moved into a
// temporary directory and the endpoint at a closed port: every option must
// be accepted, so the mount fails only at the connection.
func TestFstabExampleOptionsAreAccepted(t *testing.T) {
	b, err := os.ReadFile("systemd/fstab.example")
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			fields = strings.Fields(l)
		}
	}
	if len(fields) != 6 || fields[2] != "fuse.fencefs" {
		t.Fatalf("fstab.example: want one line of 6 fields with type fuse.fencefs, got %q", fields)
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "epoch")
	if err := os.WriteFile(tokenFile, []byte("auto\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	closed := closedPort(t)
	opts := strings.Split(fields[3], ",")
	for i, o := range opts {
		k, _, _ := strings.Cut(o, "=")
		switch k {
		case "endpoint":
			opts[i] = "endpoint=http://" + closed
		case "token_file":
			opts[i] = "token_file=" + tokenFile
		case "cache_dir":
			opts[i] = "cache_dir=" + filepath.Join(dir, "cache")
		case "log_file":
			opts[i] = "log_file=" + filepath.Join(dir, "mount.log")
		case "metrics_addr":
			opts[i] = "metrics_addr=" + closedPort(t)
		}
	}
	cmd := exec.Command(harness.Binary(t), fields[0], mnt, "-o", strings.Join(opts, ","))
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "cannot reach") {
		t.Errorf("helper form with the fstab options: %v\n%s\nwant exit 1 \"cannot reach\" (every option accepted)", err, out)
	}
}

// closedPort is a 127.0.0.1 address nothing listens on (a moment ago).
func closedPort(t *testing.T) string {
	t.Helper()
	port, err := gateway.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
