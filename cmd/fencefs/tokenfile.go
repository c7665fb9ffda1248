package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/fencing"
	"github.com/fsnotify/fsnotify"
)

// readTokenFile returns the token text in path (surrounding blanks removed):
// "auto" or a decimal number.
func readTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", usageError{fmt.Errorf("fence.token_file: cannot read %s: %v", path, unwrapPath(err))}
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", usageError{fmt.Errorf("fence.token_file %s: the file is empty (accepted: a decimal number >= 1, or auto)", path)}
	}
	if _, err := fencing.ParseToken(tok); err != nil {
		return "", usageError{fmt.Errorf("fence.token_file %s: %v", path, err)}
	}
	return tok, nil
}

// tokenWatcher re-reads a token file when it changes and binds the new
// token. It watches the file's directory, so that files replaced by rename
// (the usual atomic update) are seen too.
type tokenWatcher struct {
	w    *fsnotify.Watcher
	done chan struct{}
	wg   sync.WaitGroup
}

// watchTokenFile starts watching path; current is the token already bound.
// Bind failures are logged (the Guard's own state says whether the mount is
// fenced); they do not stop the mount.
func watchTokenFile(path, current string, cfg *config.Config, guard *fencing.Guard, log *slog.Logger) (*tokenWatcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("fence.token_file: cannot watch %s: %v", path, err)
	}
	if err := w.Add(filepath.Dir(path)); err != nil {
		w.Close()
		return nil, fmt.Errorf("fence.token_file: cannot watch %s: %v", filepath.Dir(path), err)
	}
	tw := &tokenWatcher{w: w, done: make(chan struct{})}
	tw.wg.Add(1)
	go func() {
		defer tw.wg.Done()
		name := filepath.Clean(path)
		for {
			select {
			case <-tw.done:
				return
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn("token file watch error", "file", path, "err", err)
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if filepath.Clean(ev.Name) != name || !ev.Has(fsnotify.Write|fsnotify.Create|fsnotify.Rename) {
					continue
				}
				tok, err := readTokenFile(path)
				if err != nil {
					// A writer may have truncated the file before writing: the
					// next event carries the content.
					log.Debug("token file unreadable; waiting for the next change", "file", path, "err", err)
					continue
				}
				if tok == current {
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
				start := time.Now()
				err = bindToken(ctx, cfg, guard, tok, "fence.token_file "+path)
				cancel()
				if err != nil {
					log.Error("token file changed but the new token cannot bind", "file", path, "token", tok, "err", err)
					continue
				}
				st := guard.Status()
				log.Info("bound the token from the token file", "file", path, "token", st.Token, "state", st.State, "took", time.Since(start))
				current = tok
			}
		}
	}()
	return tw, nil
}

// Close stops the watcher and waits for it.
func (tw *tokenWatcher) Close() {
	close(tw.done)
	tw.w.Close()
	tw.wg.Wait()
}
