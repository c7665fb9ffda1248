package fusefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
	"github.com/fencefs/fencefs/objstore/s3"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func putMem(t *testing.T, s *memstore.Store, key string, body []byte) objstore.ObjectInfo {
	t.Helper()
	return putObj(t, s, key, body)
}

func putObj(t *testing.T, s objstore.Store, key string, body []byte) objstore.ObjectInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := s.Put(ctx, key, bytes.NewReader(body), int64(len(body)), objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// countingStore counts GETs and lets a test replace their bodies.
type countingStore struct {
	objstore.Store
	gets atomic.Int64
	// body, when set, wraps every GET's body.
	body func(ctx context.Context, rc io.ReadCloser) io.ReadCloser
}

func (s *countingStore) Get(ctx context.Context, key string, opts objstore.GetOptions) (io.ReadCloser, objstore.ObjectInfo, error) {
	s.gets.Add(1)
	rc, info, err := s.Store.Get(ctx, key, opts)
	if err == nil && s.body != nil {
		rc = s.body(ctx, rc)
	}
	return rc, info, err
}

// readStores are the stores the reader is tested against: the in-memory
// store and the real gateway (skipped without it locally, failing in CI).
var readStores = []struct {
	name string
	open func(t *testing.T) objstore.Store
}{
	{"memstore", func(t *testing.T) objstore.Store { return memstore.New() }},
	{"gateway", gatewayStore},
}

// gatewayStore is an s3 store on a fresh bucket of a gateway of the test.
func gatewayStore(t *testing.T) objstore.Store {
	t.Helper()
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := s3.New(ctx, s3.Config{Endpoint: gw.Endpoint, Bucket: bucket, Region: gw.Region,
		AccessKey: gw.AccessKey, SecretKey: gw.SecretKey, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// forEachStore runs f against every store in readStores.
func forEachStore(t *testing.T, f func(t *testing.T, store objstore.Store)) {
	for _, st := range readStores {
		t.Run(st.name, func(t *testing.T) { f(t, st.open(t)) })
	}
}

// bytesOf flattens a read reply the way go-fuse's non-vectored path does,
// then releases it.
func bytesOf(t testing.TB, res *readResult) []byte {
	t.Helper()
	b, st := res.Bytes(nil)
	if !st.Ok() {
		t.Fatalf("Bytes: %v", st)
	}
	res.Done()
	return b
}

// kernelRead reads [off, off+n) of the object through r and checks it
// against want.
func kernelRead(t testing.TB, r *reader, key string, want []byte, off, n int) error {
	res, err := r.read(context.Background(), key, make([]byte, n), int64(off))
	if err != nil {
		return err
	}
	got := bytesOf(t, res)
	if !bytes.Equal(got, want[off:off+n]) {
		return fmt.Errorf("read [%d,+%d): %d bytes differ from the object", off, n, len(got))
	}
	return nil
}

// windowBytes is the memory the reader's stream holds in its window.
func windowBytes(r *reader) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st == nil {
		return 0
	}
	var n int64
	for _, sl := range r.st.slots {
		if sl.c != nil {
			n += streamChunk
		}
	}
	return n
}

// TestSequentialReadsAreServedByOneStreamingGet reads an object the way the
// kernel's readahead does (windows of 1 MiB requests served in parallel, in
// any order) and checks the content, that one GET served it all, and that
// the window stays bounded.
func TestSequentialReadsAreServedByOneStreamingGet(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		cs := &countingStore{Store: store}
		fsys := newFilesystem(Options{Store: cs}, t.TempDir())
		data := pattern(7, 40<<20+12345)
		info := putObj(t, store, "obj", data)
		r := newReader(fsys, info.ETag, int64(len(data)))
		defer r.close()

		const req, window = maxIO, 4
		rng := rand.New(rand.NewSource(1))
		maxWindow := int64(streamAheadMax + streamKeepBehind + 2*streamChunk)
		for off := 0; off < len(data); off += req * window {
			offs := []int{}
			for o := off; o < off+req*window && o < len(data); o += req {
				offs = append(offs, o)
			}
			rng.Shuffle(len(offs), func(i, j int) { offs[i], offs[j] = offs[j], offs[i] })
			var wg sync.WaitGroup
			errs := make(chan error, len(offs))
			for _, o := range offs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- kernelRead(t, r, "obj", data, o, min(req, len(data)-o))
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			if w := windowBytes(r); w > maxWindow {
				t.Fatalf("the stream holds %d bytes at offset %d, want at most %d", w, off, maxWindow)
			}
		}
		if got := cs.gets.Load(); got != 1 {
			t.Fatalf("a sequential read of the object sent %d GETs, want 1", got)
		}
	})
}

// TestReadsAtAnyOffsetAndLengthReturnTheObject mixes random reads (chunk
// boundaries, odd lengths, the last byte) with a sequential pass started in
// the middle and concurrent readers.
func TestReadsAtAnyOffsetAndLengthReturnTheObject(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		fsys := newFilesystem(Options{Store: store}, t.TempDir())
		data := pattern(9, 3*streamChunk+streamJoinGap+777)
		info := putObj(t, store, "obj", data)
		r := newReader(fsys, info.ETag, int64(len(data)))
		defer r.close()

		cases := []struct{ off, n int }{
			{len(data) - 1, 1},
			{streamChunk - 1, 2},
			{streamJoinGap + 3, 4096},
			{0, 1},
			{1, streamChunk},
			{len(data) - streamChunk, streamChunk},
		}
		rng := rand.New(rand.NewSource(2))
		for range 30 {
			off := rng.Intn(len(data))
			cases = append(cases, struct{ off, n int }{off, 1 + rng.Intn(min(maxIO, len(data)-off))})
		}
		// A sequential pass from the middle, after a random read there.
		for off := len(data) / 2; off < len(data); off += 128 << 10 {
			cases = append(cases, struct{ off, n int }{off, min(128<<10, len(data)-off)})
		}
		for _, c := range cases {
			if err := kernelRead(t, r, "obj", data, c.off, c.n); err != nil {
				t.Fatal(err)
			}
		}

		// Concurrent sequential and random readers of one handle.
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewSource(int64(g)))
				for i := range 20 {
					off, n := i*streamChunk/2, streamChunk/2
					if g%2 == 1 {
						off = rng.Intn(len(data))
						n = 1 + rng.Intn(min(maxIO, len(data)-off))
					}
					if off+n > len(data) {
						break
					}
					if err := kernelRead(t, r, "obj", data, off, n); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	})
}

