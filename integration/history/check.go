package history

// The checker: porcupine over each file's operations (model.go), and the
// invariants that name an anomaly directly — a read of a value that no
// close or fsync produced, of a write the application was told failed, an
// epoch that goes back, an acknowledged append lost.

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Anomaly is one violation the checker found.
type Anomaly struct {
	Kind string `json:"kind"` // phantom, refused-landed, future, epoch-back, append-lost, append-order, not-linearizable
	File string `json:"file"`
	Ops  []int  `json:"ops"` // the operations involved
	Text string `json:"text"`
}

// Report is what Check found.
type Report struct {
	Ops        int            // operations in the history
	Checked    int            // operations given to porcupine
	Weak       int            // mount reads checked only against the invariants
	Outcomes   map[string]int // "write ok", "write fail EROFS", …
	Churn      int            // churn rounds (issue 39 §1's round, run.go)
	ChurnOK    int            // those whose rewrite was acknowledged
	Peeks      int            // plain S3 reads during a rewrite (churn and peek)
	Anomalies  []Anomaly
	Undecided  []string // files porcupine did not decide in time
	Illegal    []string // files porcupine found not linearizable
	CheckTime  time.Duration
	model      porcupine.Model
	info       porcupine.LinearizationInfo
	partitions [][]porcupine.Operation
	files      []string
}

// prepared is a history with what the checker derives per operation.
type prepared struct {
	h      *History
	byID   map[int]*Op
	binds  []*Op             // sorted by invocation
	under  map[int][]binding // mutation → the bindings it may have been made under
	strict map[int]bool      // mount read → checked as linearizable
	// changes holds each mount instance's changes of each file, by
	// invocation ("holder\x00file").
	changes map[string][]*Op
}

// Check checks h; timeout bounds porcupine's search (0: none).
func Check(h *History, timeout time.Duration) *Report {
	p := prepare(h)
	r := &Report{Ops: len(h.Ops), Outcomes: map[string]int{}}
	for i := range h.Ops {
		op := &h.Ops[i]
		switch op.Kind {
		case KWrite, KAppend, KDelete, KChmod, KBind:
			k := string(op.Kind) + " " + string(op.Outcome)
			if op.Outcome != OK {
				k += " " + op.Errno
			}
			r.Outcomes[strings.TrimSpace(k)]++
		}
		if op.Kind == KS3Read && op.Flavor == "peek" && op.Errno == "" {
			r.Peeks++
		}
		if op.Kind == KWrite && op.Flavor == "churn" && len(op.Intended) > 0 && strings.Contains(op.Intended, ".2/2 ") {
			r.Churn++
			if op.Outcome == OK {
				r.ChurnOK++
			}
		}
	}
	p.invariants(r)
	start := time.Now()
	p.linearizability(r, timeout)
	r.CheckTime = time.Since(start)
	return r
}

func prepare(h *History) *prepared {
	p := &prepared{h: h, byID: map[int]*Op{}, under: map[int][]binding{}, strict: map[int]bool{}, changes: map[string][]*Op{}}
	for i := range h.Ops {
		op := &h.Ops[i]
		p.byID[op.ID] = op
		if op.Kind == KWrite || op.Kind == KAppend || op.Kind == KDelete {
			k := op.Holder + "\x00" + op.File
			p.changes[k] = append(p.changes[k], op)
		}
		if op.Kind == KBind && op.Outcome != Failed {
			p.binds = append(p.binds, op)
		}
	}
	sort.Slice(p.binds, func(i, j int) bool { return p.binds[i].Invoke < p.binds[j].Invoke })
	for _, c := range p.changes {
		sort.Slice(c, func(i, j int) bool { return c[i].Invoke < c[j].Invoke })
	}
	for i := range h.Ops {
		op := &h.Ops[i]
		switch op.Kind {
		case KWrite, KAppend, KDelete, KChmod:
			p.under[op.ID] = p.bindingsOf(op)
			op.Token = p.believed(op)
		case KRead:
			p.strict[op.ID] = p.isStrict(op)
		}
	}
	return p
}

func end(t int64) int64 {
	if t == 0 {
		return math.MaxInt64
	}
	return t
}

// bindingsOf returns the bindings op's change may have been made under:
// its mount's binding when it was invoked, and every binding of the mount
// in flight before its content was made.
func (p *prepared) bindingsOf(op *Op) []binding {
	made := op.Written
	if made == 0 {
		made = end(op.Complete)
	}
	var cur *Op
	var out []binding
	for _, b := range p.binds {
		if b.Mount != op.Mount || b.Invoke > made {
			continue
		}
		if b.Holder == op.Holder && end(b.Complete) < op.Invoke {
			cur = b
		} else if end(b.Complete) >= op.Invoke {
			out = append(out, binding{b.Holder, b.Token})
		}
	}
	if cur != nil {
		out = append(out, binding{cur.Holder, cur.Token})
	}
	return out
}

