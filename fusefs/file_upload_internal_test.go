package fusefs

import (
	"slices"
	"testing"

	"github.com/fencefs/fencefs/objstore"
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
			u := &partUpload{}
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
			u := &partUpload{plan: uploadPlan{part: 8 << 20, bound: tt.staging}}
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

// TestStreamPartsFitTheCacheDisk checks how a stream is sized from the room
// the cache disk has for the file: the store's sizes when three of its parts
// fit; else parts of a third of the room (whole MiB, at least 5 MiB) with the
// stream starting past two of them; the store's sizes again when not even
// three 5 MiB parts fit (the write then fails with ENOSPC). The stream's
// bound never exceeds the room.
func TestStreamPartsFitTheCacheDisk(t *testing.T) {
	const mib = 1 << 20
	def := objstore.Sizing{}                                                 // 8 MiB parts, 16 MiB threshold
	five := objstore.Sizing{PartSize: 5 * mib, MultipartThreshold: 10 * mib} // s3.part_size_mib 5
	big := objstore.Sizing{PartSize: 16 * mib, MultipartThreshold: 32 * mib} // s3.part_size_mib 16
	tests := []struct {
		name    string
		z       objstore.Sizing
		staging int64
		room    int64
		want    uploadPlan
	}{
		{"a large disk keeps the store's sizes", def, 256 * mib, 100 << 30, uploadPlan{start: 16 * mib, part: 8 * mib, bound: 256 * mib}},
		{"an unknown room keeps the store's sizes", def, 256 * mib, -1, uploadPlan{start: 16 * mib, part: 8 * mib, bound: 256 * mib}},
		{"a 64 MiB disk bounds the staging", def, 256 * mib, 64 * mib, uploadPlan{start: 16 * mib, part: 8 * mib, bound: 64 * mib}},
		{"three store parts exactly", def, 256 * mib, 24 * mib, uploadPlan{start: 16 * mib, part: 8 * mib, bound: 24 * mib}},
		{"a 20 MiB disk: 6 MiB parts", def, 256 * mib, 20 * mib, uploadPlan{start: 12 * mib, part: 6 * mib, bound: 20 * mib}},
		{"a 16 MiB disk: 5 MiB parts", def, 256 * mib, 16 * mib, uploadPlan{start: 10 * mib, part: 5 * mib, bound: 16 * mib}},
		{"three minimum parts exactly", def, 256 * mib, 15 * mib, uploadPlan{start: 10 * mib, part: 5 * mib, bound: 15 * mib}},
		{"below three minimum parts: the store's sizes", def, 256 * mib, 15*mib - 1, uploadPlan{start: 16 * mib, part: 8 * mib, bound: 15*mib - 1}},
		{"a 12 MiB disk: the store's sizes", def, 256 * mib, 12 * mib, uploadPlan{start: 16 * mib, part: 8 * mib, bound: 12 * mib}},
		{"5 MiB store parts on a 12 MiB disk, as before", five, 256 * mib, 12 * mib, uploadPlan{start: 10 * mib, part: 5 * mib, bound: 12 * mib}},
		{"16 MiB store parts on a 32 MiB disk", big, 256 * mib, 32 * mib, uploadPlan{start: 20 * mib, part: 10 * mib, bound: 32 * mib}},
		{"a staging bound below the room", def, 32 * mib, 100 << 30, uploadPlan{start: 16 * mib, part: 8 * mib, bound: 32 * mib}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := planUpload(tt.z, tt.staging, tt.room); got != tt.want {
				t.Fatalf("planUpload(room %d) = %+v; want %+v", tt.room, got, tt.want)
			}
		})
	}
	t.Run("any disk of three minimum parts holds three parts, and they do not grow past a third of it", func(t *testing.T) {
		for room := 15 * int64(mib); room <= 40*mib; room += mib / 4 {
			p := planUpload(def, 256*mib, room)
			u := &partUpload{plan: p}
			if 3*p.part > room || p.start > 2*p.part || p.part < objstore.MinPartSize {
				t.Fatalf("room %d: %+v", room, p)
			}
			if last := u.sizeOf(9999); 3*last > room {
				t.Fatalf("room %d: part 9999 is %d bytes, more than a third of the room", room, last)
			}
		}
	})
}
