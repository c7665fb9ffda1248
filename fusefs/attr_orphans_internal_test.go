package fusefs

import (
	"log/slog"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// TestANodeAdoptsTheChangeOfTheOrphanOfItsKeyOnlyFromTheSameVersion: the
// node made for the key of a forgotten node with a change pending takes
// the change (and its place in the write-back) when it comes from the
// version the change was made on and has no change of its own; otherwise
// the change is dropped. An orphan being stored is left to finish.
func TestANodeAdoptsTheChangeOfTheOrphanOfItsKeyOnlyFromTheSameVersion(t *testing.T) {
	for _, tc := range []struct {
		name       string
		etag       string // of the new node's version
		ownPending bool   // the new node has a change of its own
		storing    bool   // the orphan's store is in flight
		adopted    bool
		kept       bool // the orphan is still an orphan
	}{
		{name: "same version", etag: "v1", adopted: true},
		{name: "changed by another client", etag: "v2"},
		{name: "the new node has a later change", etag: "v1", ownPending: true},
		{name: "the orphan is being stored", etag: "v1", storing: true, kept: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := newFilesystem(Options{AttrWriteback: time.Hour}, t.TempDir())
			fsys.log = slog.New(slog.DiscardHandler)
			w := fsys.attrwb
			o := &nodeBase{fsys: fsys, kind: kindFile}
			o.info = objstore.ObjectInfo{Key: "f", ETag: "v1"}
			o.attr.Mode = 0o100600
			o.attrPending, o.attrKey = true, "f"
			w.schedule(o)
			o.OnForget()
			nb := &nodeBase{fsys: fsys, kind: kindFile}
			nb.info = objstore.ObjectInfo{Key: "f", ETag: tc.etag}
			nb.attr.Mode = 0o100644
			nb.attrPending = tc.ownPending
			nb.fetched = time.Now()
			if tc.storing {
				o.opMu.Lock()
				defer o.opMu.Unlock()
			}
			w.adopt("f", nb)
			w.mu.Lock()
			_, nbDue := w.due[nb]
			_, oDue := w.due[o]
			_, kept := w.orphans["f"]
			w.mu.Unlock()
			if got := nb.attrPending && nb.attr.Mode == 0o100600; got != tc.adopted {
				t.Errorf("adopted %v (mode %o, pending %v), want %v", got, nb.attr.Mode, nb.attrPending, tc.adopted)
			}
			if nbDue != tc.adopted {
				t.Errorf("the new node is due in the write-back: %v, want %v", nbDue, tc.adopted)
			}
			if kept != tc.kept || oDue != tc.kept {
				t.Errorf("the orphan kept %v, due %v; want %v", kept, oDue, tc.kept)
			}
			if tc.storing && !nb.fetched.IsZero() {
				t.Error("the new node trusts its version while the orphan's store may change it")
			}
		})
	}
}
