package fencing

import (
	"errors"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

func TestFollowsDirectlyOnlyWhenTheRegisterNamedThePreviousBinding(t *testing.T) {
	own := Register{Epoch: 3, Holder: "A", ClaimID: "c3"}
	for _, tc := range []struct {
		name      string
		found     claimed
		prevToken uint64
		prevClaim string
		prevState State
		want      bool
	}{
		{"own next token, nobody in between", claimed{reg: own, known: true}, 3, "c3", StateActive, true},
		{"re-run of a failed sweep", claimed{reg: own, known: true}, 3, "c3", StateSweeping, true},
		{"another holder's epoch in between", claimed{reg: Register{Epoch: 4, Holder: "B", ClaimID: "b"}, known: true}, 3, "c3", StateActive, false},
		{"a restart of the same holder name in between", claimed{reg: Register{Epoch: 3, Holder: "A", ClaimID: "other"}, known: true}, 3, "c3", StateActive, false},
		{"the mount knew it was fenced", claimed{reg: own, known: true}, 3, "c3", StateFenced, false},
		{"first bind", claimed{known: false}, 0, "", StateUnbound, false},
		{"what the claim replaced is unknown (lost answer)", claimed{known: false}, 3, "c3", StateActive, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := followsDirectly(tc.found, tc.prevToken, tc.prevClaim, "A", tc.prevState); got != tc.want {
				t.Errorf("followsDirectly = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAChangeHeldAcrossAnotherHoldersEpochIsNeverStored: a change made
// under A's token 1 is refused once B's epoch 2 was active, even after A
// leads again with 3; one made after that bind lands; a leader that binds
// its own next token with nobody in between keeps what it holds.
func TestAChangeHeldAcrossAnotherHoldersEpochIsNeverStored(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	s := newMem()
	a := newGuard(t, s, Config{Holder: "A"})
	b := newGuard(t, s, Config{Holder: "B"})
	bind(t, ctx, a, 1)
	held := a.Binding()
	bind(t, ctx, a, 2) // its own next token: the line goes on
	if !a.Binding().Same(held) {
		t.Fatalf("binding A's own next token started a new line: %+v then %+v", held, a.Binding())
	}
	if _, err := a.Put(Under(ctx, held), "k", bytesReader([]byte("kept")), 4, Version{}, nil); err != nil {
		t.Fatalf("a change held across A's own next bind: %v, want it stored", err)
	}
	info, err := s.Stat(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	held = a.Binding()
	bind(t, ctx, b, 3)
	if _, err := b.Put(ctx, "k", bytesReader([]byte("B's")), 3, VersionOf(info), nil); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	info, err = s.Stat(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	bind(t, ctx, a, 4) // A leads again without having noticed B
	if a.Binding().Same(held) {
		t.Fatal("A's bind after B's epoch continued A's old line")
	}
	_, err = a.Put(Under(ctx, held), "k", bytesReader([]byte("refused by A")), 12, VersionOf(info), nil)
	if !errors.Is(err, ErrFenced) || !errors.Is(err, ErrSuperseded) {
		t.Fatalf("a change held across B's epoch: %v, want ErrFenced and ErrSuperseded", err)
	}
	if st := a.Status(); st.State != StateActive {
		t.Fatalf("the refusal of an old change latched the active Guard: %+v", st)
	}
	_, err = a.Put(Under(ctx, a.Binding()), "k", bytesReader([]byte("after")), 5, VersionOf(info), nil)
	if err != nil {
		t.Fatalf("a change made after the new bind: %v", err)
	}
	body, _, _, err := readE(ctx, s, "k")
	if err != nil || body != "after" {
		t.Fatalf("k = %q, %v; want \"after\"", body, err)
	}
}

// TestEveryMutationHeldAcrossAnotherHoldersEpochIsRefused: each of the
// Guard's mutations, made under a binding that another holder's epoch
// superseded, is refused although the Guard leads again; the object keeps
// the newer holder's version.
func TestEveryMutationHeldAcrossAnotherHoldersEpochIsRefused(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	s := newMem()
	a := newGuard(t, s, Config{Holder: "A"})
	b := newGuard(t, s, Config{Holder: "B"})
	bind(t, ctx, a, 1)
	if _, err := a.Put(ctx, "src", bytesReader([]byte("src")), 3, Version{}, nil); err != nil {
		t.Fatal(err)
	}
	st, err := a.StartStream(ctx, "streamed", Version{}, nil) // parts uploaded under token 1
	if err != nil {
		t.Fatal(err)
	}
	part, err := st.UploadPart(ctx, 1, bytesReader([]byte("held part")), 0, 9)
	if err != nil {
		t.Fatal(err)
	}
	held := a.Binding()
	bind(t, ctx, b, 2)
	for _, k := range []string{"k", "streamed"} {
		if _, err := b.Put(ctx, k, bytesReader([]byte("B's")), 3, Version{}, nil); err != nil {
			t.Fatalf("B's write of %s: %v", k, err)
		}
	}
	bind(t, ctx, a, 3)
	k, _, _, _ := readE(ctx, s, "k")
	kInfo, err := s.Stat(ctx, "k")
	if err != nil || k != "B's" {
		t.Fatalf("k = %q, %v", k, err)
	}
	srcInfo, err := s.Stat(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	hctx := Under(ctx, held)
	for _, tc := range []struct {
		name string
		op   func() error
	}{
		{"put", func() error {
			_, err := a.Put(hctx, "k", bytesReader([]byte("refused")), 7, VersionOf(kInfo), nil)
			return err
		}},
		{"replace", func() error {
			_, err := a.Replace(hctx, "k", bytesReader([]byte("refused")), 7, Version{ETag: "old"}, nil)
			return err
		}},
		{"create", func() error {
			_, err := a.Create(hctx, "new", bytesReader([]byte("refused")), 7, nil)
			return err
		}},
		{"delete", func() error { return a.Delete(hctx, "k", VersionOf(kInfo)) }},
		{"copy", func() error {
			_, err := a.CopyFrom(hctx, srcInfo, "k", VersionOf(kInfo), nil)
			return err
		}},
		{"a streamed upload's commit", func() error {
			st.Rebase(VersionOf(kInfo))
			_, err := a.CommitStream(hctx, st, []objstore.Part{part}, nil)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.op(); !errors.Is(err, ErrFenced) || !errors.Is(err, ErrSuperseded) {
				t.Fatalf("%s held across B's epoch = %v, want ErrFenced and ErrSuperseded", tc.name, err)
			}
		})
	}
	for _, key := range []string{"k", "streamed"} {
		if got, _, _, _ := readE(ctx, s, key); got != "B's" {
			t.Errorf("%s = %q, want B's version", key, got)
		}
	}
	if _, _, exists, _ := readE(ctx, s, "new"); exists {
		t.Error("a create held across B's epoch landed")
	}
}
