package deploy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// queryRefs are the metric and label names one PromQL expression uses.
// The tokenizer below is deliberately small (the Prometheus parser would
// bring the whole Prometheus module into go.mod): it knows strings,
// comments, numbers, durations, Grafana variables, label matchers and
// grouping clauses, and takes every other identifier not followed by "("
// (a function or aggregation) and not a keyword to be a metric name.
// Syntax is checked separately, by promtool.
type queryRefs struct {
	// metrics maps each metric selected to the label names its matchers
	// use. The key "" holds a bare {…} selector's labels.
	metrics map[string]map[string]bool
	// grouping holds the label names of by, without, on, ignoring,
	// group_left and group_right clauses.
	grouping map[string]bool
}

// groupingWords take a parenthesised label list.
var groupingWords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// keywords are identifiers that are neither metrics nor functions.
var keywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true, "inf": true, "nan": true}

// aggregations may be followed by a grouping clause before their "(".
var aggregations = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true}

// promqlRefs extracts the metric and label names of expr; it fails on
// unbalanced strings, brackets or matchers.
func promqlRefs(expr string) (queryRefs, error) {
	refs := queryRefs{metrics: map[string]map[string]bool{}, grouping: map[string]bool{}}
	s := expr
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(s, i)
			if err != nil {
				return refs, err
			}
			i = end
		case c == '[':
			end := strings.IndexByte(s[i:], ']')
			if end < 0 {
				return refs, fmt.Errorf("unclosed [ at %d in %q", i, expr)
			}
			i += end + 1
		case c == '$':
			i = skipVariable(s, i)
		case isDigit(c) || (c == '.' && i+1 < len(s) && isDigit(s[i+1])):
			for i < len(s) && (isIdentChar(s[i]) || s[i] == '.') {
				i++ // 1.5, 1e3, 0x1f, 5m (after offset)
			}
		case isIdentStart(c):
			end, err := refs.identifier(s, i)
			if err != nil {
				return refs, fmt.Errorf("%v in %q", err, expr)
			}
			i = end
		case c == '{':
			labels := map[string]bool{}
			end, err := parseMatchers(s, i, labels)
			if err != nil {
				return refs, fmt.Errorf("%v in %q", err, expr)
			}
			i = end
			refs.add("", labels)
		default:
			i++
		}
	}
	return refs, nil
}

// identifier reads the identifier at s[i] (a metric, a function, a
// keyword or a grouping clause with its label list) and returns the index
// after it (and after its matchers or label list).
func (r queryRefs) identifier(s string, i int) (int, error) {
	start := i
	for i < len(s) && isIdentChar(s[i]) {
		i++
	}
	word := s[start:i]
	next := skipSpace(s, i)
	switch {
	case groupingWords[strings.ToLower(word)]:
		if next >= len(s) || s[next] != '(' {
			return i, nil // group_left without labels
		}
		end := strings.IndexByte(s[next:], ')')
		if end < 0 {
			return i, fmt.Errorf("unclosed %s(", word)
		}
		for _, l := range strings.Split(s[next+1:next+end], ",") {
			if l = strings.TrimSpace(l); l == "" {
				continue
			}
			if !isLabelName(l) {
				return i, fmt.Errorf("%s (%s): %q is not a label name", word, s[next+1:next+end], l)
			}
			r.grouping[l] = true
		}
		return next + end + 1, nil
	case keywords[strings.ToLower(word)], aggregations[strings.ToLower(word)]:
		return i, nil
	case next < len(s) && s[next] == '(':
		return i, nil // a function
	}
	labels := map[string]bool{}
	if next < len(s) && s[next] == '{' {
		end, err := parseMatchers(s, next, labels)
		if err != nil {
			return i, err
		}
		i = end
	}
	r.add(word, labels)
	return i, nil
}

func (r queryRefs) add(metric string, labels map[string]bool) {
	if r.metrics[metric] == nil {
		r.metrics[metric] = map[string]bool{}
	}
	maps.Copy(r.metrics[metric], labels)
}

// parseMatchers reads {name op "value", …} starting at s[i] == '{',
// adding each label name to labels, and returns the index after '}'.
func parseMatchers(s string, i int, labels map[string]bool) (int, error) {
	i++ // {
	for {
		i = skipSpace(s, i)
		if i >= len(s) {
			return i, fmt.Errorf("unclosed {")
		}
		switch c := s[i]; {
		case c == '}':
			return i + 1, nil
		case c == ',':
			i++
		case isIdentStart(c):
			start := i
			for i < len(s) && isIdentChar(s[i]) {
				i++
			}
			labels[s[start:i]] = true
			i = skipSpace(s, i)
			for i < len(s) && strings.IndexByte("=!~", s[i]) >= 0 {
				i++
			}
			i = skipSpace(s, i)
			if i >= len(s) || strings.IndexByte("\"'`", s[i]) < 0 {
				return i, fmt.Errorf("label %s: matcher without a quoted value", s[start:i])
			}
			end, err := skipString(s, i)
			if err != nil {
				return i, err
			}
			i = end
		default:
			return i, fmt.Errorf("unexpected %q in a label matcher", c)
		}
	}
}