// believed is the token op's mount held when op was invoked (0: none).
func (p *prepared) believed(op *Op) uint64 {
	var tok uint64
	for _, b := range p.binds {
		if b.Holder == op.Holder && b.Outcome == OK && b.Complete < op.Invoke {
			tok = b.Token
		}
	}
	return tok
}

// isStrict reports whether a read through a mount must return the file's
// state: the mount led (the last bind was its own) or never held a token,
// no bind was in flight during the read, and the mount's last change of
// the file did not end with an unknown outcome (a change kept for a later
// commit shows on the mount before the bucket has it). A mount that was
// fenced and may not know it yet trusts what it cached while it led
// (docs/DESIGN.md §10): its reads are only checked against the
// invariants.
func (p *prepared) isStrict(op *Op) bool {
	var last *Op
	for _, b := range p.binds {
		if b.Invoke <= op.Complete && end(b.Complete) >= op.Invoke {
			return false
		}
		if end(b.Complete) < op.Invoke {
			last = b
		}
	}
	if last != nil && !(last.Holder == op.Holder && last.Outcome == OK) {
		for _, b := range p.binds {
			if b.Holder == op.Holder && b.Invoke <= op.Complete {
				return false
			}
		}
	}
	var prev *Op
	for _, m := range p.changes[op.Holder+"\x00"+op.File] {
		if m.Invoke >= op.Invoke {
			break
		}
		prev = m
	}
	return prev == nil || prev.Outcome != Unknown
}

// lineOp parses the operation id out of one line of a value
// ("<file>#<id>.<piece>/<n>" or "<file>#<id>.a").
func lineOp(line string) (file string, id int, ok bool) {
	i := strings.IndexByte(line, '#')
	j := strings.IndexByte(line, '.')
	if i <= 0 || j < i {
		return "", 0, false
	}
	n, err := strconv.Atoi(line[i+1 : j])
	return line[:i], n, err == nil
}

func splitLines(s string) (lines []string, partial string) {
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			return lines, s
		}
		lines, s = append(lines, s[:i+1]), s[i+1:]
	}
	return lines, ""
}

// readsOf yields every successful read (peeks are reads of their own).
func (p *prepared) reads() []*Op {
	var out []*Op
	for i := range p.h.Ops {
		op := &p.h.Ops[i]
		if (op.Kind == KRead || op.Kind == KS3Read) && op.Outcome != Failed && op.Errno == "" {
			out = append(out, op)
		}
	}
	return out
}