// cutBody ends a GET's body after left bytes with err: io.EOF as if the
// object were shorter than the size the handle saw, or a connection error.
type cutBody struct {
	io.ReadCloser
	left int64
	err  error
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, b.err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// TestReadOfAChangedObjectIsESTALENeverAMix: a read never returns bytes of
// another version than the handle's: either the handle's version or ESTALE.
func TestReadOfAChangedObjectIsESTALENeverAMix(t *testing.T) {
	forEachStore(t, func(t *testing.T, store objstore.Store) {
		size := 24<<20 + 5
		old := pattern(11, size)
		cases := []struct {
			name string
			// change changes the object; reads gives the reads to try
			// after it, as (offset, length) pairs.
			change func(t *testing.T, cs *countingStore, key string)
			reads  [][2]int
			// stale: every read must fail with ESTALE (else: each read
			// either returns the old bytes or fails with ESTALE, and the
			// last one fails).
			stale bool
		}{
			{
				name:   "replaced before the first read",
				change: func(t *testing.T, cs *countingStore, key string) { putObj(t, cs.Store, key, pattern(12, size)) },
				reads:  [][2]int{{0, maxIO}, {maxIO, maxIO}, {size / 2, 4096}},
				stale:  true,
			},
			{
				name:   "replaced by a shorter object before the first read",
				change: func(t *testing.T, cs *countingStore, key string) { putObj(t, cs.Store, key, old[:size/2]) },
				reads:  [][2]int{{0, maxIO}, {size - 4096, 4096}},
				stale:  true,
			},
			{
				name: "replaced while a sequential read streams it",
				change: func(t *testing.T, cs *countingStore, key string) {
					putObj(t, cs.Store, key, pattern(13, size))
				},
				// The stream may go on serving the version it opened; a
				// read the stream does not serve asks again, pinned.
				reads: [][2]int{{maxIO, maxIO}, {2 * maxIO, maxIO}, {size - 100, 100}},
			},
			{
				name: "shorter than the size the handle saw",
				change: func(t *testing.T, cs *countingStore, key string) {
					cs.body = func(_ context.Context, rc io.ReadCloser) io.ReadCloser {
						return &cutBody{ReadCloser: rc, left: 1000, err: io.EOF}
					}
				},
				reads: [][2]int{{maxIO, maxIO}, {size - 4096, 4096}},
				stale: true,
			},
		}
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				key := "obj" + strconv.Itoa(i)
				cs := &countingStore{Store: store}
				fsys := newFilesystem(Options{Store: cs}, t.TempDir())
				info := putObj(t, store, key, old)
				r := newReader(fsys, info.ETag, int64(size))
				defer r.close()
				if !c.stale {
					if err := kernelRead(t, r, key, old, 0, maxIO); err != nil {
						t.Fatal(err)
					}
				}
				c.change(t, cs, key)
				var last error
				for _, rd := range c.reads {
					res, err := r.read(context.Background(), key, make([]byte, rd[1]), int64(rd[0]))
					last = err
					if err != nil {
						if e := toErrno(err); e != syscall.ESTALE {
							t.Fatalf("read [%d,+%d): %v (%v), want ESTALE", rd[0], rd[1], err, e)
						}
						continue
					}
					if c.stale {
						t.Fatalf("read [%d,+%d) succeeded, want ESTALE", rd[0], rd[1])
					}
					if got := bytesOf(t, res); !bytes.Equal(got, old[rd[0]:rd[0]+rd[1]]) {
						t.Fatalf("read [%d,+%d) returned bytes of another version", rd[0], rd[1])
					}
				}
				if toErrno(last) != syscall.ESTALE {
					t.Fatalf("the read at the end of the object after the change: %v, want ESTALE", last)
				}
			})
		}
	})
}

