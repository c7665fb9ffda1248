package history

import (
	"fmt"
	"strings"
	"testing"
)

// h builds a history of ops in which each op's times are given in ms.
type hb struct {
	h  History
	id int
}

func newHB() *hb { return &hb{h: History{Server: "test", Files: []string{"f"}, Mounts: 2}} }

func (b *hb) add(op Op) *Op {
	b.id++
	op.ID = b.id
	op.Invoke *= 1e6
	op.Written *= 1e6
	op.Decided *= 1e6
	op.Complete *= 1e6
	if op.Kind != KS3Read && op.Kind != KBind && op.Mount == 0 && op.Holder == "" {
		op.Holder = "m0"
	}
	b.h.Ops = append(b.h.Ops, op)
	return &b.h.Ops[len(b.h.Ops)-1]
}

func (b *hb) bind(mount int, holder string, token uint64, at int64) {
	b.add(Op{Kind: KBind, Process: -1, Mount: mount, Holder: holder, Token: token, Invoke: at, Complete: at + 1, Outcome: OK})
}

// write adds a write of value (with %[1]d for the operation's id) and
// returns the value.
func (b *hb) write(mount int, holder, value string, invoke, written, decided int64, out Outcome, errno string) string {
	value = fmt.Sprintf(value, b.id+1)
	b.add(Op{Kind: KWrite, Process: mount, Mount: mount, Holder: holder, File: "f", Value: value, Intended: value,
		Invoke: invoke, Written: written, Decided: decided, Complete: max(decided, written) + 1, Outcome: out, Errno: errno})
	return value
}

func (b *hb) s3read(found bool, data string, invoke, complete int64) {
	b.add(Op{Kind: KS3Read, Process: 50, Mount: -1, File: "f", Found: found, Data: data, Invoke: invoke, Complete: complete})
}

func kinds(r *Report) string {
	var k []string
	for _, a := range r.Anomalies {
		k = append(k, a.Kind)
	}
	return strings.Join(k, ",")
}

func TestACleanHistoryHasNoAnomalies(t *testing.T) {
	b := newHB()
	b.bind(0, "m0", 1, 0)
	v1 := b.write(0, "m0", "f#%d.1/1\n", 10, 11, 20, OK, "")
	b.s3read(true, v1, 21, 22)
	b.add(Op{Kind: KRead, Process: 1, Mount: 0, Holder: "m0", File: "f", Found: true, Data: v1, Invoke: 23, Complete: 24})
	b.bind(1, "m1", 2, 30)
	b.write(0, "m0", "f#%d.1/1\n", 40, 41, 0, Failed, "EROFS")
	v2 := b.write(1, "m1", "f#%d.1/1\n", 40, 41, 50, OK, "")
	a := fmt.Sprintf("f#%d.a\n", b.id+1)
	b.add(Op{Kind: KAppend, Process: 1, Mount: 1, Holder: "m1", File: "f", Value: a, Invoke: 51, Written: 52, Decided: 53, Complete: 53, Outcome: OK})
	b.s3read(true, v2+a, 60, 61)
	// A leader re-binding its own next token keeps what it holds.
	v3 := b.write(1, "m1", "f#%d.1/1\n", 70, 71, 90, OK, "")
	b.bind(1, "m1", 3, 80)
	b.s3read(true, v3, 91, 92)
	r := Check(&b.h, 0)
	if len(r.Anomalies) > 0 {
		t.Fatalf("anomalies in a clean history: %+v", r.Anomalies)
	}
}

