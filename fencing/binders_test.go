package fencing

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/objstore"
	s3store "github.com/fencefs/fencefs/objstore/s3"
)

// childEnv makes the test binary act as a binder process (see childMain).
const childEnv = "FENCING_TEST_BINDER_CHILD"

// bindResult is one Bind attempt's outcome, as reported by binders.
type bindResult struct {
	Holder    string `json:"holder"`
	Requested uint64 `json:"requested"`
	Got       uint64 `json:"got"`
	Err       string `json:"err,omitempty"`
	BadToken  bool   `json:"bad_token,omitempty"`
	Fenced    bool   `json:"fenced,omitempty"`
}

// runBinders makes n Bind attempts with fresh guards (random tokens in
// [1, maxToken], or auto one time in four), each with a distinct holder.
func runBinders(ctx context.Context, store objstore.Store, prefix string, n int, maxToken uint64, seed uint64) []bindResult {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]bindResult, 0, n)
	for i := 0; i < n; i++ {
		tok := uint64(0)
		if rng.IntN(4) != 0 {
			tok = 1 + rng.Uint64N(maxToken)
		}
		holder := fmt.Sprintf("%s-%d", prefix, i)
		r := bindResult{Holder: holder, Requested: tok}
		g, err := New(store, Config{Holder: holder, IntentLinger: time.Hour})
		if err != nil {
			r.Err = err.Error()
			out = append(out, r)
			continue
		}
		got, err := g.Bind(ctx, tok)
		r.Got = got
		if err != nil {
			r.Err = err.Error()
			r.BadToken = errors.Is(err, ErrBadToken)
			r.Fenced = errors.Is(err, ErrFenced)
		}
		_ = g.Close(ctx)
		out = append(out, r)
	}
	return out
}