func (p *prepared) invariants(r *Report) {
	add := func(kind, file string, ops []int, format string, args ...any) {
		r.Anomalies = append(r.Anomalies, Anomaly{Kind: kind, File: file, Ops: ops, Text: fmt.Sprintf(format, args...)})
	}
	// Every value read is made of what operations wrote: one write's value
	// (the pieces write(2) accepted) followed by appended lines, from
	// operations invoked before the read returned and not refused.
	emptyOK := map[string]bool{}
	for i := range p.h.Ops {
		op := &p.h.Ops[i]
		if op.Kind == KWrite && op.Value == "" && op.Outcome != Failed {
			emptyOK[op.File] = true
		}
	}
	for _, rd := range p.reads() {
		if !rd.Found {
			continue
		}
		via := "a plain S3 client"
		if rd.Kind == KRead {
			via = fmt.Sprintf("mount %d (%s)", rd.Mount, rd.Holder)
		}
		if rd.Data == "" {
			if !emptyOK[rd.File] {
				add("phantom", rd.File, []int{rd.ID}, "%s read %s empty, a version that no close or fsync produced (#%d)", via, rd.File, rd.ID)
			}
			continue
		}
		lines, partial := splitLines(rd.Data)
		if partial != "" {
			add("phantom", rd.File, []int{rd.ID}, "%s read %s ending in a torn line %q (#%d)", via, rd.File, short(partial, 40), rd.ID)
		}
		for i := 0; i < len(lines); {
			file, id, ok := lineOp(lines[i])
			w := p.byID[id]
			if !ok || w == nil || file != rd.File || w.File != rd.File {
				add("phantom", rd.File, []int{rd.ID}, "%s read %s with a line no operation on it wrote: %q (#%d)", via, rd.File, lines[i], rd.ID)
				break
			}
			n := 1
			if w.Kind == KWrite {
				vl, _ := splitLines(w.Value)
				n = len(vl)
				if i != 0 || len(lines) < n || strings.Join(lines[:n], "") != w.Value {
					add("phantom", rd.File, []int{rd.ID, w.ID}, "%s read %s holding part of write #%d (%q of %q): a version that no close or fsync produced (#%d: %q)",
						via, rd.File, w.ID, short(strings.Join(lines[i:min(i+n, len(lines))], ""), 80), short(w.Value, 80), rd.ID, short(rd.Data, 120))
					break
				}
			} else if w.Kind != KAppend || lines[i] != w.Value {
				add("phantom", rd.File, []int{rd.ID, w.ID}, "%s read %s with %q, not what #%d wrote (#%d)", via, rd.File, lines[i], w.ID, rd.ID)
				break
			}
			if w.Outcome == Failed {
				add("refused-landed", rd.File, []int{w.ID, rd.ID}, "%s refused with %s (the application was told it failed) is in %s as %s read it (#%d)",
					describe(w), w.Errno, rd.File, via, rd.ID)
			}
			if w.Invoke > rd.Complete {
				add("future", rd.File, []int{w.ID, rd.ID}, "%s read %s holding %s, invoked after the read returned (#%d)", via, rd.File, describe(w), rd.ID)
			}
			i += n
		}
	}
	// No mutation made under a binding that another holder's bind had
	// superseded before it was invoked is acknowledged: it cannot have
	// landed, and the application was told it did (porcupine finds it
	// too, as a file that cannot be ordered; this names it).
	for i := range p.h.Ops {
		op := &p.h.Ops[i]
		if op.Outcome != OK || (op.Kind != KWrite && op.Kind != KAppend && op.Kind != KDelete) {
			continue
		}
		under := p.under[op.ID]
		var by *Op
		for _, b := range under {
			by = p.supersededBefore(b, op.Invoke)
			if by == nil {
				break
			}
		}
		if by != nil && len(under) > 0 {
			add("fenced-acknowledged", op.File, []int{op.ID, by.ID}, "%s was acknowledged (%s returned 0), yet it was made under token %d of %s, which bind #%d (%d by %s) had superseded before it was invoked: it cannot have landed",
				describe(op), decidingCall(op), under[0].Token, under[0].Holder, by.ID, by.Token, by.Holder)
		}
	}
	// Epochs never go back within a file (what S3 reads show).
	byFile := map[string][]*Op{}
	for _, rd := range p.reads() {
		if rd.Kind == KS3Read && rd.Epoch != "" {
			byFile[rd.File] = append(byFile[rd.File], rd)
		}
	}
	for file, rs := range byFile {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Complete < rs[j].Complete })
		byInvoke := append([]*Op(nil), rs...)
		sort.Slice(byInvoke, func(i, j int) bool { return byInvoke[i].Invoke < byInvoke[j].Invoke })
		var max uint64
		var maxOp *Op
		k := 0
		for _, rd := range byInvoke {
			for ; k < len(rs) && rs[k].Complete < rd.Invoke; k++ {
				if e, _ := strconv.ParseUint(rs[k].Epoch, 10, 64); e > max {
					max, maxOp = e, rs[k]
				}
			}
			if e, _ := strconv.ParseUint(rd.Epoch, 10, 64); e < max {
				add("epoch-back", file, []int{maxOp.ID, rd.ID}, "%s went back from epoch %d (#%d) to %d (#%d)", file, max, maxOp.ID, e, rd.ID)
			}
		}
	}
	// The logs: every acknowledged append is in the final content, in
	// epoch order.
	for _, log := range p.h.Logs {
		var final *Op
		for i := range p.h.Ops {
			op := &p.h.Ops[i]
			if op.Process == -2 && op.Kind == KS3Read && op.File == log && op.Errno == "" {
				final = op
			}
		}
		if final == nil {
			continue
		}
		lines, _ := splitLines(final.Data)
		present := map[string]bool{}
		for _, l := range lines {
			present[l] = true
		}
		for i := range p.h.Ops {
			op := &p.h.Ops[i]
			if op.Kind == KAppend && op.File == log && op.Outcome == OK && !present[op.Value] {
				add("append-lost", log, []int{op.ID}, "acknowledged %s is not in %s at the end", describe(op), log)
			}
		}
		var maxTok uint64
		var maxID int
		for _, l := range lines {
			_, id, _ := lineOp(l)
			op := p.byID[id]
			if op == nil {
				continue
			}
			u := p.under[op.ID]
			if len(u) != 1 {
				continue
			}
			if u[0].Token < maxTok {
				add("append-order", log, []int{maxID, op.ID}, "%s: #%d of epoch %d landed after #%d of epoch %d", log, op.ID, u[0].Token, maxID, maxTok)
			}
			if u[0].Token > maxTok {
				maxTok, maxID = u[0].Token, op.ID
			}
		}
	}
}

