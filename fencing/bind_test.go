package fencing

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

func TestBindRefusesOlderAndSharedTokens(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
		ctx := testCtx(t, 30*time.Second)
		s := newStore()
		a := newGuard(t, s, Config{Holder: "A"})
		if got := bind(t, ctx, a, 17); got != 17 {
			t.Fatalf("bound %d, want 17", got)
		}
		if st := a.Status(); st.State != StateActive || st.Token != 17 || st.Epoch != 17 || st.EpochHolder != "A" {
			t.Fatalf("status after bind: %+v", st)
		}
		b := newGuard(t, s, Config{Holder: "B"})
		for _, tc := range []struct {
			token uint64
			msg   string
		}{
			{16, "token 16 is older than the bucket's epoch 17 (held by holder A"},
			{17, "epoch 17 is already held by holder A"},
		} {
			_, err := b.Bind(ctx, tc.token)
			if !errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Bind(%d) = %v, want ErrBadToken saying %q", tc.token, err, tc.msg)
			}
			if st := b.Status(); st.State != StateUnbound {
				t.Errorf("a refused bind changed the state: %+v", st)
			}
		}
		if got := bind(t, ctx, b, 18); got != 18 {
			t.Fatalf("bound %d, want 18", got)
		}
		// A learns of it at its next validation.
		err := a.Refresh(ctx)
		if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "epoch 18 held by holder B is newer than our token 17") {
			t.Fatalf("Refresh = %v, want a readable ErrFenced", err)
		}
		if st := a.Status(); st.State != StateFenced || st.Epoch != 18 || st.EpochHolder != "B" || !strings.Contains(st.Reason, "epoch 18") {
			t.Errorf("fenced status: %+v", st)
		}
		// Auto issues max+1, also to a fenced guard taking over again.
		if got := bind(t, ctx, a, 0); got != 19 {
			t.Errorf("auto bind got %d, want 19", got)
		}
		if st := a.Status(); st.State != StateActive || st.Token != 19 {
			t.Errorf("re-bound status: %+v", st)
		}
		// A lower token than the guard's own is refused without I/O.
		if _, err := a.Bind(ctx, 18); !errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), "lower than the token 19") {
			t.Errorf("Bind below own token = %v", err)
		}
		// Binding the active token again is a no-op.
		if got := bind(t, ctx, a, 19); got != 19 {
			t.Errorf("re-bind of the active token = %d", got)
		}
		reg, recent, err := ReadRegister(ctx, s, "")
		if err != nil {
			t.Fatal(err)
		}
		if reg.Epoch != 19 || reg.Holder != "A" || reg.PrevEpoch != 18 || reg.Format != FormatVersion {
			t.Errorf("register = %+v", reg)
		}
		if want := []uint64{17, 18, 19}; !equalU64(recent, want) {
			t.Errorf("recent epochs = %v, want %v", recent, want)
		}
	})
}

func TestStableHolderReclaimFencesThePreviousInstance(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
		ctx := testCtx(t, 30*time.Second)
		s := newStore()
		old := newGuard(t, s, Config{Holder: "svc"})
		bind(t, ctx, old, 5)
		if _, err := gput(ctx, old, "f", "old instance", Version{}); err != nil {
			t.Fatal(err)
		}
		// A restart with the same stable holder name binds the same token.
		restarted := newGuard(t, s, Config{Holder: "svc"})
		bind(t, ctx, restarted, 5)
		_, info, _ := read(t, ctx, s, "f")
		_, err := gput(ctx, old, "f", "late write", VersionOf(info))
		if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "claimed again") {
			t.Fatalf("the previous instance wrote after the restart reclaimed its epoch: %v", err)
		}
		if _, err := gput(ctx, restarted, "g", "new instance", Version{}); err != nil {
			t.Fatalf("restarted instance cannot write: %v", err)
		}
	})
}

