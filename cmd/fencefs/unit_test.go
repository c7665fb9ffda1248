package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencefs/fencefs/config"
	"golang.org/x/sys/unix"
)

func TestLogsAndMessagesNeverShowSecrets(t *testing.T) {
	setSecrets([]string{"wJalrXUtnFEMI-secret", "ab"})
	defer setSecrets(nil)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&redactWriter{w: &buf}, nil))
	log.Info("request failed", "err", "signature wJalrXUtnFEMI-secret mismatch", "short", "ab")
	if strings.Contains(buf.String(), "wJalrXUtnFEMI-secret") {
		t.Fatalf("log shows the secret: %s", buf.String())
	}
	if !strings.Contains(buf.String(), "[REDACTED]") {
		t.Fatalf("log lacks the redaction marker: %s", buf.String())
	}
	if !strings.Contains(buf.String(), "short=ab") {
		t.Errorf("values shorter than 4 bytes must not be treated as secrets: %s", buf.String())
	}
	if got := redact("x wJalrXUtnFEMI-secret y"); got != "x [REDACTED] y" {
		t.Errorf("redact = %q", got)
	}
}

func TestNewLoggerHonoursLevelAndFormat(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/log"
	log, closeFn, err := newLogger(config.Log{Level: "warn", Format: "json", File: path}, false)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "k", 1)
	closeFn()
	b, _ := readFile(path)
	if strings.Contains(b, "hidden") || !strings.Contains(b, `"msg":"shown"`) {
		t.Fatalf("log file = %q", b)
	}
}

func TestOneLineJoinsLines(t *testing.T) {
	if got := oneLine("a\nb\r\nc\n"); got != "a; b; c" {
		t.Fatalf("oneLine = %q", got)
	}
}

func readFile(p string) (string, error) {
	b, err := os.ReadFile(p)
	return string(b), err
}

func unixSetxattr(path, name, value string) error {
	return unix.Setxattr(path, name, []byte(value), 0)
}

func TestCommitErrorsKeepsOnlyLostChanges(t *testing.T) {
	umount := errors.New("fusefs: unmount /m: busy")
	lost := errors.New("commit a.txt: fenced")
	tests := []struct {
		name string
		in   error
		want []error
	}{
		{"only the unmount failed", errors.Join(nil, umount), nil},
		{"bare unmount error", umount, nil},
		{"a commit failed too", errors.Join(lost, umount), []error{lost}},
		{"only a commit failed", lost, []error{lost}},
	}
	for _, tt := range tests {
		got := commitErrors(tt.in)
		if (got == nil) != (tt.want == nil) {
			t.Errorf("%s: commitErrors = %v, want %v", tt.name, got, tt.want)
			continue
		}
		for _, w := range tt.want {
			if !errors.Is(got, w) {
				t.Errorf("%s: %v does not keep %v", tt.name, got, w)
			}
		}
		if got != nil && strings.Contains(got.Error(), "busy") {
			t.Errorf("%s: %v keeps the unmount error", tt.name, got)
		}
	}
}

func TestBackgroundChildsFailLineCarriesTheExitStatus(t *testing.T) {
	for _, tc := range []struct {
		line string
		code int
		msg  string
	}{
		{"2 fencefs: mount: fence.token_file: bad", exitUsage, "fencefs: mount: fence.token_file: bad"},
		{"1 fencefs: mount: cannot reach x", exitFailure, "fencefs: mount: cannot reach x"},
		{"fencefs: mount: from an older child", exitFailure, "fencefs: mount: from an older child"},
		{"0 not a failure status", exitFailure, "0 not a failure status"},
	} {
		if code, msg := parseFailLine(tc.line); code != tc.code || msg != tc.msg {
			t.Errorf("parseFailLine(%q) = %d, %q; want %d, %q", tc.line, code, msg, tc.code, tc.msg)
		}
	}
}

func TestTokenFileAcceptsOneToTheLargestToken(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		content string
		want    string // "" = refused with this text in msg
		msg     string
	}{
		{"1\n", "1", ""},
		{"auto\n", "auto", ""},
		{"9223372036854775807\n", "9223372036854775807", ""},
		{"9223372036854775808\n", "", "token 9223372036854775808 is above the largest token, 9223372036854775807"},
		{"18446744073709551615", "", "is above the largest token"},
		{"0", "", "is not a valid token"},
	}
	for i, tc := range tests {
		path := filepath.Join(dir, fmt.Sprintf("epoch%d", i))
		if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := readTokenFile(path)
		if tc.want != "" {
			if err != nil || got != tc.want {
				t.Errorf("readTokenFile(%q) = %q, %v; want %q", tc.content, got, err, tc.want)
			}
			continue
		}
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), path) {
			t.Errorf("readTokenFile(%q) = %q, %v; want a usage error naming %s and saying %q", tc.content, got, err, path, tc.msg)
		}
	}
}