// blockingBody blocks every Read until its GET's context ends.
type blockingBody struct {
	ctx     context.Context
	started chan<- struct{}
	closed  atomic.Bool
}

func (b *blockingBody) Read([]byte) (int, error) {
	select {
	case b.started <- struct{}{}:
	default:
	}
	<-b.ctx.Done()
	return 0, b.ctx.Err()
}

func (b *blockingBody) Close() error { b.closed.Store(true); return nil }

// TestCloseStopsTheStreamAndItsGoroutine: closing a reader (the handle is
// released) cancels its GET, wakes the reads waiting for it, and ends the
// stream's goroutine; a read interrupted while waiting leaves the stream
// usable.
func TestCloseStopsTheStreamAndItsGoroutine(t *testing.T) {
	store := memstore.New()
	started := make(chan struct{}, 1)
	var body *blockingBody
	cs := &countingStore{Store: store, body: func(ctx context.Context, rc io.ReadCloser) io.ReadCloser {
		rc.Close()
		body = &blockingBody{ctx: ctx, started: started}
		return body
	}}
	fsys := newFilesystem(Options{Store: cs}, t.TempDir())
	data := pattern(3, 8<<20)
	info := putMem(t, store, "obj", data)
	r := newReader(fsys, info.ETag, int64(len(data)))

	// An interrupted read returns its context's error.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	if _, err := r.read(ctx, "obj", make([]byte, 4096), 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted read: %v, want context.Canceled", err)
	}
	r.mu.Lock()
	s := r.st
	waiters := len(s.waiters)
	r.mu.Unlock()
	if waiters != 0 {
		t.Fatalf("%d waiters left after the interrupted read", waiters)
	}

	// A read waiting when the handle is released gets an error, not data.
	done := make(chan error, 1)
	go func() {
		_, err := r.read(context.Background(), "obj", make([]byte, 4096), 4096)
		done <- err
	}()
	for {
		r.mu.Lock()
		n := len(s.waiters)
		r.mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	r.close()
	if err := <-done; err == nil {
		t.Fatal("a read waiting on a closed reader succeeded")
	}
	<-s.done // the stream's goroutine returned
	if !body.closed.Load() {
		t.Fatal("the stream's GET body was not closed")
	}
	if _, err := r.read(context.Background(), "obj", make([]byte, 4096), 0); err == nil {
		t.Fatal("a read after close succeeded")
	}
}

// TestRepliesKeepTheirDataUntilWritten: a reply points into the stream's
// chunks; those are not reused until go-fuse is done with the reply, even
// when the stream is closed and other streams need chunks.
func TestRepliesKeepTheirDataUntilWritten(t *testing.T) {
	store := memstore.New()
	fsys := newFilesystem(Options{Store: store}, t.TempDir())
	a, b := pattern(21, 6<<20), pattern(22, 6<<20)
	ia, ib := putMem(t, store, "a", a), putMem(t, store, "b", b)

	ra := newReader(fsys, ia.ETag, int64(len(a)))
	var replies []*readResult
	for off := 0; off < len(a); off += maxIO {
		res, err := ra.read(context.Background(), "a", make([]byte, maxIO), int64(off))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := any(res).(interface {
			Slices() ([][]byte, fuse.Status)
		}); !ok {
			t.Fatal("the reply does not take go-fuse's vectored write path")
		}
		replies = append(replies, res)
	}
	ra.close()
	rb := newReader(fsys, ib.ETag, int64(len(b)))
	defer rb.close()
	for off := 0; off < len(b); off += maxIO {
		if err := kernelRead(t, rb, "b", b, off, maxIO); err != nil {
			t.Fatal(err)
		}
	}
	for i, res := range replies {
		vecs, _ := res.Slices()
		if got := bytes.Join(vecs, nil); !bytes.Equal(got, a[i*maxIO:(i+1)*maxIO]) {
			t.Fatalf("reply %d changed before it was written", i)
		}
		res.Done()
		res.Done() // go-fuse calls Done once; a second call is harmless
	}
}

