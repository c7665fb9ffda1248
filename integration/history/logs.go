package history

import (
	"fmt"
	"os"
	"path/filepath"
)

// mountLog is the log file of one mount process of a run.
type mountLog struct{ holder, path string }

// noteLog records the log of the mount process of holder, to be copied
// into Config.LogDir when the run ends (before the test's cleanup
// removes it).
func (r *run) noteLog(holder, path string) {
	r.mu.Lock()
	r.mountLogs = append(r.mountLogs, mountLog{holder, path})
	r.mu.Unlock()
}

// saveLogs copies every mount's log into Config.LogDir, if set, as
// <holder>.log; a failure is reported, not fatal.
func (r *run) saveLogs() {
	if r.cfg.LogDir == "" {
		return
	}
	if err := os.MkdirAll(r.cfg.LogDir, 0o755); err != nil {
		r.t.Errorf("keep the mounts' logs: %v", err)
		return
	}
	r.mu.Lock()
	logs := append([]mountLog(nil), r.mountLogs...)
	r.mu.Unlock()
	for _, l := range logs {
		b, err := os.ReadFile(l.path)
		if err == nil {
			err = os.WriteFile(filepath.Join(r.cfg.LogDir, l.holder+".log"), b, 0o644)
		}
		if err != nil {
			r.t.Errorf("keep the log of %s: %v", l.holder, err)
		}
	}
	r.t.Logf("%s", fmt.Sprintf("mount logs kept in %s", r.cfg.LogDir))
}
