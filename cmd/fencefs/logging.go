package main

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/fencefs/fencefs/config"
)

// secretsMu guards secrets, the credential values that must never be
// printed; set once the configuration is loaded.
var (
	secretsMu sync.RWMutex
	secrets   []string // GUARDED_BY(secretsMu)
)

// setSecrets records the values redact removes.
func setSecrets(s []string) {
	secretsMu.Lock()
	defer secretsMu.Unlock()
	secrets = nil
	for _, v := range s {
		if len(v) >= 4 { // a shorter "secret" would redact ordinary text
			secrets = append(secrets, v)
		}
	}
}

// redact replaces every known secret in s by [REDACTED].
func redact(s string) string {
	secretsMu.RLock()
	defer secretsMu.RUnlock()
	for _, v := range secrets {
		s = strings.ReplaceAll(s, v, "[REDACTED]")
	}
	return s
}

// redactWriter redacts secrets from everything written through it. slog
// handlers write one record per Write call, so a secret is never split.
//
// Once w fails with EPIPE (the log is stderr and its reader is gone: see
// surviveClosedOutput) every later record is dropped: a pipe never comes
// back, and a mount keeps serving without its log rather than failing or
// retrying. A log file (--log-file) is not a pipe and never stops.
type redactWriter struct {
	mu   sync.Mutex
	w    io.Writer // GUARDED_BY(mu)
	gone bool      // GUARDED_BY(mu): w's reader went away; records are dropped
}

func (r *redactWriter) Write(p []byte) (int, error) {
	secretsMu.RLock()
	hit := false
	for _, v := range secrets {
		if bytes.Contains(p, []byte(v)) {
			hit = true
			break
		}
	}
	secretsMu.RUnlock()
	out := p
	if hit {
		out = []byte(redact(string(p)))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone {
		return len(p), nil
	}
	if _, err := r.w.Write(out); err != nil {
		if errors.Is(err, syscall.EPIPE) {
			r.gone = true
			return len(p), nil
		}
		return 0, err
	}
	return len(p), nil
}

// newLogger builds the slog logger described by cfg. The returned close
// function closes the log file, if any. When discard is true and no file is
// configured (a background mount without --log-file), logs are dropped.
func newLogger(cfg config.Log, discard bool) (*slog.Logger, func(), error) {
	var w io.Writer = os.Stderr
	closeFn := func() {}
	switch {
	case cfg.File != "":
		f, err := os.OpenFile(cfg.File, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, nil, err
		}
		w, closeFn = f, func() { _ = f.Close() }
	case discard:
		w = io.Discard
	}
	var level slog.Level
	switch cfg.Level {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	rw := &redactWriter{w: w}
	var h slog.Handler
	if cfg.Format == "json" {
		h = slog.NewJSONHandler(rw, opts)
	} else {
		h = slog.NewTextHandler(rw, opts)
	}
	return slog.New(h), closeFn, nil
}
