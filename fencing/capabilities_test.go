package fencing

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/memstore"
)

func TestCheckStorageNamesWhatEachModeLacks(t *testing.T) {
	tests := []struct {
		name       string
		opts       memstore.Options
		strict     string // "" = possible, else a capability the error names
		fast       string
		tombstones bool
	}{
		{"conforming store: every mode, conditional deletes", memstore.Options{}, "", "", false},
		{"DELETE ignores If-Match: every mode, with tombstones", memstore.Options{IgnoreDeleteConditions: true}, "", "", true},
		{"copy ignores destination conditions: no fencing", memstore.Options{IgnoreCopyDestConditions: true}, string(objstore.CheckConditionalCopyDest), string(objstore.CheckConditionalCopyDest), false},
		{"If-None-Match ignored: no fencing", memstore.Options{IgnoreIfNoneMatch: true}, string(objstore.CheckIfNoneMatchCreate), string(objstore.CheckIfNoneMatchCreate), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			caps := objstore.Probe(context.Background(), memstore.NewWithOptions(tt.opts), ProbeDir("pfx/"))
			if caps.Err != nil {
				t.Fatal(caps.Err)
			}
			for _, m := range []struct {
				mode Mode
				want string
			}{{ModeStrict, tt.strict}, {"", tt.strict}, {ModeFast, tt.fast}, {ModeOff, ""}} {
				err := CheckStorage(m.mode, caps)
				if (err == nil) != (m.want == "") || (err != nil && !strings.Contains(err.Error(), m.want)) {
					t.Errorf("CheckStorage(%q) = %v, want an error naming %q", m.mode, err, m.want)
				}
			}
			if got := TombstoneDeletes(caps); got != tt.tombstones {
				t.Errorf("TombstoneDeletes = %v, want %v", got, tt.tombstones)
			}
		})
	}
}

func TestOnlyStrictNeedsListingsAfterWrites(t *testing.T) {
	caps := objstore.Capabilities{Passed: map[objstore.Capability]bool{}, Reasons: map[objstore.Capability]string{objstore.CheckStrongListAfterWrite: "stale listing"}}
	for _, k := range objstore.AllCapabilities() {
		caps.Passed[k] = k != objstore.CheckStrongListAfterWrite
	}
	if err := CheckStorage(ModeFast, caps); err != nil {
		t.Errorf("fast: %v", err)
	}
	if err := CheckStorage(ModeStrict, caps); err == nil || !strings.Contains(err.Error(), "strong-list-after-write: stale listing") {
		t.Errorf("strict: %v", err)
	}
}

func TestCheckStorageReportsAnIncompleteProbe(t *testing.T) {
	caps := objstore.Capabilities{Err: objstore.ErrUnavailable, Reasons: map[objstore.Capability]string{}}
	if err := CheckStorage(ModeFast, caps); !errors.Is(err, objstore.ErrUnavailable) {
		t.Errorf("CheckStorage = %v, want it to wrap the probe's error", err)
	}
}

func TestProbeDirIsInsideTheProtocolDirectory(t *testing.T) {
	if got := ProbeDir("a/"); got != "a/"+ProtocolDir+"/probe/" {
		t.Errorf("ProbeDir = %q", got)
	}
}
