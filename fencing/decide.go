package fencing

// Pure decision logic of the protocol: no I/O, no clock of its own. Each
// function is table-tested in decide_test.go.

import (
	"fmt"
	"strconv"

	"github.com/fencefs/fencefs/objstore"
)

// bindStep is what a binder does next after reading the register.
type bindStep int

const (
	// bindReserve: reserve the token (create epochs/N), then CAS the register.
	bindReserve bindStep = iota
	// bindDone: the register already names our claim at the token (our
	// own earlier CAS whose response was lost, or a repeated Bind).
	bindDone
	// bindReclaim: the register names the token with our holder but another
	// claim (a restart of a stable holder): CAS the register to our claim,
	// which fences the previous instance; the reservation is already ours.
	bindReclaim
	// bindRefuse: the token can never bind; the error says why.
	bindRefuse
)

// decideBind decides what binding token (> 0) does given the register
// (exists=false: no register yet). holder and claim identify the binder.
func decideBind(reg Register, exists bool, token uint64, holder, claim string) (bindStep, error) {
	if token == 0 {
		return bindRefuse, fmt.Errorf("%w: token 0 (use auto to let the register issue one)", ErrBadToken)
	}
	if err := checkTokenRange(token); err != nil {
		return bindRefuse, err
	}
	if !exists || reg.Epoch < token {
		return bindReserve, nil
	}
	if reg.Epoch > token {
		return bindRefuse, fmt.Errorf("%w: token %d is older than the bucket's epoch %d (held by %s since %s)",
			ErrBadToken, token, reg.Epoch, holderName(reg.Holder), reg.ClaimedAt.UTC().Format("2006-01-02T15:04:05Z"))
	}
	switch {
	case reg.ClaimID == claim:
		return bindDone, nil
	case reg.Holder == holder:
		return bindReclaim, nil
	default:
		return bindRefuse, fmt.Errorf("%w: epoch %d is already held by %s; a token is never shared",
			ErrBadToken, token, holderName(reg.Holder))
	}
}

// autoToken picks the token an auto bind tries: one above everything seen
// (the register, the highest reservation listed, and the token this Guard
// already holds). When everything seen is at MaxToken or above (a register
// written by a version of fencefs that had no MaxToken) there is no such
// token: ErrTokensSpent, never a number that wraps round.
func autoToken(reg Register, exists bool, maxReserved, current uint64) (uint64, error) {
	n, what := maxReserved, "a reservation"
	if exists && reg.Epoch >= n {
		n, what = reg.Epoch, "the epoch register"
	}
	if current > n {
		n, what = current, "this mount's token"
	}
	if n >= MaxToken {
		return 0, fmt.Errorf("%w: %s is at epoch %d and the largest token is %d (docs/DESIGN.md §5: a new fence domain)",
			ErrTokensSpent, what, n, MaxToken)
	}
	return n + 1, nil
}

// reservationOurs reports whether an existing reservation of an epoch
// belongs to this binder (a lost create response, or a restart of a stable
// holder name), else returns the refusal.
func reservationOurs(res reservation, holder, claim string) (bool, error) {
	if res.ClaimID == claim || (res.Holder == holder && holder != "") {
		return true, nil
	}
	return false, fmt.Errorf("%w: epoch %d was already reserved by %s at %s; a token is never shared",
		ErrBadToken, res.Epoch, holderName(res.Holder), res.ReservedAt.UTC().Format("2006-01-02T15:04:05Z"))
}

// verdict is the outcome of checking the register against a bound token.
type verdict int

const (
	verdictOK verdict = iota
	verdictFenced
	verdictUnverified
)

// classifyRegister checks a freshly read register against the token and
// claim this Guard is bound with.
func classifyRegister(reg Register, token uint64, claim string) (verdict, string) {
	switch {
	case reg.Epoch > token:
		return verdictFenced, fmt.Sprintf("epoch %d held by %s is newer than our token %d", reg.Epoch, holderName(reg.Holder), token)
	case reg.Epoch == token && reg.ClaimID != claim:
		return verdictFenced, fmt.Sprintf("epoch %d was claimed again by %s (claim %s, ours %s)", token, holderName(reg.Holder), reg.ClaimID, claim)
	case reg.Epoch < token:
		return verdictUnverified, fmt.Sprintf("the register shows epoch %d, older than our token %d (was it reset?)", reg.Epoch, token)
	}
	return verdictOK, ""
}

