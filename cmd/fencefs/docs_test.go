package main

// docs/CLI.md cannot drift from the binary: every metric the binary
// registers and every flag of every command is named there.

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"github.com/fencefs/fencefs/lease"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
	"github.com/fencefs/fencefs/objstore/s3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func cliDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "CLI.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// recorder is a prometheus.Registerer that keeps the name of every metric
// registered with it, children or not (a scrape shows a vector only once it
// has a child).
type recorder struct{ names map[string]bool }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *recorder) Unregister(prometheus.Collector) bool { return true }

// wantNamed fails for every name doc does not mention as a whole word.
func wantNamed(t *testing.T, doc, what string, names []string) {
	t.Helper()
	sort.Strings(names)
	for _, n := range names {
		if !regexp.MustCompile(`(^|[^a-z0-9_-])` + regexp.QuoteMeta(n) + `($|[^a-z0-9_])`).MatchString(doc) {
			t.Errorf("docs/CLI.md does not name the %s %s", what, n)
		}
	}
}

func fencefsMetrics(names map[string]bool) []string {
	var out []string
	for n := range names {
		if strings.HasPrefix(n, "fencefs_") {
			out = append(out, n)
		}
	}
	return out
}

// TestEveryMetricOfTheStorageFencingAndLeaseIsDocumented registers the
// metrics of every package the binary wires (but the FUSE layer, which
// registers at mount: see TestEveryMetricOfAMountIsDocumented) with a
// recorder.
func TestEveryMetricOfTheStorageFencingAndLeaseIsDocumented(t *testing.T) {
	rec := &recorder{names: map[string]bool{}}
	rec.MustRegister(buildInfo(), mountUp(&mountRun{}))
	registerProbeMetrics(rec, objstore.Capabilities{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // nothing is sent: the packages register at construction
	if st, err := s3.New(ctx, s3.Config{Endpoint: "http://127.0.0.1:1", Region: "us-east-1", Bucket: "docs-bucket", Registerer: rec}); err == nil {
		st.Close()
	}
	store := memstore.New()
	if _, err := fencing.New(store, fencing.Config{Mode: fencing.ModeStrict, Registerer: rec}); err != nil {
		t.Fatal(err)
	}
	_, _ = lease.Acquire(ctx, store, "docs", lease.Options{Registerer: rec})
	for _, prefix := range []string{"fencefs_s3_", "fencefs_fencing_", "fencefs_lease_", "fencefs_build_info", "fencefs_mount_up", "fencefs_probe_check"} {
		found := false
		for n := range rec.names {
			found = found || strings.HasPrefix(n, prefix)
		}
		if !found {
			t.Errorf("no metric %s* was registered: the test no longer sees what the binary registers", prefix)
		}
	}
	wantNamed(t, cliDoc(t), "metric", fencefsMetrics(rec.names))
}

// TestEveryMetricOfAMountIsDocumented scrapes a live mount's /metrics.
func TestEveryMetricOfAMountIsDocumented(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	fs, addr := mountWithMetrics(t, gw, bucket, "--token", "1")
	if _, err := os.Stat(fs.Path("missing")); err == nil {
		t.Fatal("stat of a missing name succeeded")
	}
	_, m := harness.Scrape(t, "http://"+addr+"/metrics")
	names := map[string]bool{}
	for _, l := range strings.Split(m, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
		}
	}
	if !names["fencefs_fuse_op_duration_seconds"] {
		t.Fatalf("the scrape has no fencefs_fuse_op_duration_seconds:\n%s", m)
	}
	wantNamed(t, cliDoc(t), "metric", fencefsMetrics(names))
}

// TestEveryFlagIsInTheTableOrTheCommandsText: a flag of the configuration
// (config.RegisterFlags) must be in the table of every key; any other flag
// must be named in docs/CLI.md.
func TestEveryFlagIsDocumented(t *testing.T) {
	doc := cliDoc(t)
	table := map[string]bool{}
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "| `") {
			for _, m := range regexp.MustCompile("`(--[a-z0-9-]+)`").FindAllStringSubmatch(l, -1) {
				table[m[1]] = true
			}
		}
	}
	keyFlags := pflag.NewFlagSet("keys", pflag.ContinueOnError)
	config.RegisterFlags(keyFlags, config.GroupAll)
	var walk func(c *cobra.Command)
	var other []string
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			switch {
			case f.Hidden || f.Name == "help":
			case keyFlags.Lookup(f.Name) != nil && f.Name != config.FlagOptions:
				if !table["--"+f.Name] {
					t.Errorf("--%s (%s) is not in the table of every key in docs/CLI.md", f.Name, c.CommandPath())
				}
			default:
				other = append(other, "--"+f.Name)
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRootCmd())
	wantNamed(t, doc, "flag", dedupe(other))
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
