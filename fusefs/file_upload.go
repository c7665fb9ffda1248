package fusefs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"golang.org/x/sys/unix"
)

// partUpload uploads the staged content of a large file while it is being
// written ("streaming" in log lines and metrics), and keeps the local disk it needs bounded, whatever the file's
// size.
//
// Once the staged size passes the multipart threshold, every full part from
// the second on is sent in the background
// as soon as the writer has moved past it; the first part stays on local
// disk until the commit, which sends it with the tail and publishes the
// upload through Guard.CommitStream: the same intent, validation and
// conditional Complete as Put. Keeping the first part lets a program patch
// its header after writing the rest (pg_dump's table of contents, a media
// muxer's box sizes, a WAV header) at no cost.
//
// Part sizes and the threshold are the store's, or smaller on a small cache
// disk (planUpload says how they are chosen, once, when the upload starts).
//
// Local disk: once the staged content holds more than the upload's bound
// (Options.StreamStaging, or the room the cache disk had for the file when
// the upload started, if less), parts already uploaded are released from the
// staging file (a hole punched with fallocate(FALLOC_FL_PUNCH_HOLE)), oldest
// first; a writer faster than the uploads waits for one to finish instead
// of filling the disk; a write that finds the cache disk full releases
// every uploaded part and tries again. One staging file with holes, rather
// than a ring of part files, keeps the file's offsets as they are: reads,
// writes, truncates and the Put fallback work on it unchanged as long as
// nothing was released, and a file needs no conversion when it stops being
// sequential. A filesystem that cannot punch holes keeps the whole file, as
// before (logged once).
//
// While nothing was released, anything that would make the published object
// differ from a Put of the staged content — a write or truncate into a part
// already sent, a metadata change, a failed part — drops the upload and the
// commit falls back to Put of the staging file. Once a part was released
// that fallback is gone (file_content_upload.go says what happens then).
//
// Streamed objects carry no mtime/ctime/atime metadata (they are fixed
// before the writer finishes): their times are the object's Last-Modified,
// the time of the Complete, with S3's one-second resolution.
//
// Locking: the fileContent's body lock is held by the callers of advance (write) and
// finish (read or write), so the frontier moves in step with the staging
// file; part uploads read the staging file below the frontier without any
// content lock (those bytes no longer change, or the upload is dropped
// first), and only advance (under body write) punches holes.
type partUpload struct {
	// Constant after newPartUpload.
	fsys    *filesystem
	key     string
	stage   *os.File
	plan    uploadPlan
	ctx     context.Context // part uploads; cancelled with the mount, or when the upload is done
	cancel  context.CancelFunc
	started chan struct{}     // closed once st or err is set by start
	meta    map[string]string // the metadata the upload was started with

	st  *fencing.Stream // set before started is closed; nil on failure
	err error           // start's error, set before started is closed

	mu   sync.Mutex
	next int64 // GUARDED_BY(mu): end of the parts dispatched so far (the held first part included)
	// filled: every byte below it was written, so parts below it are
	// final; spans are the ranges written above it (sorted, disjoint).
	// The kernel may hand one writer's consecutive writes over out of
	// order: a part is dispatched only once nothing below its end can be
	// still to come. GUARDED_BY(mu)
	filled   int64
	spans    [][2]int64
	parts    []objstore.Part // GUARDED_BY(mu): the uploaded parts, by part number - 1
	slots    []partSlot      // GUARDED_BY(mu): where each part's bytes are, by part number - 1
	sending  int             // GUARDED_BY(mu): parts in flight
	relFrom  int             // GUARDED_BY(mu): slots below it are released (or the first, held)
	rel      holes           // GUARDED_BY(mu): the released parts (file_holes.go)
	failed   error           // GUARDED_BY(mu): first part failure
	dropped  bool            // GUARDED_BY(mu)
	sealed   bool            // GUARDED_BY(mu): finish sent the tail: the content is final
	wake     chan struct{}   // GUARDED_BY(mu): closed (and replaced) when a part finishes
	inflight sync.WaitGroup  // part uploads
}

// partSlot is one part of the staged content: [off, off+n), and where its
// bytes are.
type partSlot struct {
	off, n int64
	state  partState
}

// partState is where one part's bytes are.
type partState uint8

const (
	partHeld     partState = iota // the first part: local only, sent by finish
	partSending                   // dispatched, not yet uploaded
	partSent                      // uploaded, still in the staging file
	partReleased                  // uploaded and punched out of the staging file
)

// uploadMeta is the metadata a streamed commit stores: the node's, minus
// the times (see partUpload).
func uploadMeta(meta map[string]string) map[string]string {
	out := maps.Clone(meta)
	delete(out, metaMtime)
	delete(out, metaCtime)
	delete(out, metaAtime)
	return out
}

