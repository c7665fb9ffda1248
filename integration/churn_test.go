package integration

// Readers under churn (issue 24 §2): a second mount with short caches reads
// a file that the leader rewrites in a loop, as a dashboard reads a status
// file or a backup job a database's dump. Every read that succeeds must
// return one whole version; a read may fail (ESTALE) only after it had
// returned bytes of a version that is gone, and then at most once in a
// thousand reads.

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
)

const (
	churnSize  = 8 << 20
	churnBlock = 4096
)

// churnLen is the size of version v: up to 8 MiB, different from one
// version to the next, so that a read of one version cut at another's
// size shows.
func churnLen(v uint32) int {
	return churnSize - int(v%5)*(300<<10) - int(v%3)*8
}

// churnContent is version v of the churned file: every 8-byte word of
// block b holds v<<32|b, so a read mixing two versions, or a block out of
// place, shows.
func churnContent(v uint32) []byte {
	buf := make([]byte, churnLen(v))
	for b := 0; b < len(buf); b += churnBlock {
		block := buf[b:min(b+churnBlock, len(buf))]
		binary.LittleEndian.PutUint64(block, uint64(v)<<32|uint64(b/churnBlock))
		for n := 8; n < len(block); n *= 2 {
			copy(block[n:], block[:n])
		}
	}
	return buf
}

// churnVersion returns the version buf (a whole file) holds, or an error
// naming the first word that is not of the version of the first word.
func churnVersion(buf []byte) (uint32, error) {
	if len(buf) < 8 {
		return 0, fmt.Errorf("read %d bytes", len(buf))
	}
	v := uint32(binary.LittleEndian.Uint64(buf) >> 32)
	if len(buf) != churnLen(v) {
		return 0, fmt.Errorf("read %d bytes of version %d, which has %d", len(buf), v, churnLen(v))
	}
	// The first and the last word of every block (the kernel moves whole
	// pages): a tear inside a block would need a page made of two
	// versions.
	for b := 0; b < len(buf); b += churnBlock {
		for _, off := range []int{b, min(b+churnBlock, len(buf)) - 8} {
			if w := binary.LittleEndian.Uint64(buf[off:]); w != uint64(v)<<32|uint64(b/churnBlock) {
				return 0, fmt.Errorf("torn read: word at %d is %#x, version %d would be %#x", off, w, v, uint64(v)<<32|uint64(b/churnBlock))
			}
		}
	}
	return v, nil
}

