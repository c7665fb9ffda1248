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

// TestStreamPartsGrowSoThatAnyFileFitsInTenThousandParts checks the part
// sizes of a stream: the store's part size for the first 1000 parts, then
// doubling every 1000 parts up to a quarter of the staging bound, so that
// 10,000 parts hold a file far larger than 10,000 parts of the base size.
func TestStreamPartsGrowSoThatAnyFileFitsInTenThousandParts(t *testing.T) {
	tests := []struct {
		name      string
		staging   int64
		number    int
		want      int64
		wantTotal int64 // the size 9,999 parts hold (0: not checked)
	}{
		{"the first part", 256 << 20, 1, 8 << 20, 0},
		{"part 1000", 256 << 20, 1000, 8 << 20, 0},
		{"part 1001 doubles", 256 << 20, 1001, 16 << 20, 0},
		{"capped at a quarter of the bound", 256 << 20, 9999, 64 << 20, 500e9},
		{"a small bound keeps the base size", 16 << 20, 9999, 8 << 20, 0},
		{"no bound doubles while parts stay within 5 GiB", 1 << 62, 9999, 4 << 30, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := &streamUpload{partSize: 8 << 20, fsys: &filesystem{opts: Options{StreamStaging: tt.staging}}}
			if got := u.sizeOf(tt.number); got != tt.want {
				t.Fatalf("part %d: %d bytes, want %d", tt.number, got, tt.want)
			}
			if tt.wantTotal > 0 {
				var total int64
				for n := 1; n < 10000; n++ {
					total += u.sizeOf(n)
				}
				if total < tt.wantTotal {
					t.Fatalf("9,999 parts hold %d bytes, want at least %d", total, tt.wantTotal)
				}
			}
		})
	}
}
