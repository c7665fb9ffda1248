package fencing

import (
	"errors"
	"strings"
	"testing"
)

func TestParseTokenAcceptsEpochsAndAutoOnly(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"5", 5, true},
		{" 17\n", 17, true},
		{"auto", 0, true},
		{"9223372036854775806", 9223372036854775806, true},
		{"9223372036854775807", 9223372036854775807, true},
		{"9223372036854775808", 0, false},
		{"18446744073709551615", 0, false},
		{"18446744073709551616", 0, false},
		{"99999999999999999999999", 0, false},
		{"0", 0, false},
		{"-3", 0, false},
		{"seven", 0, false},
		{"AUTO", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseToken(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseToken(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrBadToken) {
			t.Errorf("ParseToken(%q) error %v does not wrap ErrBadToken", tt.in, err)
		}
		want := "is not a valid token (accepted: a decimal number >= 1, or auto)"
		if len(tt.in) >= 19 {
			want = "token " + tt.in + " is above the largest token, 9223372036854775807"
		}
		if msg := err.Error(); !strings.Contains(msg, want) || strings.Contains(msg, "\n") {
			t.Errorf("ParseToken(%q) error %q is not the one-line message", tt.in, msg)
		}
	}
}
