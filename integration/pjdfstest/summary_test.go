package main

import (
	"strings"
	"testing"
)

// TestParseProveCountsFailedSubtestsPerGroup reads a prove summary as prove
// 3.x prints it: failed counts add up per group, files that only passed
// TODO tests count nothing, and the total comes from the Files= line.
func TestParseProveCountsFailedSubtestsPerGroup(t *testing.T) {
	out := `/p/tests/chmod/00.t .. ok
Test Summary Report
-------------------
/p/tests/chown/00.t          (Wstat: 0 Tests: 1280 Failed: 0)
  TODO passed:   1054, 1058
/p/tests/link/00.t           (Wstat: 256 (exited 1) Tests: 202 Failed: 150)
  Failed tests:  4-15
/p/tests/rename/00.t         (Wstat: 0 Tests: 122 Failed: 30)
  Failed tests:  8-10
/p/tests/rename/24.t         (Wstat: 0 Tests: 13 Failed: 4)
  Failed tests:  4-5, 8-9
Files=238, Tests=8798, 276 wallclock secs ( 1.79 usr  0.45 sys + 54.10 cusr 14.14 csys = 70.48 CPU)
Result: FAIL
`
	s := parseProve(out)
	want := summary{"rename": 34, "link": 150, "chown": 0, failedKey: 184, totalKey: 8798}
	for k, v := range want {
		if s[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, s[k], v, s)
		}
	}
	var b strings.Builder
	printTable(&b, []string{"allow-other"}, map[string]summary{"allow-other": s})
	if !strings.Contains(b.String(), "| allow-other | 184 / 8798 | 34 | 150 | 34 |") {
		t.Errorf("table:\n%s", b.String())
	}
}