// churnCat reads path whole with cat(1), a process per read as a shell
// loop's reader is, into buf (churnSize+1 bytes), taking cat's output
// 128 KiB at a time with pause after each, and returns how many bytes it
// read (before an error, if any).
func churnCat(path string, buf []byte, pause time.Duration) (int, error) {
	cmd := exec.Command("cat", path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	var got int
	var rerr error
	for rerr == nil && got < len(buf) {
		var n int
		n, rerr = io.ReadFull(out, buf[got:min(got+128<<10, len(buf))])
		got += n
		time.Sleep(pause)
	}
	if rerr == nil {
		_, _ = io.Copy(io.Discard, out)
		rerr = fmt.Errorf("file longer than %d bytes", churnSize)
	} else if rerr == io.ErrUnexpectedEOF || rerr == io.EOF {
		rerr = nil
	}
	if err := cmd.Wait(); err != nil {
		return got, fmt.Errorf("cat: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return got, rerr
}

// churnWriterEnv names the file a churn writer process (runChurnWriter)
// rewrites.
const churnWriterEnv = "FENCEFS_TEST_CHURN_WRITER"

// runChurnWriter is the body of the leader's writer process: it rewrites
// path with versions 2, 3, ... (O_TRUNC, write, close) and prints each
// version's number once its close returned, until its stdin closes. A
// process of its own, because a fork+exec of the test process (each read's
// cat) would flush, and so commit, the file while it is being written.
func runChurnWriter(path string) int {
	var done atomic.Bool
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		done.Store(true)
	}()
	for v := uint32(2); !done.Load(); v++ {
		if err := os.WriteFile(path, churnContent(v), 0o644); err != nil {
			fmt.Printf("error: version %d: %v\n", v, err)
			return 1
		}
		fmt.Println(v)
	}
	return 0
}

// TestReadersUnderChurnSeeWholeVersions: the leader rewrites an 8 MiB file
// in place (O_TRUNC, write, close) in a loop from a process of its own,
// each version distinct in bytes and size; on a reader mount with 100 ms
// caches three readers read it whole with cat (issue 29 §5), at least
// churnReads times in all and until at least churnVersions versions have
// landed. Every successful read is one whole
// version no older than what was committed a second before it began; no
// read fails before returning a byte, and at most one in a thousand fails
// after.
func TestReadersUnderChurnSeeWholeVersions(t *testing.T) {
	gateway.ForEachServer(t, gateway.SingleDriveServers, func(t *testing.T, gw *gateway.Gateway) {
		bucket := gateway.NewBucket(t, gw)
		leader := harness.Mount(t, gw, bucket, "--token", "1", "--holder", "L")
		reader := harness.Mount(t, gw, bucket, "--holder", "R",
			"--meta-ttl", "100ms", "--attr-ttl", "100ms", "--entry-ttl", "100ms")
		if err := os.WriteFile(leader.Path("status.dat"), churnContent(1), 0o644); err != nil {
			t.Fatalf("write version 1: %v", err)
		}
		w := startChurnWriter(t, leader.Path("status.dat"))

		// Two readers take cat's output at full speed; a third pauses
		// 3 ms per 128 KiB, so that its reads span about one of the
		// leader's rewrites and the others' opens meet its handle on a
		// version being replaced (the opens the kernel retries).
		readerPauses := []time.Duration{0, 0, 3 * time.Millisecond}
		const churnReads, churnVersions, readFor = 2000, 30, 5 * time.Minute
		readUntil := time.Now().Add(readFor)
		var total atomic.Int64
		var failedEmpty, failedAfterBytes, torn, stale atomic.Int64
		var wg sync.WaitGroup
		for _, pause := range readerPauses {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, churnSize+1)
				for total.Load() < churnReads || (w.versions() < churnVersions && time.Now().Before(readUntil)) {
					i := total.Add(1)
					began := time.Now()
					n, err := churnCat(reader.Path("status.dat"), buf, pause)
					if err != nil {
						if n == 0 {
							failedEmpty.Add(1)
						} else {
							failedAfterBytes.Add(1)
						}
						t.Logf("read %d failed after %d bytes: %v", i, n, err)
						continue
					}
					v, verr := churnVersion(buf[:n])
					if verr != nil {
						torn.Add(1)
						t.Errorf("read %d: %v", i, verr)
						continue
					}
					if floor := w.newestBefore(began.Add(-time.Second)); v < floor {
						stale.Add(1)
						t.Errorf("read %d returned version %d; version %d was committed over a second before it began", i, v, floor)
					}
				}
			}()
		}
		wg.Wait()
		versions := w.stop(t)
		reads := total.Load()
		t.Logf("reader mount refused %d opens and %d reads", strings.Count(reader.Log(), "op=open"), strings.Count(reader.Log(), "op=read"))
		t.Logf("%d reads over %d versions: %d failed before returning a byte, %d failed after returning bytes, %d torn, %d stale",
			reads, versions, failedEmpty.Load(), failedAfterBytes.Load(), torn.Load(), stale.Load())
		if versions < churnVersions {
			t.Errorf("only %d versions were written while the reads ran: the test did not churn", versions)
		}
		if failedEmpty.Load() > 0 {
			t.Errorf("%d reads failed before returning a byte: a read that starts after a commit must return a whole version", failedEmpty.Load())
		}
		if failedAfterBytes.Load()*1000 > reads {
			t.Errorf("%d of %d reads failed after returning bytes: more than 1 in 1000", failedAfterBytes.Load(), reads)
		}
		// Why reads and opens were refused, from the reader's log (a few
		// lines of each).
		for _, op := range []string{"op=read", "op=open"} {
			var why []string
			for _, line := range strings.Split(reader.Log(), "\n") {
				if strings.Contains(line, op) && len(why) < 10 {
					why = append(why, line)
				}
			}
			if len(why) > 0 {
				t.Logf("refused by the reader mount (%s):\n%s", op, strings.Join(why, "\n"))
			}
		}
		if t.Failed() {
			t.Logf("reader's log tail:\n%s", lastLines(reader.Log(), 60))
		}
	})
}

// churnWriter is a running writer process (runChurnWriter) and the versions
// it committed.
type churnWriter struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan error // the stdout reader's end: nil, or why the writer failed

	mu        sync.Mutex
	committed map[uint32]time.Time // GUARDED_BY(mu): when version v's close returned (1: before the start)
}

