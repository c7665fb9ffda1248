package fusefs

import (
	"slices"
	"testing"
)

// TestStreamDispatchesOnlyBelowWhatWasWrittenWithoutAGap checks the
// bookkeeping that keeps a part from being sent while a write below its end
// is still to come (the kernel may pass one writer's writes out of order).
func TestStreamDispatchesOnlyBelowWhatWasWrittenWithoutAGap(t *testing.T) {
	tests := []struct {
		name       string
		writes     [][2]int64
		wantFilled int64
		wantSpans  [][2]int64
	}{
		{"in order", [][2]int64{{0, 10}, {10, 20}, {20, 25}}, 25, nil},
		{"one write ahead, then the gap filled", [][2]int64{{0, 10}, {20, 30}, {10, 20}}, 30, nil},
		{"a gap left open", [][2]int64{{0, 10}, {20, 30}, {30, 40}}, 10, [][2]int64{{20, 40}}},
		{"overlapping spans merge", [][2]int64{{0, 5}, {20, 30}, {25, 35}, {40, 50}}, 5, [][2]int64{{20, 35}, {40, 50}}},
		{"a rewrite below filled changes nothing", [][2]int64{{0, 10}, {2, 4}}, 10, nil},
		{"many writes ahead close at once", [][2]int64{{0, 1}, {3, 4}, {2, 3}, {5, 6}, {1, 2}, {4, 5}}, 6, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := &streamUpload{}
			for _, w := range tt.writes {
				u.wrote(w[0], w[1])
			}
			if u.filled != tt.wantFilled || !slices.Equal(u.spans, tt.wantSpans) {
				t.Fatalf("after %v: filled %d, spans %v; want %d, %v", tt.writes, u.filled, u.spans, tt.wantFilled, tt.wantSpans)
			}
		})
	}
}
