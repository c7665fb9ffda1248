package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stagingSampler measures the local disk a mount process uses for staging
// while a workload runs: every interval, the blocks allocated to the files
// it holds open under its cache directory (staging files are usually
// unlinked, so the directory alone does not show them; holes punched into
// them are not counted, as they take no disk).
type stagingSampler struct {
	stop chan struct{}
	done chan struct{}

	mu   sync.Mutex
	peak int64 // GUARDED_BY(mu)
}

// sampleStaging starts sampling process pid's open files under dir.
func sampleStaging(pid int, dir string, interval time.Duration) *stagingSampler {
	s := &stagingSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			used := stagingUse(pid, dir)
			s.mu.Lock()
			s.peak = max(s.peak, used)
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Stop ends the sampling and returns the peak, in bytes.
func (s *stagingSampler) Stop() int64 {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// stagingUse is the disk allocated to the files pid holds open under dir.
func stagingUse(pid int, dir string) int64 {
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return 0
	}
	prefix := filepath.Clean(dir) + "/"
	var sum int64
	for _, e := range ents {
		p := filepath.Join(fdDir, e.Name())
		target, err := os.Readlink(p)
		if err != nil || !strings.HasPrefix(target, prefix) {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(p, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
			sum += st.Blocks * 512
		}
	}
	return sum
}
