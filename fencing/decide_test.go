package fencing

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

func TestDecideBind(t *testing.T) {
	reg := func(epoch uint64, holder, claim string) Register {
		return Register{Format: 1, Epoch: epoch, Holder: holder, ClaimID: claim}
	}
	tests := []struct {
		name    string
		reg     Register
		exists  bool
		token   uint64
		want    bindStep
		wantErr error
		msg     string // substring of the refusal
	}{
		{"first binder of a new bucket reserves", Register{}, false, 1, bindReserve, nil, ""},
		{"newer token reserves", reg(17, "A", "a1"), true, 18, bindReserve, nil, ""},
		{"token far above reserves", reg(17, "A", "a1"), true, 1000, bindReserve, nil, ""},
		{"older token is refused", reg(18, "B", "b1"), true, 17, bindRefuse, ErrBadToken, "token 17 is older than the bucket's epoch 18 (held by holder B"},
		{"same epoch held by another holder is refused", reg(18, "B", "b1"), true, 18, bindRefuse, ErrBadToken, "epoch 18 is already held by holder B"},
		{"our own claim is already bound (lost CAS response)", reg(18, "me", "c1"), true, 18, bindDone, nil, ""},
		{"our stable holder name with another claim reclaims", reg(18, "me", "old"), true, 18, bindReclaim, nil, ""},
		{"token zero is refused", Register{}, false, 0, bindRefuse, ErrBadToken, "token 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decideBind(tc.reg, tc.exists, tc.token, "me", "c1")
			if got != tc.want {
				t.Errorf("step = %v, want %v", got, tc.want)
			}
			if tc.wantErr == nil && err != nil {
				t.Errorf("unexpected error %v", err)
			}
			if tc.wantErr != nil && (!errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.msg)) {
				t.Errorf("error = %v, want %v containing %q", err, tc.wantErr, tc.msg)
			}
		})
	}
}

func TestAutoTokenIsAboveEverythingSeen(t *testing.T) {
	tests := []struct {
		name        string
		reg         Register
		exists      bool
		maxReserved uint64
		current     uint64
		want        uint64
		spent       string // non-empty: ErrTokensSpent naming this
	}{
		{name: "empty bucket issues 1", want: 1},
		{name: "register 17 issues 18", reg: Register{Epoch: 17}, exists: true, want: 18},
		{name: "a reservation above the register wins", reg: Register{Epoch: 17}, exists: true, maxReserved: 20, want: 21},
		{name: "reset register never reissues a reserved number", maxReserved: 40, want: 41},
		{name: "a rebinding guard goes above its own token", reg: Register{Epoch: 5}, exists: true, current: 9, want: 10},
		{name: "one below the largest issues the largest", reg: Register{Epoch: MaxToken - 1}, exists: true, want: MaxToken},
		{name: "a register at the largest token is spent", reg: Register{Epoch: MaxToken}, exists: true,
			spent: "the epoch register is at epoch 9223372036854775807 and the largest token is 9223372036854775807"},
		{name: "a legacy register at 2^64-1 is spent, not wrapped to 0", reg: Register{Epoch: 1<<64 - 1}, exists: true,
			spent: "the epoch register is at epoch 18446744073709551615"},
		{name: "a reservation at the largest token is spent", maxReserved: MaxToken, spent: "a reservation is at epoch 9223372036854775807"},
		{name: "a guard holding the largest token is spent", reg: Register{Epoch: 3}, exists: true, current: MaxToken,
			spent: "this mount's token is at epoch 9223372036854775807"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := autoToken(tc.reg, tc.exists, tc.maxReserved, tc.current)
			if tc.spent != "" {
				if !errors.Is(err, ErrTokensSpent) || !errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), tc.spent) || got != 0 {
					t.Errorf("autoToken = %d, %v; want ErrTokensSpent saying %q", got, err, tc.spent)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("autoToken = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestDecideBindRefusesTokensAboveTheLargest(t *testing.T) {
	for _, tc := range []struct {
		token uint64
		step  bindStep
	}{
		{MaxToken, bindReserve},
		{MaxToken + 1, bindRefuse},
		{1<<64 - 1, bindRefuse},
	} {
		step, err := decideBind(Register{Epoch: 5}, true, tc.token, "B", "c")
		if step != tc.step {
			t.Errorf("decideBind(%d) = %v, %v; want step %v", tc.token, step, err, tc.step)
		}
		if tc.step == bindRefuse && (!errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), "is above the largest token, 9223372036854775807")) {
			t.Errorf("decideBind(%d) error %v does not name the largest token", tc.token, err)
		}
	}
}

func TestReservationOwnership(t *testing.T) {
	tests := []struct {
		name   string
		res    reservation
		holder string
		claim  string
		ours   bool
	}{
		{"our claim (lost create response)", reservation{Epoch: 3, Holder: "x", ClaimID: "c1"}, "me", "c1", true},
		{"our stable holder name", reservation{Epoch: 3, Holder: "me", ClaimID: "old"}, "me", "c1", true},
		{"someone else's", reservation{Epoch: 3, Holder: "B", ClaimID: "b"}, "me", "c1", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ours, err := reservationOurs(tc.res, tc.holder, tc.claim)
			if ours != tc.ours || (err == nil) != tc.ours {
				t.Fatalf("ours=%v err=%v, want ours=%v", ours, err, tc.ours)
			}
			if !tc.ours && (!errors.Is(err, ErrBadToken) || !strings.Contains(err.Error(), "holder B")) {
				t.Errorf("refusal %v should wrap ErrBadToken and name holder B", err)
			}
		})
	}
}