func holderName(h string) string {
	if h == "" {
		return "an unnamed holder"
	}
	return "holder " + h
}

// stamp is the fencing stamp of an object.
type stamp struct {
	Epoch  uint64
	Holder string
	WID    string
}

func stampOf(meta map[string]string) stamp {
	e, _ := strconv.ParseUint(meta[MetaEpoch], 10, 64)
	return stamp{Epoch: e, Holder: meta[MetaHolder], WID: meta[MetaWID]}
}

// outcome is the resolution of a commit refused by a precondition.
type outcome int

const (
	// outcomeOurs: the object carries our write id, or is a takeover
	// sweep's rewrite of an object that did (MetaSweptWID): our commit
	// landed (an earlier attempt whose response was lost).
	outcomeOurs outcome = iota
	// outcomeLandedReplaced: a takeover sweep rewrote what our commit
	// stored (its record names our write id) and a newer commit has
	// replaced that rewrite since: our commit landed, its version is gone.
	outcomeLandedReplaced
	// outcomeFenced: the object was written by a newer epoch.
	outcomeFenced
	// outcomeCheck: someone else changed the key; validate the register
	// to tell fenced from stale.
	outcomeCheck
	// outcomeRetryOverTombstone: a create found a tombstone (a deleted
	// key): retry conditioned on the tombstone's ETag.
	outcomeRetryOverTombstone
	// outcomeRetryOverSweep: the key holds a takeover sweep's rewrite of
	// the caller's base (the same content, another ETag): retry on it.
	outcomeRetryOverSweep
	// outcomeRetryCreate: the caller's base was a tombstone and the key is
	// now absent (garbage-collected): retry as a plain create.
	outcomeRetryCreate
	// outcomeGone: a delete found the key absent or a tombstone: the goal
	// holds (possibly our own delete whose response was lost).
	outcomeGone
)

// writeKind distinguishes commits for resolution.
type writeKind int

const (
	kindPut writeKind = iota // Put or Copy onto the key
	kindDelete
)

// resolve decides what a precondition failure on key means, given what a
// HEAD of key found afterwards (exists=false: absent), our epoch and write
// id, and the base the commit was conditioned on.
func resolve(kind writeKind, cur objstore.ObjectInfo, exists bool, epoch uint64, wid string, base Version) outcome {
	if exists {
		st := stampOf(cur.Meta)
		if wid != "" && (st.WID == wid || cur.Meta[MetaSweptWID] == wid && !isTombstone(cur)) {
			// Ours, or a sweep's rewrite of ours (the same content):
			// an attempt whose answer was lost landed.
			return outcomeOurs
		}
		if kind == kindPut && parseRecord(cur.Meta[MetaSwept]).hasSweptWID(wid) {
			return outcomeLandedReplaced
		}
		if st.Epoch > epoch {
			return outcomeFenced
		}
		if isTombstone(cur) {
			if kind == kindDelete {
				return outcomeGone
			}
			if objstore.NormalizeETag(cur.ETag) != base.ETag && (!base.Exists() || base.Tombstone) {
				return outcomeRetryOverTombstone
			}
		}
		if base.Exists() && !base.Tombstone && !isTombstone(cur) &&
			objstore.NormalizeETag(cur.Meta[MetaSweptFrom]) == base.ETag && objstore.NormalizeETag(cur.ETag) != base.ETag {
			return outcomeRetryOverSweep
		}
		return outcomeCheck
	}
	if kind == kindDelete {
		return outcomeGone
	}
	if base.Tombstone {
		return outcomeRetryCreate
	}
	return outcomeCheck
}

// followsDirectly decides whether a new binding continues this Guard's
// line (docs/DESIGN.md, "What the mount holds, and under which binding"):
// changes the mount made under its previous binding may then still be
// stored under the new one. It does only when the claim found the register
// naming that previous binding itself (prevToken, prevClaim, this holder):
// the register's epoch only grows, so no other holder's epoch was active in
// between. A Guard that was fenced, unbound, or cannot tell what its claim
// replaced starts a new line.
func followsDirectly(found claimed, prevToken uint64, prevClaim, holder string, prevState State) bool {
	if !found.known || prevToken == 0 || prevState == StateFenced || prevState == StateUnbound {
		return false
	}
	r := found.reg
	return r.Epoch == prevToken && r.ClaimID == prevClaim && r.Holder == holder
}