// skipString returns the index after the string literal starting at s[i].
func skipString(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return len(s), fmt.Errorf("unclosed string at %d", i)
}

// skipVariable returns the index after a Grafana variable at s[i] == '$':
// $name, $__name or ${name…}.
func skipVariable(s string, i int) int {
	i++
	if i < len(s) && s[i] == '{' {
		if end := strings.IndexByte(s[i:], '}'); end >= 0 {
			return i + end + 1
		}
		return len(s)
	}
	for i < len(s) && isIdentChar(s[i]) {
		i++
	}
	return i
}

func skipSpace(s string, i int) int {
	for i < len(s) && strings.IndexByte(" \t\r\n", s[i]) >= 0 {
		i++
	}
	return i
}

func isLabelName(l string) bool {
	for i := 0; i < len(l); i++ {
		if l[i] == ':' || !isIdentChar(l[i]) || (i == 0 && isDigit(l[i])) {
			return false
		}
	}
	return l != ""
}

func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool { return c == '_' || c == ':' || (c|0x20 >= 'a' && c|0x20 <= 'z') }
func isIdentChar(c byte) bool  { return isIdentStart(c) || isDigit(c) }

// TestPromQLRefsFindEveryMetricAndLabelName pins the tokenizer the
// exported-names check relies on: a name it missed would go unchecked.
func TestPromQLRefsFindEveryMetricAndLabelName(t *testing.T) {
	for _, tc := range []struct {
		name     string
		expr     string
		metrics  string // "metric:label,label metric2:" sorted
		grouping string
	}{
		{"bare metric with a comparison", `fencefs_mount_up == 0`, "fencefs_mount_up:", ""},
		{"matchers and a grouping", `max by (instance, job) (fencefs_fencing_state{state="fenced"}) > 0`,
			"fencefs_fencing_state:state", "instance,job"},
		{"range, regex matchers, unless on", "(sum by (instance) (rate(a_total{outcome=~\"x|y\", op!=\"z\"}[5m])) > 0)\nunless on (instance)\n(sum by (instance) (rate(a_total{outcome!~\"x\"}[5m])) > 0)",
			"a_total:op,outcome", "instance"},
		{"histogram quantile with le", `histogram_quantile(0.99, sum by (le, op) (rate(h_seconds_bucket{job=~"$job"}[$__rate_interval])))`,
			"h_seconds_bucket:job", "le,op"},
		{"grouping after the aggregation, numbers, offset", `sum(rate(c_total[5m] offset 1h)) without (op) / 15 * 60 > 1e3`, "c_total:", "op"},
		{"strings with escapes and braces are skipped", `count_values("v{x}", m{a="q\"}{b"}) or label_replace(n, "dst", "$1", "src", "(.*)")`,
			"m:a n:", ""},
		{"keywords and group_left", `a * on (lease) group_left (how) b and bool c`, "a: b: c:", "how,lease"},
		{"bare selector", `{__name__="x", job="j"}`, ":__name__,job", ""},
		{"time() is a function, not a metric", `time() - ts_seconds{lease=~"$lease"} and on (lease, instance) held == 1`,
			"held: ts_seconds:lease", "instance,lease"},
		{"comments are skipped", "x # not_a_metric{y=\"\"}\n+ z", "x: z:", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refs, err := promqlRefs(tc.expr)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for m, ls := range refs.metrics {
				got = append(got, m+":"+strings.Join(slices.Sorted(maps.Keys(ls)), ","))
			}
			slices.Sort(got)
			if g := strings.Join(got, " "); g != tc.metrics {
				t.Errorf("metrics = %q, want %q", g, tc.metrics)
			}
			if g := strings.Join(slices.Sorted(maps.Keys(refs.grouping)), ","); g != tc.grouping {
				t.Errorf("grouping = %q, want %q", g, tc.grouping)
			}
		})
	}
	for _, bad := range []string{`m{a="x"`, `m{a=x}`, `m{a="x}`, `rate(m[5m)`, `sum by (a (m)`} {
		if _, err := promqlRefs(bad); err == nil {
			t.Errorf("promqlRefs(%q) = nil error, want one", bad)
		}
	}
}