// childMain is a binder process: it binds against the gateway bucket named
// in its environment and prints one JSON bindResult per line.
func childMain() int {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := s3store.New(ctx, s3store.Config{Endpoint: os.Getenv("FT_ENDPOINT"), Bucket: os.Getenv("FT_BUCKET"),
		Region: os.Getenv("FT_REGION"), AccessKey: os.Getenv("FT_AK"), SecretKey: os.Getenv("FT_SK"), PathStyle: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	var seed uint64
	fmt.Sscan(os.Getenv("FT_SEED"), &seed)
	var n int
	fmt.Sscan(os.Getenv("FT_N"), &n)
	enc := json.NewEncoder(os.Stdout)
	for _, r := range runBinders(ctx, s, os.Getenv(childEnv), n, 40, seed) {
		_ = enc.Encode(r)
	}
	return 0
}

// checkBinders checks the outcome of a binder race: no epoch granted twice,
// every loser refused with a readable reason, the register at the highest
// grant, and each grant's reservation owned by its grantee.
func checkBinders(t *testing.T, ctx context.Context, store objstore.Store, results []bindResult) {
	t.Helper()
	granted := map[uint64]string{}
	var maxGrant uint64
	for _, r := range results {
		switch {
		case r.Err == "" || r.Fenced:
			// Bound (possibly superseded before its sweep ended).
			if r.Got == 0 {
				t.Errorf("%s: no token and no refusal: %+v", r.Holder, r)
				continue
			}
			if prev, dup := granted[r.Got]; dup {
				t.Errorf("epoch %d granted to both %s and %s", r.Got, prev, r.Holder)
			}
			granted[r.Got] = r.Holder
			maxGrant = max(maxGrant, r.Got)
			if r.Requested != 0 && r.Requested != r.Got {
				t.Errorf("%s asked for %d and got %d", r.Holder, r.Requested, r.Got)
			}
		case r.BadToken:
			if !strings.Contains(r.Err, "older than the bucket's epoch") && !strings.Contains(r.Err, "already held by holder") &&
				!strings.Contains(r.Err, "already reserved by holder") {
				t.Errorf("%s: refusal without a clear reason: %s", r.Holder, r.Err)
			}
			if r.Requested == 0 {
				t.Errorf("%s: an auto bind was refused: %s", r.Holder, r.Err)
			}
		default:
			t.Errorf("%s: unexpected error: %s", r.Holder, r.Err)
		}
	}
	if len(granted) == 0 {
		t.Fatal("nobody was granted an epoch")
	}
	reg, _, err := ReadRegister(ctx, store, "")
	if err != nil {
		t.Fatal(err)
	}
	if reg.Epoch != maxGrant || reg.Holder != granted[maxGrant] {
		t.Errorf("register %d held by %s, want the highest grant %d of %s", reg.Epoch, reg.Holder, maxGrant, granted[maxGrant])
	}
	lay := newLayout("")
	for n, h := range granted {
		res, err := objects{store: store}.readReservation(ctx, lay.reservation(n))
		if err != nil {
			t.Errorf("reservation of granted epoch %d: %v", n, err)
		} else if res.Holder != h {
			t.Errorf("reservation of epoch %d is %s's, but %s was granted it", n, res.Holder, h)
		}
	}
	t.Logf("%d attempts, %d grants, register at %d", len(results), len(granted), reg.Epoch)
}

// watchRegister polls the register until stop is closed and reports any
// decrease of the epoch.
func watchRegister(ctx context.Context, store objstore.Store, stop <-chan struct{}) <-chan string {
	out := make(chan string, 1)
	go func() {
		defer close(out)
		lay := newLayout("")
		var last uint64
		for {
			select {
			case <-stop:
				return
			default:
			}
			reg, _, exists, err := objects{store: store, lay: lay}.readRegister(ctx)
			if err == nil && exists {
				if reg.Epoch < last {
					out <- fmt.Sprintf("register went from %d down to %d", last, reg.Epoch)
					return
				}
				last = reg.Epoch
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return out
}

// goBinders starts n goroutines (counted in wg) that each run perG binders
// (runBinders, holders prefix<i>-…) and append their results to *results
// under mu.
func goBinders(ctx context.Context, store objstore.Store, wg *sync.WaitGroup, mu *sync.Mutex, results *[]bindResult, prefix string, n, perG int) {
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs := runBinders(ctx, store, fmt.Sprintf("%s%d", prefix, i), perG, 40, uint64(time.Now().UnixNano())+uint64(i))
			mu.Lock()
			*results = append(*results, rs...)
			mu.Unlock()
		}()
	}
}

// checkRegisterNeverDecreased stops watchRegister and fails t if it saw
// the register's epoch go down.
func checkRegisterNeverDecreased(t *testing.T, stop chan struct{}, decreases <-chan string) {
	t.Helper()
	close(stop)
	if msg, ok := <-decreases; ok {
		t.Error(msg)
	}
}

func TestConcurrentBindersNeverShareAnEpoch(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
		ctx := testCtx(t, 60*time.Second)
		store := newStore()
		stop := make(chan struct{})
		decreases := watchRegister(ctx, store, stop)
		const goroutines, perG = 8, 6
		var mu sync.Mutex
		var results []bindResult
		var wg sync.WaitGroup
		goBinders(ctx, store, &wg, &mu, &results, "g", goroutines, perG)
		wg.Wait()
		checkRegisterNeverDecreased(t, stop, decreases)
		checkBinders(t, ctx, store, results)
	})
}

func TestConcurrentBinderProcessesNeverShareAnEpoch(t *testing.T) {
	gw := gateway.ForTest(t)
	bucket := gateway.NewBucket(t, gw)
	store := gatewayStore(t, gw, bucket)
	ctx := testCtx(t, 90*time.Second)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	decreases := watchRegister(ctx, store, stop)
	var mu sync.Mutex
	var results []bindResult
	var wg sync.WaitGroup
	// Two binder processes and four binder goroutines in this one.
	for p := 0; p < 2; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"=p"+fmt.Sprint(p), "FT_ENDPOINT="+gw.Endpoint, "FT_BUCKET="+bucket,
				"FT_REGION="+gw.Region, "FT_AK="+gw.AccessKey, "FT_SK="+gw.SecretKey,
				fmt.Sprintf("FT_SEED=%d", time.Now().UnixNano()+int64(p)), "FT_N=10")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			outp, err := cmd.StdoutPipe()
			if err != nil {
				t.Error(err)
				return
			}
			if err := cmd.Start(); err != nil {
				t.Error(err)
				return
			}
			var rs []bindResult
			sc := bufio.NewScanner(outp)
			for sc.Scan() {
				var r bindResult
				if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
					t.Errorf("child output %q: %v", sc.Text(), err)
					continue
				}
				rs = append(rs, r)
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("binder process %d: %v\n%s", p, err, stderr.String())
			}
			if len(rs) != 10 {
				t.Errorf("binder process %d reported %d results, want 10", p, len(rs))
			}
			mu.Lock()
			results = append(results, rs...)
			mu.Unlock()
		}(p)
	}
	goBinders(ctx, store, &wg, &mu, &results, "in", 4, 8)
	wg.Wait()
	checkRegisterNeverDecreased(t, stop, decreases)
	procs := map[string]bool{}
	for _, r := range results {
		procs[r.Holder[:2]] = true
	}
	if !procs["p0"] || !procs["p1"] {
		t.Errorf("results from both processes expected, got holders from %v", procs)
	}
	checkBinders(t, ctx, store, results)
}
