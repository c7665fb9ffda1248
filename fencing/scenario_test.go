package fencing

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// pauser pauses writers at a failpoint for one key until released.
type pauser struct {
	armed   atomic.Bool
	key     string
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func newPauser(key string) *pauser {
	p := &pauser{key: key, reached: make(chan struct{}), release: make(chan struct{})}
	p.armed.Store(true)
	return p
}

func (p *pauser) hook(ctx context.Context, key string) {
	if key != p.key || !p.armed.Load() {
		return
	}
	p.once.Do(func() { close(p.reached) })
	select {
	case <-p.release:
	case <-ctx.Done():
	}
}

func (p *pauser) wait(t testing.TB, ctx context.Context) {
	t.Helper()
	select {
	case <-p.reached:
	case <-ctx.Done():
		t.Fatal("the writer never reached the failpoint")
	}
}

func mustFenced(t testing.TB, what string, err error, msg string) {
	t.Helper()
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("%s: err = %v, want ErrFenced", what, err)
	}
	if msg != "" && !strings.Contains(err.Error(), msg) {
		t.Errorf("%s: %q does not say %q", what, err.Error(), msg)
	}
}

func TestSeedScenarioStaleLeaderIsRefusedEveryMutation(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
		for _, first := range []string{"put", "create", "delete", "copy"} {
			t.Run("first_"+first, func(t *testing.T) {
				ctx := testCtx(t, 30*time.Second)
				s := newStore()
				a := newGuard(t, s, Config{Holder: "A"})
				bind(t, ctx, a, 17)
				a1, err := gput(ctx, a, "data/a1", "A v1", Version{})
				if err != nil {
					t.Fatal(err)
				}
				a2, err := gput(ctx, a, "data/a2", "A v1", Version{})
				if err != nil {
					t.Fatal(err)
				}
				if a1.Meta[MetaEpoch] != "17" || a1.Meta[MetaHolder] != "A" || a1.Meta[MetaWID] == "" {
					t.Fatalf("stamps: %v", a1.Meta)
				}

				b := newGuard(t, s, Config{Holder: "B"})
				bind(t, ctx, b, 18)
				if _, err := gput(ctx, b, "data/b1", "B data", Version{}); err != nil {
					t.Fatal(err)
				}
				_, cur, _ := read(t, ctx, s, "data/a1")
				if _, err := gput(ctx, b, "data/a1", "B overwrote a1", VersionOf(cur)); err != nil {
					t.Fatalf("B overwriting a swept key: %v", err)
				}

				ops := map[string]func() error{
					"put": func() error { _, err := gput(ctx, a, "data/a2", "A v2", VersionOf(a2)); return err },
					"create": func() error {
						_, err := gput(ctx, a, "data/new", "A new", Version{})
						return err
					},
					"delete": func() error { return a.Delete(ctx, "data/a1", VersionOf(a1)) },
					"copy": func() error {
						_, err := a.Copy(ctx, "data/a2", a2.ETag, "data/copy", Version{}, nil)
						return err
					},
				}
				err = ops[first]()
				mustFenced(t, "first "+first, err, "newer than our token 17")
				if !strings.Contains(err.Error(), "epoch 18") || !strings.Contains(err.Error(), "holder B") {
					t.Errorf("the refusal should name the newer epoch and its holder: %v", err)
				}
				if st := a.Status(); st.State != StateFenced {
					t.Fatalf("A not latched fenced: %+v", st)
				}
				for name, op := range ops {
					mustFenced(t, "latched "+name, op(), "")
				}
				want := map[string]string{"data/b1": "B data", "data/a1": "B overwrote a1", "data/a2": "A v1"}
				for k, v := range want {
					got, info, ok := read(t, ctx, s, k)
					if !ok || got != v {
						t.Errorf("%s = %q (exists %v), want %q", k, got, ok, v)
					}
					// data/a2 keeps A's stamp when A released its settled
					// entry before B's sweep (release.go), else B's sweep
					// restamped it; either way it holds A's last write
					// from before the takeover.
					if e := info.Meta[MetaEpoch]; e != "18" && (k != "data/a2" || e != "17") {
						t.Errorf("%s stamped epoch %s, want 18 (B's write or B's sweep)", k, e)
					}
				}
				for _, k := range []string{"data/new", "data/copy"} {
					if _, _, ok := read(t, ctx, s, k); ok {
						t.Errorf("%s exists: the fenced leader created it", k)
					}
				}
			})
		}
	})
}