// newPartUpload starts the upload of key's staged content in the
// background, split as plan says; base is the version the commit will be
// conditioned on.
func newPartUpload(fsys *filesystem, key string, stage *os.File, plan uploadPlan, base fencing.Version, meta map[string]string) *partUpload {
	ctx, cancel := context.WithCancel(fsys.ctx)
	u := &partUpload{
		fsys: fsys, key: key, stage: stage, plan: plan,
		ctx: ctx, cancel: cancel, started: make(chan struct{}),
		meta: meta, wake: make(chan struct{}), relFrom: 1,
	}
	go func() {
		defer close(u.started)
		// Not ctx: a drop must not cancel a CreateUpload in flight, whose
		// upload would then exist without anyone knowing to abort it.
		sctx, scancel := context.WithTimeout(fsys.ctx, 2*time.Minute)
		defer scancel()
		u.st, u.err = fsys.guard.StartStream(sctx, key, base, meta)
		if u.err != nil {
			fsys.log.Debug("streamed upload not started; the commit uploads the whole file", "key", key, "err", u.err)
		}
	}()
	return u
}

// wrote records that [off, end) of the staged content was written.
// LOCKS_REQUIRED(content body, write)
func (u *partUpload) wrote(off, end int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if end <= u.filled || end <= off {
		return
	}
	u.spans = append(u.spans, [2]int64{off, end})
	slices.SortFunc(u.spans, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	rest := u.spans[:0]
	for _, sp := range u.spans {
		switch {
		case sp[0] <= u.filled:
			u.filled = max(u.filled, sp[1])
		case len(rest) > 0 && sp[0] <= rest[len(rest)-1][1]:
			rest[len(rest)-1][1] = max(rest[len(rest)-1][1], sp[1])
		default:
			rest = append(rest, sp)
		}
	}
	u.spans = rest
}

// advance is called after the staged content grew to size: it dispatches
// every full part below what was written without a gap, then releases
// uploaded parts while the staging file holds more than limit bytes,
// waiting for uploads in flight when none can be released yet (a writer
// faster than the uploads). It returns the bytes it released; err is the
// upload's failure (a part that could not be uploaded), which the caller
// handles (dropped when nothing was released, else the file cannot be
// stored). limit 0 releases all it can. LOCKS_REQUIRED(content body, write)
func (u *partUpload) advance(ctx context.Context, size, limit int64) (freed int64, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for !u.dropped && !u.sealed && u.failed == nil && len(u.slots) < objstore.MaxParts-1 {
		n := u.sizeOf(len(u.slots) + 1)
		if u.filled-u.next < n {
			break
		}
		if len(u.slots) == 0 {
			u.parts, u.slots, u.next = append(u.parts, objstore.Part{}), append(u.slots, partSlot{0, n, partHeld}), n
			continue
		}
		u.dispatchLocked(u.next, n)
	}
	for {
		if u.failed != nil {
			return freed, u.failed
		}
		if u.dropped || u.fsys.noPunch.Load() {
			return freed, nil
		}
		for i := u.relFrom; i < len(u.slots) && size-u.rel.bytes > limit; i++ {
			if u.slots[i].state != partSent {
				continue
			}
			if err := u.releaseLocked(i); err != nil {
				return freed, nil // kept whole: logged once
			}
			freed += u.slots[i].n
		}
		for u.relFrom < len(u.slots) && u.slots[u.relFrom].state == partReleased {
			u.relFrom++
		}
		if size-u.rel.bytes <= limit || u.sending == 0 {
			return freed, nil
		}
		wake := u.wake
		u.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			u.mu.Lock()
			return freed, ctx.Err()
		}
		u.mu.Lock()
	}
}

// sizeOf is the size of part number: the plan's part size, doubled every
// 1000 parts while it stays within a quarter of the upload's bound, so that
// S3's 10,000 parts hold a file of any size the bound lets through (with
// 8 MiB parts and 256 MiB of staging, over 500 GB) and the staging file
// still holds several parts. LOCKS_REQUIRED(u.mu)
func (u *partUpload) sizeOf(number int) int64 {
	n := u.plan.part
	for k := (number - 1) / 1000; k > 0 && 2*n <= u.plan.bound/4 && 2*n <= objstore.MaxPartSize; k-- {
		n *= 2
	}
	return n
}

// releaseLocked punches slot i's bytes out of the staging file.
// LOCKS_REQUIRED(u.mu)
func (u *partUpload) releaseLocked(i int) error {
	sl := &u.slots[i]
	err := unix.Fallocate(int(u.stage.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, sl.off, sl.n)
	if err != nil {
		if u.fsys.noPunch.CompareAndSwap(false, true) {
			u.fsys.log.Warn("the cache directory cannot punch holes: files written sequentially keep their whole content in it until close",
				"cache_dir", u.fsys.opts.CacheDir, "err", err)
		}
		return err
	}
	sl.state = partReleased
	u.rel.add(sl.off, sl.n)
	return nil
}

// hull returns the smallest range holding every released part ([0, 0):
// none).
func (u *partUpload) hull() (lo, hi int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.rel.lo, u.rel.hi
}

// below reports whether truncating the staged content to size would cut
// into the parts dispatched. LOCKS_REQUIRED(content body, write)
func (u *partUpload) below(size int64) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return size < u.next || u.sealed && size != u.next
}

