package fencing

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// FormatVersion is the format of the register, reservation and intent
// objects this package writes. A newer format in the bucket makes binding
// and validation fail closed (ErrUnverified) instead of guessing. Format 2
// added intent journals, which a binder must seal before sweeping: a
// format-1 binder would sweep without sealing, so it must refuse them.
const FormatVersion = 2

// Protocol key layout under <domain>.fencefs/ (see docs/DESIGN.md §4).
const (
	registerName = "epoch"
	epochsDir    = "epochs/"
	intentsDir   = "intents/"
	sweptDir     = "swept/"
)

// layout computes the protocol keys of one fence domain.
type layout struct{ base string } // base = domain + ".fencefs/"

func newLayout(domain string) layout { return layout{base: domain + ProtocolDir + "/"} }

func (l layout) register() string            { return l.base + registerName }
func (l layout) epochsPrefix() string        { return l.base + epochsDir }
func (l layout) reservation(n uint64) string { return l.base + epochsDir + epochName(n) }
func (l layout) intentsPrefix() string       { return l.base + intentsDir }
func (l layout) intentDir(n uint64) string   { return l.base + intentsDir + epochName(n) + "/" }
func (l layout) intent(n uint64, id string) string {
	return l.intentDir(n) + id
}

// journalSuffix ends the name of a binding's intent journal.
const journalSuffix = "-journal"

// journal is the name of the intent journal of binding (n, claim), and
// sweepIntent that of its takeover sweep's intent: both follow from the
// binding, so that a binder reads them without a listing (see claimRef).
func (l layout) journal(n uint64, claim string) string { return l.intent(n, claim+journalSuffix) }
func (l layout) sweepIntent(n uint64, claim string) string {
	return l.intent(n, claim+"-sweep")
}

// named returns the intent objects bindings may have written (their
// journals and sweep intents), for a sweep to read by name.
func (l layout) named(refs []claimRef) []string {
	var out []string
	for _, r := range refs {
		out = append(out, l.journal(r.Epoch, r.ClaimID), l.sweepIntent(r.Epoch, r.ClaimID))
	}
	return out
}
func (l layout) sweptPrefix() string         { return l.base + sweptDir }
func (l layout) sweptMarker(n uint64) string { return l.base + sweptDir + epochName(n) }

// isProtocolKey reports whether key lies under the domain's protocol
// directory, which Guard never lets callers mutate.
func (l layout) isProtocolKey(key string) bool { return strings.HasPrefix(key, l.base) }

// epochName is the 20-digit zero-padded decimal form used in keys, so that
// lexical order is numeric order.
func epochName(n uint64) string { return fmt.Sprintf("%020d", n) }

// parseEpochName parses a 20-digit epoch name (with an optional trailing
// "/"), reporting false for anything else.
func parseEpochName(s string) (uint64, bool) {
	s = strings.TrimSuffix(s, "/")
	if len(s) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// Register is the content of the epoch register object.
type Register struct {
	Format    int       `json:"format"`
	Epoch     uint64    `json:"epoch"`
	Holder    string    `json:"holder"`
	ClaimID   string    `json:"claim_id"`
	PrevEpoch uint64    `json:"prev_epoch"`
	ClaimedAt time.Time `json:"claimed_at"`
	// Unsealed names the bindings whose intents the binder that wrote
	// this register had not yet sealed and swept when it raised it: the
	// binding it replaced, and those of the register it replaced that its
	// pre-raise seal could not get through. Its own sweep reads them by
	// name, and so does the next binder should it die first (claimRef).
	Unsealed []claimRef `json:"unsealed,omitempty"`
}

// claimRef names one binding: an epoch and the claim that bound it.
//
// A binder seals every older intent journal it finds by listing intents/,
// but a listing cannot be trusted to show an object that is being
// overwritten while it lists (a 4-drive MinIO leaves one out now and
// then), and a busy writer's journal is exactly that. So the journal and
// the sweep intent of a binding are named after it (layout.journal), and
// the register carries the bindings a binder must read by name: the one
// it replaces (whose writer may be busy) and those left unsealed by a
// binder that died between its raise and its sweep (Register.Unsealed).
type claimRef struct {
	Epoch   uint64 `json:"epoch"`
	ClaimID string `json:"claim_id"`
}

// reservation is the content of epochs/<N>.
type reservation struct {
	Format     int       `json:"format"`
	Epoch      uint64    `json:"epoch"`
	Holder     string    `json:"holder"`
	ClaimID    string    `json:"claim_id"`
	ReservedAt time.Time `json:"reserved_at"`
}

// intentDoc is the content of intents/<N>/<id>: the keys epoch N may be
// committing to, each with the bases ("" = absent) its commits are
// conditioned on.
type intentDoc struct {
	Format  int           `json:"format"`
	Epoch   uint64        `json:"epoch"`
	Holder  string        `json:"holder"`
	ClaimID string        `json:"claim_id"`
	Keys    []intentEntry `json:"keys"`
	Written time.Time     `json:"written"`
	// Sweep marks the intent a takeover sweep writes for its own rewrites.
	Sweep bool `json:"sweep,omitempty"`
	// Journal marks a strict Guard's intent journal (journal.go): rewritten
	// by its writer with If-Match, Seq counting the writes; a binder seals
	// it (Sealed) before sweeping the keys it names.
	Journal bool     `json:"journal,omitempty"`
	Seq     uint64   `json:"seq,omitempty"`
	Sealed  *sealDoc `json:"sealed,omitempty"`
	// Released marks the release of a sealed journal by its fenced owner
	// (release.go): Keys are the entries that may still land.
	Released bool `json:"released,omitempty"`
}

// sealDoc records the binder that sealed a journal.
type sealDoc struct {
	Epoch   uint64    `json:"epoch"`
	Holder  string    `json:"holder"`
	ClaimID string    `json:"claim_id"`
	At      time.Time `json:"at"`
}

type intentEntry struct {
	Key   string   `json:"key"`
	Bases []string `json:"bases"`
}

// sweptMarker is the content of swept/<N>: the sweep of epoch N completed.
type sweptMarkerDoc struct {
	Format  int       `json:"format"`
	Epoch   uint64    `json:"epoch"`
	Holder  string    `json:"holder"`
	ClaimID string    `json:"claim_id,omitempty"`
	Intents int       `json:"intents"`
	Keys    int       `json:"keys"`
	Done    time.Time `json:"done"`
}

func decodeDoc(what string, b []byte, v any, format func() int) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %s is not valid JSON: %v", ErrUnverified, what, err)
	}
	if f := format(); f < 1 || f > FormatVersion {
		return fmt.Errorf("%w: %s has format %d; this fencefs understands format %d", ErrUnverified, what, f, FormatVersion)
	}
	return nil
}

func decodeRegister(b []byte) (Register, error) {
	var r Register
	err := decodeDoc("the epoch register", b, &r, func() int { return r.Format })
	return r, err
}

// randomID returns n random bytes in hex.
func randomID(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("fencing: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// newWID returns a fresh write id (unique per logical write).
func newWID() string { return randomID(12) }

func randUint64() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("fencing: crypto/rand failed: " + err.Error())
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}
