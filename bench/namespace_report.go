package main

import (
	"fmt"
	"strings"
)

// durableOf maps the durable rate of each namespace workload to its
// acknowledged rate: the key of the phase that measured both, of its S3
// requests, and of its nsState.
var durableOf = map[string]string{mMvDurable: mMv, mRmrfDurable: mRmrf, mRmrfRenamedDurable: mRmrfRenamed}

// phaseKey is the key of the phase that measured metric key.
func phaseKey(key string) string {
	if k, ok := durableOf[key]; ok {
		return k
	}
	return key
}

// nsTotals sums target's nsState of the namespace workload whose
// acknowledged rate is ack over its runs; ok is false when no run
// checked the bucket.
func (r *results) nsTotals(target, ack string) (st nsState, ok bool) {
	for _, m := range r.runs[target] {
		if s, found := m.namespace[ack]; found {
			st.ops += s.ops
			st.atReturn += s.atReturn
			st.afterSync += s.afterSync
			st.never += s.never
			ok = true
		}
	}
	return st, ok
}

// nsNote says, for target's value of metric key, what the bucket lacked
// (summed over runs): for an acknowledged rate, the changes not in it when
// the program returned; for a durable rate, those not in it when the
// directories' fsync returned (the rate then counts until they were), or
// still not in it at the end of the polling (no rate). "" when nothing
// was lacking or key is not a namespace rate.
func (r *results) nsNote(target, key string) string {
	ack := phaseKey(key)
	st, ok := r.nsTotals(target, ack)
	switch {
	case !ok:
		return ""
	case key == ack && st.atReturn > 0:
		return fmt.Sprintf("not durable at return: %d/%d", st.atReturn, st.ops)
	case key == ack && r.async(target):
		return "not durable at return: sent afterwards, by design"
	case key == ack:
		return ""
	case st.never > 0:
		return fmt.Sprintf("%d/%d not in the bucket %s after the fsync", st.never, st.ops, r.cfg.SyncWait)
	case st.afterSync > 0:
		return fmt.Sprintf("not durable at fsync: %d/%d later", st.afterSync, st.ops)
	}
	return ""
}

// async reports whether target acknowledges renames and deletes before
// it sends them (nsContract.async).
func (r *results) async(target string) bool {
	for _, t := range r.targets {
		if t.Name() == target {
			return t.Namespace().async
		}
	}
	return false
}

// nsShort is nsNote without the counts, for ratio cells ("" if none).
func (r *results) nsShort(target, key string) string {
	ack := phaseKey(key)
	st, ok := r.nsTotals(target, ack)
	switch {
	case !ok:
		return ""
	case key == ack && (st.atReturn > 0 || r.async(target)):
		return "not durable at return"
	case key != ack && st.never+st.afterSync > 0:
		return "not durable at fsync"
	}
	return ""
}

// withNote appends " (note)" to s when note is not empty.
func withNote(s, note string) string {
	if note == "" {
		return s
	}
	return s + " (" + note + ")"
}

// joinNotes joins the notes that are not empty with "; ".
func joinNotes(notes ...string) string {
	var out []string
	for _, n := range notes {
		if n != "" {
			out = append(out, n)
		}
	}
	return strings.Join(out, "; ")
}

// pairNote says which of a target / reference pair was not durable where
// its value of key was taken ("" if both were).
func (r *results) pairNote(target, ref, key string) string {
	var notes []string
	for _, name := range []string{target, ref} {
		if n := r.nsShort(name, key); n != "" {
			notes = append(notes, name+" "+n)
		}
	}
	return joinNotes(notes...)
}

// closeNote says which of targets failed a durability check at close
// ("" if none did), for ratios taken against them.
func (r *results) closeNote(targets ...string) string {
	var notes []string
	for _, name := range targets {
		if ok, _, _ := r.durable(name); !ok {
			notes = append(notes, name+" not durable at close")
		}
	}
	return joinNotes(notes...)
}
