package main

import (
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// summary is one run's failing subtests per group (the directory under
// tests/), plus the whole run's totals under the keys totalKey and
// failedKey.
type summary map[string]int

const (
	totalKey  = "(subtests)"
	failedKey = "(failed)"
	// linkGroup is left out of comparisons: fencefs has no hard links
	// (ENOTSUP) and the suite skips the group on filesystems it knows
	// lack them.
	linkGroup = "link"
)

var (
	// "/x/tests/rename/00.t   (Wstat: 256 (exited 1) Tests: 150 Failed: 39)"
	reportLine = regexp.MustCompile(`/tests/([^/\s]+)/\S+\.t\s+\(Wstat:.*Tests: (\d+) Failed: (\d+)\)`)
	// "Files=237, Tests=8798, 250 wallclock secs"
	totalLine = regexp.MustCompile(`^Files=\d+, Tests=(\d+),`)
)

// parseProve reads prove's output: the "Test Summary Report" lines give
// each failing file's group and failed count.
func parseProve(out string) summary {
	s := summary{}
	for _, line := range strings.Split(out, "\n") {
		if m := reportLine.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[3])
			s[m[1]] += n
			s[failedKey] += n
		} else if m := totalLine.FindStringSubmatch(line); m != nil {
			s[totalKey], _ = strconv.Atoi(m[1])
		}
	}
	return s
}

// printTable writes one markdown row per mode: the failing subtests per
// group (groups with a failure in any mode, most failures first), the
// total, and the total outside the link group.
func printTable(w io.Writer, modes []string, results map[string]summary) {
	count := map[string]int{}
	for _, s := range results {
		for g, n := range s {
			if !strings.HasPrefix(g, "(") && n > 0 {
				count[g] += n
			}
		}
	}
	var groups []string
	for g := range count {
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool {
		if count[groups[i]] != count[groups[j]] {
			return count[groups[i]] > count[groups[j]]
		}
		return groups[i] < groups[j]
	})
	fmt.Fprintf(w, "| mount | failed / subtests | failed outside link | %s |\n", strings.Join(groups, " | "))
	fmt.Fprintf(w, "|---|---|---|%s\n", strings.Repeat("---|", len(groups)))
	for _, mode := range modes {
		s := results[mode]
		cells := make([]string, len(groups))
		for i, g := range groups {
			cells[i] = strconv.Itoa(s[g])
		}
		fmt.Fprintf(w, "| %s | %d / %d | %d | %s |\n", mode, s[failedKey], s[totalKey],
			s[failedKey]-s[linkGroup], strings.Join(cells, " | "))
	}
}