// settledBy bounds when an operation of unknown outcome invoked at t can
// still take effect: until the first successful bind after t that settles
// it (math.MaxInt64/2: never settled). Placing it later in the model
// would change nothing: a bind never lowers the epoch (a bind of an older
// token after a newer one is a no-op), and a change made under bindings
// that another holder's bind has superseded is never admitted again.
// Bounding these is what keeps porcupine's search from exploding when
// many binds end unknown.
func (p *prepared) settledBy(t int64, settles func(*Op) bool) int64 {
	for _, x := range p.binds {
		if x.Outcome == OK && x.Invoke > t && settles(x) {
			return x.Complete
		}
	}
	return math.MaxInt64 / 2
}

// admitsAny reports whether, right after bind x, a change made under one
// of under could still be admitted: x continues the run of its holder, so
// only a change of x's own holder with a token not above x's can.
func admitsAny(x *Op, under []binding) bool {
	for _, b := range under {
		if b.Holder == x.Holder && b.Token <= x.Token {
			return true
		}
	}
	return false
}

// supersededBefore returns a bind by another holder of a newer token that
// completed before t (nil: none): b's holder was fenced by then.
func (p *prepared) supersededBefore(b binding, t int64) *Op {
	for _, x := range p.binds {
		if x.Outcome == OK && x.Holder != b.Holder && x.Token > b.Token && x.Complete < t {
			return x
		}
	}
	return nil
}

// decidingCall names the call that decided op's outcome.
func decidingCall(op *Op) string {
	for _, s := range op.Steps {
		if s.T == op.Decided && s.Errno == "" {
			return s.Call
		}
	}
	return "the call"
}

// linearizability runs porcupine over each file's operations.
func (p *prepared) linearizability(r *Report, timeout time.Duration) {
	files := append(append([]string(nil), p.h.Files...), p.h.Logs...)
	index := map[string]int{}
	for i, f := range files {
		index[f] = i
	}
	parts := make([][]porcupine.Operation, len(files))
	addTo := func(i int, op *Op, in input, out output, ret int64) {
		parts[i] = append(parts[i], porcupine.Operation{ClientId: clientID(op), Input: in, Output: out,
			Call: op.Invoke, Return: ret, Metadata: op.ID})
	}
	for _, b := range p.binds {
		ret := b.Complete
		if b.Outcome != OK {
			ret = p.settledBy(b.Invoke, func(x *Op) bool { return x.Token > b.Token })
		}
		for i := range files {
			addTo(i, b, input{Op: b, Kind: KBind, Under: []binding{{b.Holder, b.Token}}}, output{Outcome: b.Outcome}, ret)
		}
	}
	for k := range p.h.Ops {
		op := &p.h.Ops[k]
		i, ok := index[op.File]
		if !ok {
			continue
		}
		switch op.Kind {
		case KWrite, KAppend, KDelete:
			if op.Outcome == Failed {
				continue // never took effect: a read of its value fails the invariants
			}
			ret := op.Decided
			if op.Outcome == Unknown {
				ret = p.settledBy(op.Invoke, func(x *Op) bool { return !admitsAny(x, p.under[op.ID]) })
			}
			addTo(i, op, input{Op: op, Kind: op.Kind, Under: p.under[op.ID], Value: op.Value}, output{Outcome: op.Outcome}, ret)
			r.Checked++
		case KRead, KS3Read:
			if op.Errno != "" {
				continue
			}
			if op.Kind == KRead && !p.strict[op.ID] {
				r.Weak++
				continue
			}
			addTo(i, op, input{Op: op, Kind: op.Kind}, output{Found: op.Found, Data: op.Data}, op.Complete)
			r.Checked++
		}
	}
	var all []porcupine.Operation
	for _, part := range parts {
		all = append(all, part...)
	}
	model := Model.ToModel()
	model.Partition = func(history []porcupine.Operation) [][]porcupine.Operation {
		out := make([][]porcupine.Operation, len(parts))
		for _, op := range history {
			in := op.Input.(input)
			if in.Kind == KBind {
				continue
			}
			i := index[in.Op.File]
			out[i] = append(out[i], op)
		}
		for i := range out { // each file's partition holds every bind
			for _, op := range history {
				if op.Input.(input).Kind == KBind {
					out[i] = append(out[i], op)
				}
			}
		}
		return out
	}
	// Binds appear once per file above; give porcupine each bind once.
	var uniq []porcupine.Operation
	seen := map[int]bool{}
	for _, op := range all {
		id := op.Metadata.(int)
		if seen[id] {
			continue
		}
		seen[id] = true
		uniq = append(uniq, op)
	}
	model.DescribeOperationMetadata = func(info interface{}) string { return fmt.Sprintf("#%d", info.(int)) }
	res, info := porcupine.CheckOperationsVerbose(model, uniq, timeout)
	r.model, r.info, r.partitions, r.files = model, info, model.Partition(uniq), files
	if res == porcupine.Ok {
		return
	}
	// Which files? Check each partition alone for the verdict and the
	// operations that cannot be ordered.
	single := model
	single.Partition = nil
	for i, part := range r.partitions {
		pres, pinfo := porcupine.CheckOperationsVerbose(single, part, timeout)
		switch pres {
		case porcupine.Unknown:
			r.Undecided = append(r.Undecided, files[i])
		case porcupine.Illegal:
			r.Illegal = append(r.Illegal, files[i])
			r.Anomalies = append(r.Anomalies, Anomaly{Kind: "not-linearizable", File: files[i], Ops: unordered(part, pinfo),
				Text: fmt.Sprintf("%s: no order of its operations fits the model; cannot be ordered: %s", files[i], p.names(unordered(part, pinfo)))})
		}
	}
}

