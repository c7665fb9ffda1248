package history

// The model porcupine checks each file's history against.
//
// The state of a file is its value (absent, or the bytes a plain S3 client
// reads) and the fence: the newest epoch bound in the domain, who bound it
// (the mount instance, or the CLI) and where that holder's unbroken run of
// bindings began. A run of bindings is a holder's consecutive bindings with
// no other holder's epoch bound in between: a leader that re-binds its own
// next token keeps what it holds (issue 39). A change made under token t by
// holder h can take effect only while h holds the fence and t belongs to
// its current run: once another holder's epoch was bound, nothing made
// before can land, even after h binds again.

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// state is one file's state in the model.
type state struct {
	Exists    bool
	Value     string
	Epoch     uint64 // the newest epoch bound
	Holder    string // who bound it
	LineStart uint64 // the first token of Holder's current run
}

// binding is one (holder, token) a change may have been made under.
type binding struct {
	Holder string
	Token  uint64
}

// input is what porcupine sees of an operation.
type input struct {
	Op   *Op
	Kind Kind
	// Mutations: the bindings the change may have been made under, and
	// the value it stores (a write), appends (an append) or nothing (a
	// delete).
	Under []binding
	Value string
}

// output is an operation's result as the model needs it.
type output struct {
	Outcome Outcome
	Found   bool
	Data    string
}

func (s state) admits(under []binding) bool {
	for _, b := range under {
		if b.Holder == s.Holder && s.LineStart <= b.Token && b.Token <= s.Epoch {
			return true
		}
	}
	return false
}

func (s state) apply(in input) state {
	switch in.Kind {
	case KWrite:
		s.Exists, s.Value = true, in.Value
	case KAppend:
		if !s.Exists {
			s.Value = ""
		}
		s.Exists, s.Value = true, s.Value+in.Value
	case KDelete:
		s.Exists, s.Value = false, ""
	case KBind:
		b := in.Under[0]
		if b.Holder != s.Holder {
			s.LineStart = b.Token
		}
		s.Holder, s.Epoch = b.Holder, b.Token
	}
	return s
}

func step(st interface{}, in, out interface{}) []interface{} {
	s, i, o := st.(state), in.(input), out.(output)
	switch i.Kind {
	case KRead, KS3Read:
		if s.Exists == o.Found && (!o.Found || s.Value == o.Data) {
			return []interface{}{s}
		}
		return nil
	case KBind:
		b := i.Under[0]
		if b.Token <= s.Epoch { // a bind never lowers the register
			if o.Outcome == OK {
				return nil
			}
			return []interface{}{s}
		}
		if o.Outcome == OK {
			return []interface{}{s.apply(i)}
		}
		return []interface{}{s, s.apply(i)}
	}
	switch o.Outcome {
	case OK:
		if s.admits(i.Under) {
			return []interface{}{s.apply(i)}
		}
		return nil
	case Unknown:
		if s.admits(i.Under) {
			return []interface{}{s, s.apply(i)}
		}
	}
	return []interface{}{s}
}

// Model is the porcupine model of one file (histories are partitioned by
// file before they reach it).
var Model = porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{state{}} },
	Step: step,
	Equal: func(a, b interface{}) bool {
		return a.(state) == b.(state)
	},
	Hash: func(st interface{}) uint64 {
		s := st.(state)
		h := fnv.New64a()
		fmt.Fprintf(h, "%t|%d|%s|%d|", s.Exists, s.Epoch, s.Holder, s.LineStart)
		h.Write([]byte(s.Value))
		return h.Sum64()
	},
	DescribeOperation: func(in, out interface{}) string {
		return describe(in.(input).Op)
	},
	DescribeState: func(st interface{}) string {
		s := st.(state)
		v := "absent"
		if s.Exists {
			v = fmt.Sprintf("%q", short(s.Value, 120))
		}
		return fmt.Sprintf("%s; epoch %d held by %s (its run since %d)", v, s.Epoch, s.Holder, s.LineStart)
	},
}

// describe is one line naming an operation for people.
func describe(op *Op) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d ", op.ID)
	if op.Mount >= 0 {
		fmt.Fprintf(&b, "m%d(%s,t%d) ", op.Mount, op.Holder, op.Token)
	}
	b.WriteString(string(op.Kind))
	if op.Flavor != "" && op.Flavor != "plain" {
		fmt.Fprintf(&b, "/%s", op.Flavor)
	}
	if op.File != "" {
		fmt.Fprintf(&b, " %s", op.File)
	}
	switch op.Kind {
	case KWrite, KAppend:
		fmt.Fprintf(&b, " %q", short(op.Value, 60))
	case KBind:
		fmt.Fprintf(&b, " %d by %s", op.Token, op.Holder)
	case KRead, KS3Read:
		if op.Found {
			fmt.Fprintf(&b, " → %q", short(op.Data, 60))
		} else {
			b.WriteString(" → absent")
		}
		if op.Epoch != "" {
			fmt.Fprintf(&b, " (epoch %s)", op.Epoch)
		}
	}
	if op.Outcome != "" {
		fmt.Fprintf(&b, " → %s", op.Outcome)
		if op.Errno != "" {
			fmt.Fprintf(&b, " %s", op.Errno)
		}
	}
	return b.String()
}

func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n/2] + "…" + s[len(s)-n/2:]
}
