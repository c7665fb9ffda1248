package integration

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/integration/harness"
	"golang.org/x/sys/unix"
)

// appendRecord is one attempted append by a writer, as the writer logged it.
type appendRecord struct {
	writer, file string
	seq          int
	tokenBefore  uint64 // the writer's mount token read just before open
	tokenAfter   uint64 // … and just after close
	start, ack   time.Time
	err          error
}

// activation is the driver's log of one token handed to a mount.
type activation struct {
	mount  int
	token  uint64
	active time.Time // when setxattr returned: the epoch is active
}

func readToken(dir string) uint64 {
	v, err := xattr(dir, "user.fencefs.token")
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	return n
}

// TestManyWritersTorture runs several mounts appending records to shared
// files while a driver hands increasing tokens to random mounts. Afterwards a
// checker proves from the files' contents and the per-write logs that
//   - every acknowledged append is in its file (no acknowledged write lost),
//   - within each file, records appear in non-decreasing epoch order (no
//     write of epoch e landed after one of e' > e),
//   - no acknowledged write of epoch e started after an epoch e' > e was
//     active (the mount must have been refused).
//
// It runs 20 s per server (the gateway, then MinIO with 4 erasure-coded
// drives) in `make test`; `make torture DURATION=30m` runs it longer (that
// long on each server).
func TestManyWritersTorture(t *testing.T) {
	duration := 20 * time.Second
	if d := os.Getenv("FENCEFS_TORTURE_DURATION"); d != "" {
		var err error
		if duration, err = time.ParseDuration(d); err != nil {
			t.Fatalf("FENCEFS_TORTURE_DURATION: %v", err)
		}
	}
	if testing.Short() {
		duration = 10 * time.Second
	}
	gateway.ForEachServer(t, gateway.ErasureCodedServers, func(t *testing.T, gw *gateway.Gateway) { tortureManyWriters(t, gw, duration) })
}

func tortureManyWriters(t *testing.T, gw *gateway.Gateway, duration time.Duration) {
	bucket := gateway.NewBucket(t, gw)
	const nMounts, nFiles = 3, 4
	mounts := make([]*harness.FS, nMounts)
	for i := range mounts {
		args := []string{"--holder", fmt.Sprintf("W%d", i), "--meta-ttl", "0s", "--attr-ttl", "0s", "--entry-ttl", "0s"}
		if i == 0 {
			args = append(args, "--token", "1")
		}
		mounts[i] = harness.Mount(t, gw, bucket, args...)
	}
	for f := 0; f < nFiles; f++ {
		if err := os.WriteFile(mounts[0].Path(fmt.Sprintf("shared%d", f)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	var (
		mu          sync.Mutex
		records     []appendRecord // GUARDED_BY(mu)
		activations = []activation{{mount: 0, token: 1}}
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range mounts {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(i)))
			m := mounts[i]
			writer := fmt.Sprintf("W%d", i)
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				file := fmt.Sprintf("shared%d", rng.Intn(nFiles))
				r := appendRecord{writer: writer, file: file, seq: seq, start: time.Now()}
				r.tokenBefore = readToken(m.Dir)
				line := fmt.Sprintf("%s %d %d\n", writer, seq, r.tokenBefore)
				r.err = writeClose(m.Path(file), os.O_WRONLY|os.O_APPEND, []byte(line))
				r.ack = time.Now()
				r.tokenAfter = readToken(m.Dir)
				mu.Lock()
				records = append(records, r)
				mu.Unlock()
				if r.err != nil {
					time.Sleep(time.Duration(rng.Intn(20)) * time.Millisecond)
				}
			}
		}(i)
	}

	// The driver: a new, higher token to a random mount every 0.5–2 s.
	rng := rand.New(rand.NewSource(42))
	deadline := time.Now().Add(duration)
	next := uint64(2)
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(500+rng.Intn(1500)) * time.Millisecond)
		i := rng.Intn(nMounts)
		if err := unix.Setxattr(mounts[i].Dir, "user.fencefs.token", []byte(strconv.FormatUint(next, 10)), 0); err != nil {
			t.Errorf("binding token %d on mount %d: %v", next, i, err)
			continue
		}
		mu.Lock()
		activations = append(activations, activation{mount: i, token: next, active: time.Now()})
		mu.Unlock()
		next++
	}
	close(stop)
	wg.Wait()

	// The checker.
	mu.Lock()
	defer mu.Unlock()
	acked, failed := 0, map[string]int{}
	for _, r := range records {
		if r.err == nil {
			acked++
		} else {
			var errno syscall.Errno
			if errors.As(r.err, &errno) {
				failed[errno.Error()]++
			} else {
				failed[r.err.Error()]++
			}
		}
	}
	t.Logf("%d appends acknowledged, failures by errno: %v, %d tokens handed out", acked, failed, len(activations))
	if acked == 0 {
		t.Fatalf("no append was ever acknowledged: the checker proves nothing")
	}

	type lineID struct {
		writer string
		seq    int
	}
	content := map[string][]lineID{}
	for f := 0; f < nFiles; f++ {
		name := fmt.Sprintf("shared%d", f)
		got := readObject(t, gw, bucket, name)
		sc := bufio.NewScanner(strings.NewReader(string(got.body)))
		for sc.Scan() {
			var id lineID
			var tok uint64
			if _, err := fmt.Sscanf(sc.Text(), "%s %d %d", &id.writer, &id.seq, &tok); err != nil {
				t.Fatalf("%s: malformed line %q", name, sc.Text())
			}
			content[name] = append(content[name], id)
		}
	}
	byID := map[lineID]appendRecord{}
	for _, r := range records {
		byID[lineID{r.writer, r.seq}] = r
	}

	// 1. No acknowledged append is lost, and no append refused with EROFS
	// (a definite refusal) landed.
	present := map[lineID]string{}
	for file, ids := range content {
		for _, id := range ids {
			present[id] = file
		}
	}
	for _, r := range records {
		id := lineID{r.writer, r.seq}
		if r.err == nil && present[id] != r.file {
			t.Errorf("acknowledged append %s#%d to %s (epoch %d) is not in the file", r.writer, r.seq, r.file, r.tokenBefore)
		}
		if errors.Is(r.err, syscall.EROFS) && present[id] != "" {
			t.Errorf("append %s#%d was refused with EROFS but is in %s", r.writer, r.seq, present[id])
		}
	}
	// 2. Within each file, the epochs of records whose epoch is known (the
	// mount's token did not change during the write) never decrease.
	for file, ids := range content {
		var maxEpoch uint64
		var maxID lineID
		for _, id := range ids {
			r, ok := byID[id]
			if !ok || r.tokenBefore != r.tokenAfter {
				continue
			}
			if r.tokenBefore < maxEpoch {
				t.Errorf("%s: %s#%d of epoch %d landed after %s#%d of epoch %d", file, id.writer, id.seq, r.tokenBefore, maxID.writer, maxID.seq, maxEpoch)
			}
			if r.tokenBefore > maxEpoch {
				maxEpoch, maxID = r.tokenBefore, id
			}
		}
	}
	// 3. No acknowledged write of epoch e started after a newer epoch was
	// active.
	for _, r := range records {
		if r.err != nil || r.tokenBefore != r.tokenAfter {
			continue
		}
		for _, a := range activations {
			if a.token > r.tokenBefore && !a.active.IsZero() && r.start.After(a.active) {
				t.Errorf("%s#%d (epoch %d) started %v after epoch %d was active and was acknowledged",
					r.writer, r.seq, r.tokenBefore, r.start.Sub(a.active), a.token)
				break
			}
		}
	}
}
