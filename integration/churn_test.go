package integration

// Readers under churn (issue 24 §2): a second mount with short caches reads
// a file that the leader rewrites in a loop, as a dashboard reads a status
// file or a backup job a database's dump. Every read that succeeds must
// return one whole version; a read may fail (ESTALE) only after it had
// returned bytes of a version that is gone, and then at most once in a
// thousand reads.

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
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

// churnRead reads path to its end, as cat does (128 KiB reads), into buf
// (churnSize+1 bytes) and returns how many bytes it read (before an
// error, if any).
func churnRead(path string, buf []byte) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	got := 0
	for {
		if got == len(buf) {
			return got, fmt.Errorf("file longer than %d bytes", churnSize)
		}
		n, err := f.Read(buf[got:min(got+128<<10, len(buf))])
		got += n
		if err == io.EOF {
			return got, nil
		}
		if err != nil {
			return got, err
		}
	}
}

// TestReadersUnderChurnSeeWholeVersions: the leader rewrites an 8 MiB file
// in place (O_TRUNC, write, close) in a loop, each version distinct in
// bytes and size; a reader mount with 100 ms caches reads it whole at least
// 1000 times, from two readers at once, while at least 30 versions land. Every successful read is one whole
// version no older than what was committed a second before it opened; at
// most one read in a thousand fails, and only after it had returned bytes.
func TestReadersUnderChurnSeeWholeVersions(t *testing.T) {
	gateway.ForEachServer(t, gateway.SingleDriveServers, func(t *testing.T, gw *gateway.Gateway) {
		bucket := gateway.NewBucket(t, gw)
		leader := harness.Mount(t, gw, bucket, "--token", "1", "--holder", "L")
		reader := harness.Mount(t, gw, bucket, "--holder", "R",
			"--meta-ttl", "100ms", "--attr-ttl", "100ms", "--entry-ttl", "100ms")
		if err := os.WriteFile(leader.Path("status.dat"), churnContent(1), 0o644); err != nil {
			t.Fatalf("write version 1: %v", err)
		}

		// committed[v] is when the close of version v returned.
		var mu sync.Mutex
		committed := map[uint32]time.Time{1: time.Now()}
		newestBefore := func(at time.Time) uint32 {
			mu.Lock()
			defer mu.Unlock()
			var best uint32
			for v, c := range committed {
				if c.Before(at) && v > best {
					best = v
				}
			}
			return best
		}
		stop := make(chan struct{})
		writerDone := make(chan error, 1)
		go func() {
			for v := uint32(2); ; v++ {
				select {
				case <-stop:
					writerDone <- nil
					return
				default:
				}
				if err := os.WriteFile(leader.Path("status.dat"), churnContent(v), 0o644); err != nil {
					writerDone <- fmt.Errorf("leader's rewrite %d: %w", v, err)
					return
				}
				mu.Lock()
				committed[v] = time.Now()
				mu.Unlock()
			}
		}()

		// Each reader reads at least perReader times, and on until the
		// leader has written minVersions versions (a loaded machine
		// writes slowly), or for readFor at most.
		const readers, perReader, minVersions, readFor = 2, 500, 30, 3 * time.Minute
		versionsSoFar := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(committed)
		}
		readUntil := time.Now().Add(readFor)
		var total atomic.Int64
		var failedEmpty, failedAfterBytes, torn, stale atomic.Int64
		var firstErr sync.Once
		var wg sync.WaitGroup
		for r := 0; r < readers; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, churnSize+1)
				for i := 0; i < perReader || (versionsSoFar() < minVersions && time.Now().Before(readUntil)); i++ {
					total.Add(1)
					opened := time.Now()
					n, err := churnRead(reader.Path("status.dat"), buf)
					if err != nil {
						if n == 0 {
							failedEmpty.Add(1)
						} else {
							failedAfterBytes.Add(1)
						}
						firstErr.Do(func() { t.Logf("first failed read (after %d bytes): %v", n, err) })
						continue
					}
					v, verr := churnVersion(buf[:n])
					if verr != nil {
						torn.Add(1)
						t.Errorf("read %d: %v", i, verr)
						continue
					}
					if floor := newestBefore(opened.Add(-time.Second)); v < floor {
						stale.Add(1)
						t.Errorf("read %d returned version %d; version %d was committed over a second before it opened", i, v, floor)
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		if err := <-writerDone; err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		versions := len(committed)
		mu.Unlock()
		reads := total.Load()
		t.Logf("%d reads over %d versions: %d failed before returning a byte, %d failed after returning bytes, %d torn, %d stale",
			reads, versions, failedEmpty.Load(), failedAfterBytes.Load(), torn.Load(), stale.Load())
		if versions < minVersions {
			t.Errorf("only %d versions were written while the reads ran: the test did not churn", versions)
		}
		if failedEmpty.Load() > 0 {
			t.Errorf("%d reads failed before returning a byte: a read that starts after a commit must return a whole version", failedEmpty.Load())
		}
		if failedAfterBytes.Load()*1000 > reads {
			t.Errorf("%d of %d reads failed after returning bytes: more than 1 in 1000", failedAfterBytes.Load(), reads)
		}
		// Why reads failed, from the reader's log (a few lines).
		var why []string
		for _, line := range strings.Split(reader.Log(), "\n") {
			if strings.Contains(line, "op=read") && len(why) < 5 {
				why = append(why, line)
			}
		}
		if len(why) > 0 {
			t.Logf("reads refused by the reader mount:\n%s", strings.Join(why, "\n"))
		}
		if t.Failed() {
			t.Logf("reader's log tail:\n%s", lastLines(reader.Log(), 60))
		}
	})
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