// Issue 39 §1: a reader sees the object empty while a rewrite is open.
func TestAnEmptyObjectNoCloseProducedIsFound(t *testing.T) {
	b := newHB()
	b.bind(0, "m0", 1, 0)
	b.write(0, "m0", "f#%d.1/1\n", 10, 11, 20, OK, "")
	v := b.write(0, "m0", "f#%[1]d.1/2\nf#%[1]d.2/2\n", 21, 40, 41, OK, "")
	b.s3read(true, "", 25, 26)
	r := Check(&b.h, 0)
	if k := kinds(r); !strings.Contains(k, "phantom") || !strings.Contains(k, "not-linearizable") {
		t.Fatalf("anomalies %q, want a phantom and a non-linearizable file", k)
	}
	b.h.Ops[len(b.h.Ops)-1].Data = v[:strings.IndexByte(v, '\n')+1]
	if k := kinds(Check(&b.h, 0)); !strings.Contains(k, "phantom") {
		t.Fatalf("a half-written file: anomalies %q, want a phantom", k)
	}
}

// Issue 39 §2: a write refused with EROFS lands after a failback.
func TestARefusedWriteLandingAfterAFailbackIsFound(t *testing.T) {
	b := newHB()
	b.bind(0, "m0", 1, 0)
	b.write(0, "m0", "f#%d.1/1\n", 10, 11, 20, OK, "")
	refused := fmt.Sprintf("f#%d.1/1\n", b.id+1)
	b.add(Op{Kind: KWrite, Flavor: "dup", Process: 0, Mount: 0, Holder: "m0", File: "f", Value: refused,
		Invoke: 30, Written: 31, Complete: 100, Outcome: Failed, Errno: "EROFS"})
	b.bind(1, "m1", 2, 40)
	b.write(1, "m1", "f#%d.1/1\n", 50, 51, 60, OK, "")
	b.bind(0, "m0", 3, 70)
	b.s3read(true, refused, 101, 102)
	r := Check(&b.h, 0)
	if k := kinds(r); !strings.Contains(k, "refused-landed") || !strings.Contains(k, "not-linearizable") {
		t.Fatalf("anomalies %q, want refused-landed and not-linearizable", k)
	}
	// The same landing, had the application been told success, is still
	// a write made before m1's epoch landing after it.
	b.h.Ops[2].Outcome, b.h.Ops[2].Errno, b.h.Ops[2].Decided = OK, "", 99e6
	if k := kinds(Check(&b.h, 0)); k != "not-linearizable" {
		t.Fatalf("anomalies %q, want not-linearizable", k)
	}
}

// A write whose outcome is unknown may land later, but only while its
// holder's run of bindings lasts.
func TestAnUnknownOutcomeLandsOnlyWithinItsBinding(t *testing.T) {
	b := newHB()
	b.bind(0, "m0", 1, 0)
	v := b.write(0, "m0", "f#%d.1/1\n", 10, 11, 0, Unknown, "EIO")
	b.s3read(false, "", 20, 21)
	b.s3read(true, v, 30, 31)
	if r := Check(&b.h, 0); len(r.Anomalies) > 0 {
		t.Fatalf("an unknown outcome landing later: %+v", r.Anomalies)
	}
	b.h.Ops = b.h.Ops[:2]
	b.bind(1, "m1", 2, 15)
	b.s3read(false, "", 20, 21)
	b.s3read(true, v, 30, 31)
	if k := kinds(Check(&b.h, 0)); k != "not-linearizable" {
		t.Fatalf("anomalies %q, want not-linearizable", k)
	}
}

func TestEpochsGoingBackAreFound(t *testing.T) {
	b := newHB()
	b.add(Op{Kind: KS3Read, Process: 50, Mount: -1, File: "f", Epoch: "5", Invoke: 1, Complete: 2})
	b.add(Op{Kind: KS3Read, Process: 50, Mount: -1, File: "f", Epoch: "4", Invoke: 3, Complete: 4})
	r := &Report{}
	prepare(&b.h).invariants(r)
	if k := kinds(r); k != "epoch-back" {
		t.Fatalf("anomalies %q, want epoch-back", k)
	}
}