// startChurnWriter starts a writer process rewriting path (on the leader's
// mount), stopped in the test's cleanup if not before.
func startChurnWriter(t *testing.T, path string) *churnWriter {
	t.Helper()
	w := &churnWriter{cmd: exec.Command(os.Args[0], "-test.run=^$"), done: make(chan error, 1),
		committed: map[uint32]time.Time{1: time.Now()}}
	w.cmd.Env = append(os.Environ(), churnWriterEnv+"="+path)
	var err error
	if w.stdin, err = w.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.cmd.Process.Kill(); _ = w.cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			v, err := strconv.ParseUint(sc.Text(), 10, 32)
			if err != nil {
				w.done <- fmt.Errorf("leader's writer: %s", sc.Text())
				return
			}
			w.mu.Lock()
			w.committed[uint32(v)] = time.Now()
			w.mu.Unlock()
		}
		w.done <- nil
	}()
	return w
}

// versions is how many versions were committed so far.
func (w *churnWriter) versions() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.committed)
}

// newestBefore is the newest version committed before at.
func (w *churnWriter) newestBefore(at time.Time) uint32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var best uint32
	for v, c := range w.committed {
		if c.Before(at) && v > best {
			best = v
		}
	}
	return best
}

// stop stops the writer once its current version is committed and returns
// how many versions were committed.
func (w *churnWriter) stop(t *testing.T) int {
	t.Helper()
	_ = w.stdin.Close()
	if err := <-w.done; err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Wait(); err != nil {
		t.Fatalf("leader's writer: %v", err)
	}
	return w.versions()
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestAFileReplacedWhileOpenKeepsItsReaderAndMovesItsName: a reader mount
// has a file open and has read part of it when the leader replaces it (a
// new size, new bytes). The open descriptor goes on reading the version
// it opened, whole; a new open of the name reads the new version, whole,
// on another inode (as after a rename(2) over the file on a local
// filesystem); fstat of the old descriptor still shows the old size.
func TestAFileReplacedWhileOpenKeepsItsReaderAndMovesItsName(t *testing.T) {
	gateway.ForEachServer(t, gateway.SingleDriveServers, func(t *testing.T, gw *gateway.Gateway) {
		bucket := gateway.NewBucket(t, gw)
		leader := harness.Mount(t, gw, bucket, "--token", "1", "--holder", "L")
		reader := harness.Mount(t, gw, bucket, "--holder", "R",
			"--meta-ttl", "100ms", "--attr-ttl", "100ms", "--entry-ttl", "100ms")
		v1, v2 := churnContent(1), churnContent(2)
		if err := os.WriteFile(leader.Path("f"), v1, 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // past the reader's caches
		a, err := os.Open(reader.Path("f"))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		head := make([]byte, 1<<20)
		if _, err := io.ReadFull(a, head); err != nil {
			t.Fatalf("first MiB through the open descriptor: %v", err)
		}
		// A second descriptor of the same version, opened before the
		// change and not read yet.
		a2, err := os.Open(reader.Path("f"))
		if err != nil {
			t.Fatal(err)
		}
		defer a2.Close()
		if err := os.WriteFile(leader.Path("f"), v2, 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)

		got, err := os.ReadFile(reader.Path("f"))
		if err != nil {
			t.Fatalf("open and read the name after the change: %v; reader's log:\n%s", err, lastLines(reader.Log(), 40))
		}
		if v, err := churnVersion(got); err != nil || v != 2 {
			t.Fatalf("a new open read version %d (%v), want 2 whole", v, err)
		}
		rest, err := io.ReadAll(a)
		if err != nil {
			t.Fatalf("the rest through the descriptor opened before the change: %v", err)
		}
		if v, err := churnVersion(append(head, rest...)); err != nil || v != 1 {
			t.Fatalf("the descriptor opened before the change read version %d (%v), want 1 whole", v, err)
		}
		all2, err := io.ReadAll(a2)
		if err != nil {
			t.Fatalf("the unread descriptor opened before the change: %v", err)
		}
		if v, err := churnVersion(all2); err != nil || v != 1 {
			t.Fatalf("the unread descriptor opened before the change read version %d (%v), want 1 whole", v, err)
		}
		var oldSt, newSt syscall.Stat_t
		if err := syscall.Fstat(int(a.Fd()), &oldSt); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Stat(reader.Path("f"), &newSt); err != nil {
			t.Fatal(err)
		}
		if oldSt.Size != int64(len(v1)) || newSt.Size != int64(len(v2)) {
			t.Errorf("sizes: the old descriptor %d (want %d), the name %d (want %d)", oldSt.Size, len(v1), newSt.Size, len(v2))
		}
		if oldSt.Ino == newSt.Ino {
			t.Errorf("the name still refers to inode %d, which the old descriptor reads", oldSt.Ino)
		}
	})
}