// TestKernelReadaheadIsRaisedOnlyUpwards checks the read_ahead_kb update.
func TestKernelReadaheadIsRaisedOnlyUpwards(t *testing.T) {
	cases := []struct {
		name, before, after string
		wantErr             bool
	}{
		{"the kernel default is raised", "128\n", "1024", false},
		{"a larger value is kept", "4096\n", "4096\n", false},
		{"an equal value is kept", "1024\n", "1024\n", false},
		{"a missing file is an error", "", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "read_ahead_kb")
			if c.before != "" {
				if err := os.WriteFile(path, []byte(c.before), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := raiseReadaheadFile(path, 1024)
			if (err != nil) != c.wantErr {
				t.Fatalf("raiseReadaheadFile: %v, want error %v", err, c.wantErr)
			}
			if c.wantErr {
				return
			}
			got, _ := os.ReadFile(path)
			if string(got) != c.after {
				t.Fatalf("read_ahead_kb = %q, want %q", got, c.after)
			}
		})
	}
}

// TestLargeFileReadsThroughTheMountMatchTheObject reads a large object
// through the kernel: sequentially with 1 MiB read(2) calls on two handles
// at once, and with preads at random offsets, against the real gateway. As
// root, the mount's kernel readahead is raised.
func TestLargeFileReadsThroughTheMountMatchTheObject(t *testing.T) {
	k := newKT(t, 3*time.Minute)
	data := pattern(31, 48<<20+4321)
	k.putObject(t, "big", data, nil)
	m := k.mount(serveConfig{Token: 1})

	if os.Geteuid() == 0 {
		path, err := bdiReadaheadPath(m.Dir)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if kb, _ := strconv.Atoi(strings.TrimSpace(string(b))); kb < kernelReadaheadKB {
			t.Fatalf("%s = %d, want at least %d", path, kb, kernelReadaheadKB)
		}
	}

	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Open(m.Path("big"))
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			var got bytes.Buffer
			buf := make([]byte, 1<<20)
			for {
				n, err := f.Read(buf)
				got.Write(buf[:n])
				if err == io.EOF {
					break
				}
				if err != nil {
					errs <- err
					return
				}
			}
			if !bytes.Equal(got.Bytes(), data) {
				errs <- fmt.Errorf("sequential read: %d bytes differ from the object's %d", got.Len(), len(data))
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		f, err := os.Open(m.Path("big"))
		if err != nil {
			errs <- err
			return
		}
		defer f.Close()
		rng := rand.New(rand.NewSource(5))
		for range 50 {
			off := rng.Intn(len(data))
			n := 1 + rng.Intn(min(3<<20, len(data)-off))
			buf := make([]byte, n)
			got, err := f.ReadAt(buf, int64(off))
			if err != nil && err != io.EOF {
				errs <- err
				return
			}
			if got != n || !bytes.Equal(buf, data[off:off+n]) {
				errs <- fmt.Errorf("pread(%d, %d) = %d bytes, differ from the object", off, n, got)
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestABrokenStreamFallsBackToRangedReads: when the stream's GET fails for
// good (the store's own resumes exhausted), the reads it did not serve are
// read with their own GETs and the next sequential read starts a new
// stream; the reader sees the object, no error.
func TestABrokenStreamFallsBackToRangedReads(t *testing.T) {
	store := memstore.New()
	var broken atomic.Bool
	cs := &countingStore{Store: store}
	cs.body = func(_ context.Context, rc io.ReadCloser) io.ReadCloser {
		if broken.CompareAndSwap(false, true) {
			return &cutBody{ReadCloser: rc, left: 3*streamChunk/2 + 7, err: errors.New("connection reset by peer")}
		}
		return rc
	}
	fsys := newFilesystem(Options{Store: cs}, t.TempDir())
	data := pattern(41, 12<<20)
	info := putMem(t, store, "obj", data)
	r := newReader(fsys, info.ETag, int64(len(data)))
	defer r.close()
	for off := 0; off < len(data); off += 256 << 10 {
		if err := kernelRead(t, r, "obj", data, off, 256<<10); err != nil {
			t.Fatal(err)
		}
	}
	if n := cs.gets.Load(); n < 2 {
		t.Fatalf("%d GETs: the broken stream was not replaced", n)
	}
}

// TestKernelReadaheadIsOnlySetOnAFUSEMount: the device of a directory that
// is not a FUSE mount is never touched.
func TestKernelReadaheadIsOnlySetOnAFUSEMount(t *testing.T) {
	if _, err := bdiReadaheadPath(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a FUSE mount") {
		t.Fatalf("bdiReadaheadPath of a plain directory: %v, want a not-a-FUSE-mount error", err)
	}
}