func TestClassifyRegister(t *testing.T) {
	tests := []struct {
		name string
		reg  Register
		want verdict
		msg  string
	}{
		{"our epoch and claim is fine", Register{Epoch: 17, Holder: "A", ClaimID: "a"}, verdictOK, ""},
		{"a newer epoch fences", Register{Epoch: 18, Holder: "B", ClaimID: "b"}, verdictFenced, "epoch 18 held by holder B is newer than our token 17"},
		{"our epoch reclaimed by another instance fences", Register{Epoch: 17, Holder: "A", ClaimID: "a2"}, verdictFenced, "claimed again"},
		{"an older register cannot be trusted", Register{Epoch: 3, Holder: "Z", ClaimID: "z"}, verdictUnverified, "older than our token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, msg := classifyRegister(tc.reg, 17, "a")
			if got != tc.want || !strings.Contains(msg, tc.msg) {
				t.Errorf("got %v %q, want %v containing %q", got, msg, tc.want, tc.msg)
			}
		})
	}
}

func TestResolveRefusedCommit(t *testing.T) {
	obj := func(epoch, wid string, tomb bool) objstore.ObjectInfo {
		m := map[string]string{MetaEpoch: epoch, MetaWID: wid, MetaHolder: "h"}
		size := int64(10)
		if tomb {
			m[MetaTombstone] = "1"
			size = TombstoneSize
		}
		return objstore.ObjectInfo{ETag: "cur", Size: size, Meta: m}
	}
	overwrite := Version{ETag: "base"}
	swept := func(epoch, from string) objstore.ObjectInfo {
		o := obj(epoch, "sweep", false)
		o.Meta[MetaSweptFrom] = from
		return o
	}
	sweptOurs := func(epoch, wid string) objstore.ObjectInfo {
		o := swept(epoch, "landed")
		o.Meta[MetaSweptWID] = wid
		return o
	}
	tests := []struct {
		name   string
		kind   writeKind
		cur    objstore.ObjectInfo
		exists bool
		base   Version
		want   outcome
	}{
		{"our write id: a lost response that landed", kindPut, obj("17", "w1", false), true, overwrite, outcomeOurs},
		{"our tombstone: a delete that landed", kindDelete, obj("17", "w1", true), true, overwrite, outcomeOurs},
		{"stamped by a newer epoch: fenced", kindPut, obj("18", "x", false), true, overwrite, outcomeFenced},
		{"newer tombstone on a delete: fenced", kindDelete, obj("18", "x", true), true, overwrite, outcomeFenced},
		{"changed by our epoch's peer: check (stale unless fenced)", kindPut, obj("17", "x", false), true, overwrite, outcomeCheck},
		{"changed by an older epoch: check", kindPut, obj("16", "x", false), true, overwrite, outcomeCheck},
		{"unstamped foreign write: check", kindPut, objstore.ObjectInfo{ETag: "x", Size: 3}, true, overwrite, outcomeCheck},
		{"create found a tombstone: create over it", kindPut, obj("16", "x", true), true, Version{}, outcomeRetryOverTombstone},
		{"create over a tombstone found another tombstone", kindPut, obj("16", "x", true), true, Version{ETag: "t0", Tombstone: true}, outcomeRetryOverTombstone},
		{"overwrite found a tombstone: the file was deleted", kindPut, obj("17", "x", true), true, overwrite, outcomeCheck},
		{"create over a tombstone that was collected: plain create", kindPut, objstore.ObjectInfo{}, false, Version{ETag: "t0", Tombstone: true}, outcomeRetryCreate},
		{"a sweep of our epoch or an older one rewrote our base: retry on it", kindPut, swept("17", "base"), true, overwrite, outcomeRetryOverSweep},
		{"a sweep rewrote another version: check", kindPut, swept("16", "other"), true, overwrite, outcomeCheck},
		{"a newer epoch's sweep rewrote our base: fenced", kindPut, swept("18", "base"), true, overwrite, outcomeFenced},
		{"a newer epoch's sweep rewrote what our lost attempt stored: ours", kindPut, sweptOurs("18", "w1"), true, overwrite, outcomeOurs},
		{"a newer epoch's sweep rewrote another write: fenced", kindPut, sweptOurs("18", "w9"), true, overwrite, outcomeFenced},
		{"overwrite found the key absent", kindPut, objstore.ObjectInfo{}, false, overwrite, outcomeCheck},
		{"delete found the key absent: gone", kindDelete, objstore.ObjectInfo{}, false, overwrite, outcomeGone},
		{"delete found someone's tombstone: gone", kindDelete, obj("17", "x", true), true, overwrite, outcomeGone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := resolve(tc.kind, tc.cur, tc.exists, 17, "w1", tc.base); got != tc.want {
				t.Errorf("resolve = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRecordRoundTripsAndExpires(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	r := record(nil).add("aaa", t0).add("", t0.Add(time.Minute)).add("bbb-1", t0.Add(2*time.Minute))
	s := r.String()
	if s != "aaa@1700000000,_@1700000060,bbb-1@1700000120" {
		t.Fatalf("String = %q", s)
	}
	back := parseRecord(s)
	if back.String() != s {
		t.Fatalf("round trip = %q, want %q", back.String(), s)
	}
	if !back.has("") || !back.has("aaa") || !back.has(`"bbb-1"`) || back.has("ccc") {
		t.Errorf("has() wrong on %q", s)
	}
	young := back.young(t0.Add(15*time.Minute+30*time.Second), 15*time.Minute)
	if young.String() != "_@1700000060,bbb-1@1700000120" {
		t.Errorf("young = %q: the entry older than the validity must go, the others stay", young.String())
	}
	if again := back.add("aaa", t0.Add(10*time.Minute)); len(again) != 3 || again.expiryOf("aaa", time.Minute) != t0.Add(11*time.Minute) {
		t.Errorf("re-adding an entry must refresh its time, not duplicate it: %q", again.String())
	}
	if g := parseRecord("garbage,@1,x@notanumber,ok@5"); g.String() != "ok@5" {
		t.Errorf("malformed entries must be skipped: %q", g.String())
	}
}

func TestRecordIsCappedToFitMetadata(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var r record
	for i := 0; i < 40; i++ {
		r = r.add(strings.Repeat("f", 32)+"-"+string(rune('a'+i%26))+string(rune('a'+i/26)), t0.Add(time.Duration(i)*time.Second))
	}
	// What a sweep stores in the metadata when it spills (spill.go): the
	// newest entries and the marker.
	y := append(r.young(t0, time.Hour)[40-(maxRecordEntries-1):], recordEntry{ETag: spillMarker, At: t0.Add(time.Hour)})
	meta := map[string]string{MetaSwept: y.String(), MetaEpoch: "18446744073709551615", MetaHolder: strings.Repeat("h", 60), MetaWID: newWID()}
	if err := objstore.ValidateMeta(meta); err != nil {
		t.Errorf("a full record must fit in S3 metadata with the stamps: %v", err)
	}
}

func TestChooseShapeAvoidsRecordedETags(t *testing.T) {
	z := objstore.Sizing{}.Normalize()
	small := []byte("hello, fencing")
	body := bytesReader(small)
	size := int64(len(small))
	plain, _ := objstore.ETagOf(body, size, nil)
	one, _ := objstore.ETagOf(body, size, []int64{size})
	big := int64(12 << 20)

	tests := []struct {
		name        string
		size        int64
		first       objstore.Shape
		avoid       []string
		predict     etagFunc
		wantCount   int // -1: none found
		needContent bool
	}{
		{"nothing recorded: the usual shape", size, objstore.ShapeAuto, nil, etagFromContent(z, body, size), 0, false},
		{"plain recorded: one-part multipart", size, objstore.ShapeAuto, []string{plain}, etagFromContent(z, body, size), 1, false},
		{"an unrelated plain ETag recorded: plain stays", size, objstore.ShapeAuto, []string{"0123456789abcdef0123456789abcdef"}, etagFromContent(z, body, size), 0, false},
		{"both shapes of a small object recorded: none", size, objstore.ShapeAuto, []string{plain, one}, etagFromContent(z, body, size), -1, false},
		{"sweep of a plain object knowing only its ETag: one part", size, objstore.ShapeMultipart, []string{plain}, etagFromPlain(plain), 1, false},
		{"sweep of a one-part object with no plain base: plain, no hashing", size, objstore.ShapeMultipart, []string{one}, etagFromPlain(""), 0, false},
		{"sweep of a one-part object with a plain base: needs the content", size, objstore.ShapeMultipart, []string{one, "0123456789abcdef0123456789abcdef"}, etagFromPlain(""), -1, true},
		{"with the content the plain shape is proved fresh", size, objstore.ShapeMultipart, []string{one, "0123456789abcdef0123456789abcdef"}, etagFromContent(z, body, size), 0, false},
		{"big object with plain and -1 recorded: two parts, no hashing", big, objstore.ShapeMultipart, []string{"0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef-1"}, etagFromPlain(""), 2, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := avoidSet{}
			a.addAll(tc.avoid...)
			c, ok, need, err := chooseShape(shapeCandidates(z, tc.size, tc.first), a, tc.predict)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantCount < 0 {
				if ok {
					t.Fatalf("found %+v, want none", c)
				}
			} else if !ok || c.Count != tc.wantCount {
				t.Fatalf("got %+v ok=%v, want a shape with %d parts", c, ok, tc.wantCount)
			}
			if need != tc.needContent {
				t.Errorf("needContent = %v, want %v", need, tc.needContent)
			}
			if ok && tc.size == size {
				l, _ := z.Layout(size, c.Shape, c.Parts)
				e, _ := objstore.ETagOf(body, size, l)
				if a[e] {
					t.Errorf("chosen shape gives ETag %s, which is recorded", e)
				}
			}
		})
	}
}

func TestTombstonesHaveFixedSizeAndDistinctETags(t *testing.T) {
	a, b := tombstoneBody(17, newWID()), tombstoneBody(17, newWID())
	if len(a) != TombstoneSize || len(b) != TombstoneSize {
		t.Fatalf("sizes %d %d, want %d", len(a), len(b), TombstoneSize)
	}
	if string(a) == string(b) {
		t.Error("two tombstones with different write ids must differ")
	}
	if !strings.Contains(string(a), epochName(17)) {
		t.Error("a tombstone must name its epoch")
	}
	info := objstore.ObjectInfo{Size: TombstoneSize, Meta: map[string]string{MetaTombstone: "1"}}
	if !IsTombstone(info) {
		t.Error("IsTombstone must accept a tombstone")
	}
	info.Size++
	if IsTombstone(info) {
		t.Error("IsTombstone must reject any other size")
	}
	if IsTombstone(objstore.ObjectInfo{Size: TombstoneSize}) {
		t.Error("IsTombstone must require the marker")
	}
}

func TestParseFailpoints(t *testing.T) {
	tests := []struct {
		name    string
		spec    string
		wantErr string
		check   func(t *testing.T, h Hooks)
	}{
		{"empty gives no hooks", "", "", func(t *testing.T, h Hooks) {
			if h.AfterIntent != nil || h.AfterValidate != nil || h.BeforeSweepKey != nil {
				t.Error("hooks set")
			}
		}},
		{"pause file and sleep", "after-validate=pause-file:/nonexistent/x; after-intent=sleep:1ms", "", func(t *testing.T, h Hooks) {
			if h.AfterIntent == nil || h.AfterValidate == nil {
				t.Fatal("hooks missing")
			}
			h.AfterValidate(t.Context(), "k") // the file does not exist: returns at once
			h.AfterIntent(t.Context(), "k")
		}},
		{"sweep failure with a key filter", "before-sweep-key@dir/b=fail:crash", "", func(t *testing.T, h Hooks) {
			if err := h.BeforeSweepKey(t.Context(), "dir/a"); err != nil {
				t.Errorf("filtered-out key failed: %v", err)
			}
			if err := h.BeforeSweepKey(t.Context(), "dir/b"); err == nil || !strings.Contains(err.Error(), "crash") {
				t.Errorf("matching key: err = %v", err)
			}
		}},
		{"unknown point", "before-commit=sleep:1s", "unknown point", nil},
		{"unknown action", "after-intent=explode", "unknown action", nil},
		{"bad duration", "after-intent=sleep:soon", "invalid duration", nil},
		{"fail only where it can abort", "after-intent=fail:x", "before-sweep-key only", nil},
		{"missing action", "after-intent", "want point=action", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ParseFailpoints(tc.spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, h)
		})
	}
}

// TestShapeCandidatesPutPlainLastAboveAPlainLimit: on a store whose plain
// PUTs may stall a key above a limit (MinIO holds the key's lock while the
// body arrives), a writer and a sweep try every multipart shape before the
// plain one for a larger object; below the limit plain stays the writer's
// first choice. So a sweep of a one-part object of up to 5 MiB whose ETag an
// older writer holds still finds a fresh shape (plain) instead of waiting
// for the ABA record to expire.
func TestShapeCandidatesPutPlainLastAboveAPlainLimit(t *testing.T) {
	z := objstore.Sizing{PlainLimit: 56 << 10}.Normalize()
	for _, tc := range []struct {
		name  string
		size  int64
		first objstore.Shape
		want  []int // part counts in order; 0 = plain
	}{
		{"writer at the limit: plain first", 56 << 10, objstore.ShapeAuto, []int{0, 1}},
		{"writer above the limit: one part, plain last", 56<<10 + 1, objstore.ShapeAuto, []int{1, 0}},
		{"writer of 12 MiB: two parts, then one, three, plain last", 12 << 20, objstore.ShapeAuto, []int{2, 1, 3, 0}},
		{"sweep at the limit: plain last", 56 << 10, objstore.ShapeMultipart, []int{1, 0}},
		{"sweep above the limit: plain last", 1 << 20, objstore.ShapeMultipart, []int{1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []int
			for _, c := range shapeCandidates(z, tc.size, tc.first) {
				got = append(got, c.Count)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("candidates' part counts %v, want %v", got, tc.want)
			}
		})
	}
	// The sweep of a 1 MiB one-part object whose ETag is held: plain.
	body := bytesReader(bytes.Repeat([]byte("s"), 1<<20))
	one, _ := objstore.ETagOf(body, 1<<20, []int64{1 << 20})
	a := avoidSet{}
	a.addAll(one)
	c, ok, _, err := chooseShape(shapeCandidates(z, 1<<20, objstore.ShapeMultipart), a, etagFromContent(z, body, 1<<20))
	if err != nil || !ok || c.Count != 0 {
		t.Fatalf("sweep of a held one-part object chose %+v ok=%v err=%v, want the plain shape", c, ok, err)
	}
}
