package fusefs

// Who is told that held changes were refused (held.go). A refusal is
// reported once, to a process that made the changes: the close or fsync of
// another process sharing the open file description — a child's copy of a
// descriptor, closed by its exec, is a FUSE FLUSH of the same handle whose
// errno nobody sees — stores nothing and reports nothing, and leaves the
// report for the writer's own close.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// maxWriters bounds the writer threads a content remembers; past it, any
// process may take a refusal's report.
const maxWriters = 16

// noteWriterLocked records the thread that made a change (the FUSE
// request's caller). LOCKS_REQUIRED(c.mu)
func (c *fileContent) noteWriterLocked(ctx context.Context) {
	caller, ok := fuse.FromContext(ctx)
	if !ok || c.writersFull {
		return
	}
	for _, w := range c.writers {
		if w == caller.Pid {
			return
		}
	}
	if len(c.writers) == maxWriters {
		c.writers, c.writersFull = nil, true
		return
	}
	c.writers = append(c.writers, caller.Pid)
}

// holdRefusalLocked keeps err to report to the processes that made the
// changes it refused (takeRefusal). LOCKS_REQUIRED(c.mu)
func (c *fileContent) holdRefusalLocked(err error) {
	c.refusal, c.refusalFor = err, c.writers
	if c.writersFull {
		c.refusalFor = nil // anyone
	}
}

// reportRefusal is what a close or fsync whose commit returned err
// reports: a refusal of held changes (the commit's own, or one pending
// from an earlier call) goes to a process that made them, once; for any
// other caller it is nil (the changes are gone all the same).
func (c *fileContent) reportRefusal(ctx context.Context, err error) error {
	if err != nil && !isFencedRefusal(err) {
		return err
	}
	if taken := c.takeRefusal(ctx); taken != nil {
		return taken
	}
	c.mu.Lock()
	pending := c.refusal != nil
	c.mu.Unlock()
	if err != nil && pending {
		return nil // refused, but this caller did not make the changes
	}
	return err
}

// takeRefusal returns the pending refusal if the caller of ctx is to be
// told (a thread of a process that made the changes, or one of them is
// gone, or nobody is known), and forgets it then; nil otherwise.
func (c *fileContent) takeRefusal(ctx context.Context) error {
	c.mu.Lock()
	err, writers := c.refusal, c.refusalFor
	c.mu.Unlock()
	if err == nil || !c.callerMadeThem(ctx, writers) {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refusal != err {
		return nil // taken meanwhile
	}
	c.refusal, c.refusalFor = nil, nil
	return err
}

// callerMadeThem reports whether the caller of ctx belongs to a process of
// one of the writer threads (or cannot be told apart from one).
func (c *fileContent) callerMadeThem(ctx context.Context, writers []uint32) bool {
	me := callerTgid(ctx)
	if me == 0 || len(writers) == 0 {
		return true
	}
	for _, w := range writers {
		if t := tgidOf(w); t == 0 || t == me {
			return true
		}
	}
	return false
}

// callerTgid is the process (thread group) of ctx's FUSE caller, 0 if
// unknown.
func callerTgid(ctx context.Context) uint32 {
	caller, ok := fuse.FromContext(ctx)
	if !ok {
		return 0
	}
	return tgidOf(caller.Pid)
}

// tgidOf returns the process (thread group) of thread tid, read from
// /proc (which never touches the mount); 0 if it is gone or unreadable.
func tgidOf(tid uint32) uint32 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("Tgid:")); ok {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 32)
			if err != nil {
				return 0
			}
			return uint32(n)
		}
	}
	return 0
}