func TestUnboundAndOffGuards(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	s := newMem()
	ro := newGuard(t, s, Config{})
	if _, err := gput(ctx, ro, "k", "x", Version{}); !errors.Is(err, ErrReadOnly) {
		t.Errorf("unbound Put = %v, want ErrReadOnly", err)
	}
	if err := ro.Delete(ctx, "k", Version{ETag: "e"}); !errors.Is(err, ErrReadOnly) {
		t.Errorf("unbound Delete = %v, want ErrReadOnly", err)
	}
	// Refresh on an unbound guard shows the bucket's epoch.
	other := newGuard(t, s, Config{Holder: "L"})
	bind(t, ctx, other, 3)
	if err := ro.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if st := ro.Status(); st.State != StateUnbound || st.Epoch != 3 || st.EpochHolder != "L" {
		t.Errorf("unbound status after refresh: %+v", st)
	}

	off := newGuard(t, s, Config{Mode: ModeOff})
	if st := off.Status(); st.State != StateOff {
		t.Errorf("off state = %v", st.State)
	}
	if _, err := off.Bind(ctx, 4); !errors.Is(err, ErrBadToken) {
		t.Errorf("Bind in mode off = %v", err)
	}
	info, err := gput(ctx, off, "k", "plain", Version{})
	if err != nil {
		t.Fatalf("off Put: %v", err)
	}
	if info.Meta[MetaEpoch] != "" || info.Meta[MetaWID] == "" {
		t.Errorf("off mode stamps: %v", info.Meta)
	}
	// Per-object conditions still hold in mode off.
	if _, err := gput(ctx, off, "k", "again", Version{}); !errors.Is(err, ErrStale) {
		t.Errorf("off create over an existing key = %v, want ErrStale", err)
	}
	if err := off.Delete(ctx, "k", VersionOf(info)); err != nil {
		t.Errorf("off Delete: %v", err)
	}
	// Protocol objects are never writable through the guard.
	if _, err := gput(ctx, off, ".fencefs/epoch", "{}", Version{}); !errors.Is(err, objstore.ErrInvalid) {
		t.Errorf("writing the register through the guard = %v", err)
	}
	if _, err := New(s, Config{Mode: "paranoid"}); err == nil {
		t.Error("unknown mode accepted")
	}
	if _, err := New(s, Config{Domain: "nodelim"}); err == nil {
		t.Error("domain without a trailing slash accepted")
	}
	if _, err := New(s, Config{Holder: "a,b"}); err == nil {
		t.Error("holder with a comma accepted")
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestBindAtTheEndOfTheTokenSpaceNeverGoesBack(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
		ctx := testCtx(t, 30*time.Second)
		s := newStore()
		a := newGuard(t, s, Config{Holder: "A"})
		if _, err := a.Bind(ctx, MaxToken+1); !errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), "is above the largest token") {
			t.Fatalf("Bind(MaxToken+1) = %v, want ErrBadToken naming the largest token", err)
		}
		if got := bind(t, ctx, a, MaxToken); got != MaxToken {
			t.Fatalf("bound %d, want MaxToken", got)
		}
		b := newGuard(t, s, Config{Holder: "B"})
		if n, err := b.Bind(ctx, 0); !errors.Is(err, ErrTokensSpent) || n != 0 {
			t.Fatalf("auto Bind on a spent register = %d, %v; want ErrTokensSpent", n, err)
		}
		if st := b.Status(); st.State != StateUnbound {
			t.Errorf("a spent auto bind changed the state: %+v", st)
		}
		if n, err := Raise(ctx, s, Config{Holder: "raise"}, 0); !errors.Is(err, ErrTokensSpent) || n != 0 {
			t.Errorf("Raise(auto) on a spent register = %d, %v; want ErrTokensSpent", n, err)
		}
		reg, _, err := ReadRegister(ctx, s, "")
		if err != nil || reg.Epoch != MaxToken || reg.Holder != "A" {
			t.Fatalf("register after the refusals: %+v, %v; want epoch MaxToken held by A", reg, err)
		}
		// The leader at the largest token keeps writing: nothing took over.
		if _, err := gput(ctx, a, "k", "still the leader", Version{}); err != nil {
			t.Fatalf("the leader's create after the refused takeovers: %v", err)
		}
	})
}

func TestAutoBindOnARegisterBeyondTheLargestTokenIsSpent(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
		ctx := testCtx(t, 30*time.Second)
		s := newStore()
		// A register written by a fencefs that accepted any uint64.
		legacy, err := json.Marshal(Register{Format: FormatVersion, Epoch: 1<<64 - 1, Holder: "old", ClaimID: "c0"})
		if err != nil {
			t.Fatal(err)
		}
		rawPut(t, ctx, s, newLayout("").register(), string(legacy))
		b := newGuard(t, s, Config{Holder: "B"})
		if n, err := b.Bind(ctx, 0); !errors.Is(err, ErrTokensSpent) || !strings.Contains(err.Error(), "18446744073709551615") {
			t.Errorf("auto Bind over a legacy register = %d, %v; want ErrTokensSpent naming its epoch", n, err)
		}
		if _, err := b.Bind(ctx, MaxToken); !errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), "older than the bucket's epoch 18446744073709551615") {
			t.Errorf("Bind(MaxToken) over a legacy register = %v, want older than the bucket's epoch", err)
		}
		if reg, _, err := ReadRegister(ctx, s, ""); err != nil || reg.Epoch != 1<<64-1 {
			t.Errorf("the register went back: %+v, %v", reg, err)
		}
	})
}