// touches reports whether a change of the staged bytes in [off, end) would
// alter a part already dispatched (the held first part is not: it is sent
// by finish). LOCKS_REQUIRED(content body, write)
func (u *partUpload) touches(off, end int64) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.sealed {
		return true
	}
	if len(u.slots) > 0 && u.slots[0].state == partHeld && end <= u.slots[0].n {
		return false
	}
	return off < u.next
}

// dispatchLocked sends [off, off+n) as the next part. LOCKS_REQUIRED(u.mu)
func (u *partUpload) dispatchLocked(off, n int64) {
	u.parts = append(u.parts, objstore.Part{})
	u.slots = append(u.slots, partSlot{off, n, partSending})
	u.next = max(u.next, off+n)
	u.sending++
	u.send(len(u.parts), off, n)
}

// send uploads [off, off+n) as part number in the background.
func (u *partUpload) send(number int, off, n int64) {
	u.inflight.Add(1)
	go func() {
		defer u.inflight.Done()
		err := u.upload(number, off, n)
		u.mu.Lock()
		defer u.mu.Unlock()
		u.sending--
		if err != nil && u.failed == nil {
			u.failed = err
		}
		close(u.wake)
		u.wake = make(chan struct{})
	}()
}

// upload sends one part and records it.
func (u *partUpload) upload(number int, off, n int64) error {
	<-u.started
	if u.st == nil {
		return u.err
	}
	u.fsys.uploadSlots <- struct{}{}
	defer func() { <-u.fsys.uploadSlots }()
	u.mu.Lock()
	dropped := u.dropped
	u.mu.Unlock()
	if dropped || u.ctx.Err() != nil {
		return errors.New("dropped")
	}
	p, err := u.st.UploadPart(u.ctx, number, u.stage, off, n)
	if err != nil {
		return fmt.Errorf("part %d: %w", number, err)
	}
	u.mu.Lock()
	u.parts[number-1] = p
	u.slots[number-1].state = partSent
	u.mu.Unlock()
	return nil
}

// finish sends the held first part and the tail [next, size) as the last
// part, waits for every part and returns them, or an error when the upload
// cannot be committed. It may be called again (a commit redone): what was
// sent is not sent again. LOCKS_REQUIRED(content body, read or write): the
// staged content is stable.
func (u *partUpload) finish(ctx context.Context, size int64) ([]objstore.Part, error) {
	u.mu.Lock()
	switch {
	case u.dropped:
		u.mu.Unlock()
		return nil, fmt.Errorf("%w: dropped", errUploadUnusable)
	case u.sealed && size != u.next:
		u.mu.Unlock()
		return nil, fmt.Errorf("%w: the content changed after its last part was sent", errUploadUnusable)
	case size < u.next:
		u.mu.Unlock()
		return nil, fmt.Errorf("%w: the content shrank below the parts sent", errUploadUnusable)
	case size > u.next:
		if size-u.next > objstore.MaxPartSize {
			u.mu.Unlock()
			return nil, fmt.Errorf("%w: tail larger than a part may be", errUploadUnusable)
		}
		u.dispatchLocked(u.next, size-u.next)
	}
	u.sealed = true
	if len(u.slots) > 0 && u.slots[0].state == partHeld {
		u.slots[0].state = partSending
		u.sending++
		u.send(1, 0, u.slots[0].n)
	}
	u.mu.Unlock()
	done := make(chan struct{})
	go func() { u.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.failed != nil {
		return nil, fmt.Errorf("%w: %w", errUploadUnusable, u.failed)
	}
	if len(u.parts) == 0 {
		return nil, fmt.Errorf("%w: no parts", errUploadUnusable)
	}
	return append([]objstore.Part(nil), u.parts...), nil
}

// drop abandons the upload: parts not yet sent are skipped, and once the
// parts in flight have finished the upload is aborted, in the background.
// (Parts in flight are not cancelled: the gateway keeps writing a part
// whose request was cancelled, and one finishing after the abort revives
// the upload.) Safe to call more than once.
func (u *partUpload) drop() {
	u.mu.Lock()
	if u.dropped {
		u.mu.Unlock()
		return
	}
	u.dropped = true
	u.mu.Unlock()
	go func() {
		defer u.cancel()
		<-u.started
		u.inflight.Wait()
		if u.st != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			u.st.Abort(ctx)
			cancel()
		}
	}()
}

// errUploadUnusable: finish cannot give the parts of the staged content (a
// part failed, the content changed under the parts sent).
var errUploadUnusable = errors.New("streamed upload unusable")

// isNoSpace reports a staging write that failed for lack of space.
func isNoSpace(err error) bool { return errors.Is(err, syscall.ENOSPC) }
