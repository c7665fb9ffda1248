package main

import (
	"fmt"
	"strconv"
	"strings"
)

// sizeUnits are the suffixes parseSize accepts, longest first.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1},
}

// parseSize parses a byte count such as "1GiB", "64MiB", "4KiB", "512K" or
// "1000" (bytes). Units are binary.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size (examples: 1GiB, 64MiB, 4KiB, 4096)", s)
	}
	return n * mult, nil
}

// sizeString formats a byte count with the largest binary unit that divides
// it: 1073741824 → "1 GiB", 4096 → "4 KiB", 1000 → "1000 B".
func sizeString(n int64) string {
	for _, u := range sizeUnits[:3] {
		if n >= u.mult && n%u.mult == 0 {
			return fmt.Sprintf("%d %s", n/u.mult, u.suffix)
		}
	}
	return fmt.Sprintf("%d B", n)
}

// sizeFlag parses s, the size given to the flag -name, into dst.
func sizeFlag[T int | int64](name, s string, dst *T) error {
	v, err := parseSize(s)
	if err != nil {
		return fmt.Errorf("-%s: %w", name, err)
	}
	*dst = T(v)
	return nil
}