// lossyStore commits writes and then "loses" the response of selected ones:
// either an ErrUnavailable (Guard retries) or the 412 of a client's own
// internal retry of the committed request.
type lossyStore struct {
	objstore.Store
	mu   sync.Mutex
	lose map[string]string // key → "unavailable" | "412"
}

func (l *lossyStore) take(key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.lose[key]
	delete(l.lose, key)
	return m
}

func (l *lossyStore) Put(ctx context.Context, key string, b io.ReaderAt, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	return l.write(key, func() (objstore.ObjectInfo, error) { return l.Store.Put(ctx, key, b, size, opts) })
}

func (l *lossyStore) Copy(ctx context.Context, src, srcETag, dst string, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	return l.write(dst, func() (objstore.ObjectInfo, error) { return l.Store.Copy(ctx, src, srcETag, dst, opts) })
}

// write makes the write to key (do) and then, as planned for key, loses
// its response (ErrUnavailable) or repeats it (the 412 a retry of a landed
// write meets).
func (l *lossyStore) write(key string, do func() (objstore.ObjectInfo, error)) (objstore.ObjectInfo, error) {
	info, err := do()
	if err != nil {
		return info, err
	}
	switch l.take(key) {
	case "unavailable":
		return objstore.ObjectInfo{}, objstore.ErrUnavailable
	case "412":
		return do()
	}
	return info, nil
}

func (l *lossyStore) Delete(ctx context.Context, key string, cond objstore.Condition) error {
	if err := l.Store.Delete(ctx, key, cond); err != nil {
		return err
	}
	switch l.take(key) {
	case "unavailable":
		return objstore.ErrUnavailable
	case "412":
		return l.Store.Delete(ctx, key, cond)
	}
	return nil
}

func TestLostResponseIsResolvedByWriteID(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
		for _, loss := range []string{"unavailable", "412"} {
			for _, tombstones := range []bool{false, true} {
				name := loss
				if tombstones {
					name += "_tombstone_deletes"
				}
				t.Run(name, func(t *testing.T) {
					ctx := testCtx(t, 30*time.Second)
					ls := &lossyStore{Store: newStore(), lose: map[string]string{}}
					g := newGuard(t, ls, Config{Holder: "A", TombstoneDeletes: tombstones})
					bind(t, ctx, g, 1)
					old := rawPut(t, ctx, ls, "f/over", "before")
					victim := rawPut(t, ctx, ls, "f/victim", "to delete")
					src := rawPut(t, ctx, ls, "f/src", "copied bytes")
					for _, k := range []string{"f/over", "f/new", "f/victim", "f/copy"} {
						ls.lose[k] = loss
					}
					info, err := gput(ctx, g, "f/over", "after", VersionOf(old))
					if err != nil {
						t.Fatalf("overwrite with a lost response: %v", err)
					}
					if got, cur, _ := read(t, ctx, ls, "f/over"); got != "after" || cur.Meta[MetaWID] != info.Meta[MetaWID] || info.ETag != cur.ETag {
						t.Errorf("overwrite resolved to %+v, object is %q %+v", info, got, cur)
					}
					if _, err := gput(ctx, g, "f/new", "created", Version{}); err != nil {
						t.Fatalf("create with a lost response: %v", err)
					}
					if err := g.Delete(ctx, "f/victim", VersionOf(victim)); err != nil {
						t.Fatalf("delete with a lost response: %v", err)
					}
					_, vinfo, exists := read(t, ctx, ls, "f/victim")
					if tombstones != (exists && IsTombstone(vinfo)) || (!tombstones && exists) {
						t.Errorf("after delete: exists=%v tombstone=%v (tombstone deletes %v)", exists, IsTombstone(vinfo), tombstones)
					}
					cinfo, err := g.Copy(ctx, "f/src", src.ETag, "f/copy", Version{}, nil)
					if err != nil {
						t.Fatalf("copy with a lost response: %v", err)
					}
					if got, _, _ := read(t, ctx, ls, "f/copy"); got != "copied bytes" || cinfo.Meta[MetaEpoch] != "1" {
						t.Errorf("copy = %q, %v", got, cinfo.Meta)
					}
					if len(ls.lose) != 0 {
						t.Errorf("some losses were not exercised: %v", ls.lose)
					}
					if st := g.Status(); st.State != StateActive {
						t.Errorf("a lost response changed the state: %+v", st)
					}
				})
			}
		}
	})
}