// unordered names the operations porcupine could not add to the longest
// order it found: the first few by return time.
func unordered(part []porcupine.Operation, info porcupine.LinearizationInfo) []int {
	lins := info.PartialLinearizations()
	var best []int
	if len(lins) > 0 {
		for _, l := range lins[0] {
			if len(l) > len(best) {
				best = l
			}
		}
	}
	in := map[int]bool{}
	for _, i := range best {
		in[i] = true
	}
	var rest []porcupine.Operation
	for i, op := range part {
		if !in[i] {
			rest = append(rest, op)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].Return < rest[j].Return })
	var ids []int
	for _, op := range rest[:min(4, len(rest))] {
		ids = append(ids, op.Metadata.(int))
	}
	return ids
}

func (p *prepared) names(ids []int) string {
	var s []string
	for _, id := range ids {
		if op := p.byID[id]; op != nil {
			s = append(s, describe(op))
		}
	}
	return strings.Join(s, "; ")
}

func clientID(op *Op) int {
	switch {
	case op.Process >= 1000:
		return op.Process - 1000 + 100
	case op.Process >= 0:
		return op.Process
	case op.Process == -1:
		return 98
	}
	return 99
}

// Summary is the one line a run ends with.
func (r *Report) Summary(h *History) string {
	churn := ""
	if r.Churn > 0 {
		churn = fmt.Sprintf(", %d churn rounds (%d acknowledged)", r.Churn, r.ChurnOK)
	}
	return fmt.Sprintf("history %s: %d operations (%d checked by porcupine, %d mount reads by the invariants only), %d files, %d peeks%s, faults: %s, anomalies: %d",
		h.Server, r.Ops, r.Checked, r.Weak, len(h.Files)+len(h.Logs), r.Peeks, churn, h.FaultCounts(), len(r.Anomalies))
}

// Save writes the history, the anomalies and porcupine's visualization
// into dir and returns the files it wrote.
func (r *Report) Save(h *History, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var out []string
	hp := filepath.Join(dir, "history.json")
	if err := h.Save(hp); err != nil {
		return nil, err
	}
	out = append(out, hp)
	var b strings.Builder
	fmt.Fprintln(&b, r.Summary(h))
	for _, a := range r.Anomalies {
		fmt.Fprintf(&b, "%s %s: %s\n", a.Kind, a.File, a.Text)
	}
	if len(r.Undecided) > 0 {
		fmt.Fprintf(&b, "undecided (porcupine timed out): %s\n", strings.Join(r.Undecided, " "))
	}
	ap := filepath.Join(dir, "anomalies.txt")
	if err := os.WriteFile(ap, []byte(b.String()), 0o644); err != nil {
		return out, err
	}
	out = append(out, ap)
	if len(r.Anomalies) > 0 {
		vp := filepath.Join(dir, "linearizability.html")
		if err := porcupine.VisualizePath(r.model, r.info, vp); err != nil {
			return out, err
		}
		out = append(out, vp)
	}
	return out, nil
}