func TestDecideReadsTheFirstStoreCall(t *testing.T) {
	for _, c := range []struct {
		flavor string
		steps  []Step
		want   Outcome
	}{
		{"plain", []Step{{Call: "open"}, {Call: "write"}, {Call: "close", T: 5}}, OK},
		{"dup", []Step{{Call: "open"}, {Call: "write"}, {Call: "dup"}, {Call: "close", Errno: "EROFS"}, {Call: "close-dup"}}, Failed},
		{"dup", []Step{{Call: "open"}, {Call: "write"}, {Call: "dup"}, {Call: "close", Errno: "EIO"}, {Call: "close-dup"}}, OK},
		{"fsync", []Step{{Call: "open"}, {Call: "write"}, {Call: "fsync", Errno: "EIO"}, {Call: "close", Errno: "EROFS"}}, Unknown},
		{"plain", []Step{{Call: "open", Errno: "EROFS"}}, Failed},
		{"plain", []Step{{Call: "open"}, {Call: "write", Errno: "EROFS"}, {Call: "close"}}, Failed},
		// A write(2) that failed EIO stored an unknown part of the value,
		// whatever the close says.
		{"plain", []Step{{Call: "open"}, {Call: "write", Errno: "EIO"}, {Call: "close", T: 5}}, Unknown},
		{"rename", []Step{{Call: "open"}, {Call: "write"}, {Call: "close"}, {Call: "rename", Errno: "EIO"}}, Unknown},
	} {
		if got, _, _ := decide(KWrite, c.flavor, c.steps); got != c.want {
			t.Errorf("%s %v: %s, want %s", c.flavor, c.steps, got, c.want)
		}
	}
}

// A write made on a mount that another holder had fenced before it began,
// acknowledged by its close (the refusal went to a forked child's FLUSH):
// named, and not linearizable.
func TestAFencedWriteAcknowledgedIsNamed(t *testing.T) {
	b := newHB()
	b.bind(0, "m0", 1, 0)
	v1 := b.write(0, "m0", "f#%d.1/1\n", 10, 11, 20, OK, "")
	b.bind(1, "m1", 2, 30)
	b.write(0, "m0", "f#%d.1/1\n", 40, 41, 50, OK, "")
	b.s3read(true, v1, 60, 61)
	r := Check(&b.h, 0)
	if k := kinds(r); !strings.Contains(k, "fenced-acknowledged") || !strings.Contains(k, "not-linearizable") {
		t.Fatalf("anomalies %q, want fenced-acknowledged and not-linearizable: %+v", k, r.Anomalies)
	}
	// A failback before the write: its new binding admits it.
	b = newHB()
	b.bind(0, "m0", 1, 0)
	b.bind(1, "m1", 2, 10)
	b.bind(0, "m0", 3, 20)
	v := b.write(0, "m0", "f#%d.1/1\n", 40, 41, 50, OK, "")
	b.s3read(true, v, 60, 61)
	if r := Check(&b.h, 0); len(r.Anomalies) > 0 {
		t.Fatalf("anomalies after a failback: %+v", r.Anomalies)
	}
}

// An unknown outcome is bounded by the bind that settles it: a write of
// unknown outcome may land before another holder's bind, never after.
func TestAnUnknownWriteSettlesAtTheNextHoldersBind(t *testing.T) {
	for _, late := range []bool{false, true} {
		b := newHB()
		b.bind(0, "m0", 1, 0)
		v := b.write(0, "m0", "f#%d.1/1\n", 10, 11, 0, Unknown, "EIO")
		b.h.Ops[len(b.h.Ops)-1].Complete = 15e6
		b.s3read(false, "", 20, 21)
		b.add(Op{Kind: KBind, Process: -1, Mount: 0, Holder: "m0", Token: 2, Invoke: 22, Complete: 23, Outcome: Unknown, Errno: "EIO"})
		b.bind(1, "m1", 3, 30)
		if late {
			b.s3read(false, "", 35, 36)
		}
		b.s3read(true, v, 40, 41)
		r := Check(&b.h, 0)
		if got := strings.Contains(kinds(r), "not-linearizable"); got != late {
			t.Fatalf("late=%v: anomalies %+v", late, r.Anomalies)
		}
	}
}
