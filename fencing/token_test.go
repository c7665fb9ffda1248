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
		{"18446744073709551615", 18446744073709551615, true},
		{"18446744073709551616", 0, false},
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
		if msg := err.Error(); !strings.Contains(msg, "is not a valid token (accepted: a decimal number >= 1, or auto)") || strings.Contains(msg, "\n") {
			t.Errorf("ParseToken(%q) error %q is not the one-line message", tt.in, msg)
		}
	}
}
