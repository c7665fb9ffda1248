package fencing

// Bindings: which binding a change held by the caller was made under, so
// that the Guard stores it only under that binding or one that followed it
// directly (docs/DESIGN.md, "What the mount holds, and under which
// binding").

import (
	"context"
	"errors"
	"fmt"
)

// ErrSuperseded marks a refusal of a change made under a binding that
// another holder's epoch has since superseded, although this Guard leads
// again now (it wraps ErrFenced too: EROFS). The change must be dropped,
// never stored under the new binding.
var ErrSuperseded = errors.New("made under a binding another holder's epoch superseded")

// Binding identifies the binding a change was made under: the token and the
// line of bindings it belongs to (Guard.Binding). The zero Binding is none.
type Binding struct {
	Token uint64
	line  uint64
}

// Same reports whether b and o belong to one line of bindings: a change
// made under one may be stored under the other.
func (b Binding) Same(o Binding) bool { return b.line == o.line }

// IsZero reports whether b is no binding.
func (b Binding) IsZero() bool { return b.line == 0 }

type bindingKey struct{}

// Under returns ctx carrying b: every mutation of the Guard made with it
// is refused, with an error wrapping ErrFenced and ErrSuperseded, unless
// the Guard is bound to b's line then (b itself, or a binding that
// followed it directly: a leader re-binding its own next token with nobody
// in between). A mutation waiting out a bind is decided after it. The zero
// Binding leaves ctx as it is (no condition).
func Under(ctx context.Context, b Binding) context.Context {
	if b.IsZero() {
		return ctx
	}
	return context.WithValue(ctx, bindingKey{}, b)
}

// BindingOf returns the Binding ctx carries (Under); the zero Binding if none.
func BindingOf(ctx context.Context) Binding {
	b, _ := bindingOf(ctx)
	return b
}

func bindingOf(ctx context.Context) (Binding, bool) {
	b, ok := ctx.Value(bindingKey{}).(Binding)
	return b, ok
}

// supersededErr is the refusal of a change made under b, now that the
// Guard holds token on another line.
func supersededErr(op, key string, b Binding, token uint64) error {
	reason := fmt.Sprintf("a change made under token %d: another holder's epoch was active since (this mount now holds token %d); the change is dropped", b.Token, token)
	return &fenceError{sentinel: ErrFenced, cause: ErrSuperseded,
		msg: fmt.Sprintf("fenced: %s (%s %s)", reason, op, key), reason: reason}
}