func TestETagABAAfterSweepStillRefusesTheOldWriter(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
		ctx := testCtx(t, 30*time.Second)
		s := newStore()
		pOver, pCreate := newPauser("k"), newPauser("n")
		pOver.armed.Store(false)
		a := newGuard(t, s, Config{Holder: "A", Hooks: Hooks{AfterValidate: func(ctx context.Context, key string) {
			pOver.hook(ctx, key)
			pCreate.hook(ctx, key)
		}}})
		bind(t, ctx, a, 1)
		base, err := gput(ctx, a, "k", "X", Version{})
		if err != nil {
			t.Fatal(err)
		}
		pOver.armed.Store(true)
		overErr, createErr := make(chan error, 1), make(chan error, 1)
		go func() { _, err := gput(ctx, a, "k", "Y from A", VersionOf(base)); overErr <- err }()
		go func() { _, err := gput(ctx, a, "n", "N from A", Version{}); createErr <- err }()
		pOver.wait(t, ctx)
		pCreate.wait(t, ctx)

		b := newGuard(t, s, Config{Holder: "B"})
		bind(t, ctx, b, 2)
		_, swept, _ := read(t, ctx, s, "k")
		if swept.ETag == base.ETag || !strings.Contains(swept.Meta[MetaSwept], base.ETag) {
			t.Fatalf("sweep left ETag %s (base %s), record %q", swept.ETag, base.ETag, swept.Meta[MetaSwept])
		}
		// B writes back exactly A's base bytes, twice (through another
		// content), each time conditioned on what it read.
		cur := VersionOf(swept)
		for _, content := range []string{"X", "Z", "X"} {
			info, err := gput(ctx, b, "k", content, cur)
			if err != nil {
				t.Fatalf("B writes %q: %v", content, err)
			}
			if info.ETag == base.ETag {
				t.Fatalf("B's write of %q got ETag %s, the old writer's base", content, info.ETag)
			}
			_, ci, _ := read(t, ctx, s, "k")
			if ci.Meta[MetaSwept] == "" {
				t.Errorf("the ABA record was not carried forward: %v", ci.Meta)
			}
			cur = VersionOf(ci)
		}
		// The created key: swept to a tombstone; B re-creates and deletes it.
		_, nt, ok := read(t, ctx, s, "n")
		if !ok || !IsTombstone(nt) || nt.Meta[MetaEpoch] != "2" {
			t.Fatalf("the sweep did not tombstone the key A was creating: %v %+v", ok, nt)
		}
		ni, err := gput(ctx, b, "n", "N from B", Version{}) // over the tombstone, transparently
		if err != nil {
			t.Fatalf("B creating over a tombstone: %v", err)
		}
		_, nfull, _ := read(t, ctx, s, "n")
		if err := b.Delete(ctx, "n", VersionOf(nfull)); err != nil {
			t.Fatal(err)
		}
		if _, nd, ok := read(t, ctx, s, "n"); !ok || !IsTombstone(nd) {
			t.Fatalf("delete of a key with a young ABA record must leave a tombstone (created %s)", ni.ETag)
		}

		close(pOver.release)
		close(pCreate.release)
		mustFenced(t, "A's delayed overwrite", <-overErr, "")
		mustFenced(t, "A's delayed create", <-createErr, "")
		if got, info, _ := read(t, ctx, s, "k"); got != "X" || info.Meta[MetaEpoch] != "2" {
			t.Errorf("k = %q epoch %s after A's delayed commit; want B's X", got, info.Meta[MetaEpoch])
		}
		if _, info, ok := read(t, ctx, s, "n"); !ok || !IsTombstone(info) {
			t.Errorf("n: A's delayed create landed: %+v", info)
		}
	})
}
