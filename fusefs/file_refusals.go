package fusefs

// A refused open remembered until the kernel retries it: an open of a
// superseded node is refused with ESTALE, the kernel looks the name up again
// and retries once; the retry must reach a node of its own (file_capture.go).

import (
	"context"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// refusalWindow is how long a refused open is remembered for the kernel's
// retry (which follows within microseconds on an idle machine); maxRefusals
// bounds how many are remembered at once.
const (
	refusalWindow = 2 * time.Second
	maxRefusals   = 1024
)

// refusal is a thread's refused open of a key.
type refusal struct {
	key string
	tid uint32 // the FUSE request's pid: the calling task
}

// refusalState is what is remembered of a refusal.
type refusalState struct {
	at    time.Time // when the open was refused
	given *fs.Inode // the node a lookup since gave the thread, if any
}

// openRefusals remembers the opens refused with ESTALE because their node
// was superseded, until the kernel's retried open (or refusalWindow). Safe
// for concurrent use.
type openRefusals struct {
	mu sync.Mutex
	at map[refusal]refusalState // GUARDED_BY(mu)
}

// note remembers that the calling thread's open of key was refused.
func (r *openRefusals) note(ctx context.Context, key string) {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = make(map[refusal]refusalState)
	}
	if len(r.at) >= maxRefusals {
		for k, v := range r.at {
			if now.Sub(v.at) >= refusalWindow {
				delete(r.at, k)
			}
		}
		if len(r.at) >= maxRefusals {
			return
		}
	}
	r.at[refusal{key: key, tid: c.Pid}] = refusalState{at: now}
}

// needsOwnNode reports whether the calling thread's open of key was refused
// less than refusalWindow ago and ch is not the node it was given since.
func (r *openRefusals) needsOwnNode(ctx context.Context, key string, ch *fs.Inode) bool {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := refusal{key: key, tid: c.Pid}
	v, ok := r.at[k]
	if ok && time.Since(v.at) >= refusalWindow {
		delete(r.at, k)
		return false
	}
	return ok && v.given != ch
}

// gave records ch as the node given to the calling thread for key, if its
// open of key is remembered as refused.
func (r *openRefusals) gave(ctx context.Context, key string, ch *fs.Inode) {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := refusal{key: key, tid: c.Pid}
	if v, ok := r.at[k]; ok {
		v.given = ch
		r.at[k] = v
	}
}

// forget forgets the calling thread's refused open of key: it was retried.
func (r *openRefusals) forget(ctx context.Context, key string) {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return
	}
	r.mu.Lock()
	delete(r.at, refusal{key: key, tid: c.Pid})
	r.mu.Unlock()
}
