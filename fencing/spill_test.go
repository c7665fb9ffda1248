package fencing

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// TestARecordOverTheCapSpillsAndEveryEntryStaysAvoided: a key swept 40
// times, each sweep recording another base, keeps a metadata record within
// the cap, and a commit's view of the record (the spill read back) still
// holds all 40 bases; once they expire, gc removes the spill.
func TestARecordOverTheCapSpillsAndEveryEntryStaysAvoided(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func() objstore.Store, real bool) {
		ctx := testCtx(t, 60*time.Second)
		s := newStore()
		// Every entry must stay young through the 40 sweeps: on a real
		// server under load (make test runs several test processes side
		// by side on 2 cores) 40 sweeps have taken over 3 s.
		const validity = 10 * time.Second
		g := newGuard(t, s, Config{Holder: "A", SignedRequestValidity: validity})
		bind(t, ctx, g, 1)
		sw := g.sweeper(tokenState{mode: ModeStrict, token: 1, claim: "c"})
		const key = "spill/k"
		st := sweepState{exists: true, info: rawPut(t, ctx, s, key, "v0")}
		var bases []string
		for i := range 40 {
			b := fmt.Sprintf("%032x", i+1)
			bases = append(bases, b)
			meta, rec, full, avoid, err := sw.sweptMeta(ctx, sweepTarget{key: key, bases: map[string]bool{b: true}}, st, "wid")
			if err != nil {
				t.Fatalf("sweep %d: %v", i, err)
			}
			if len(rec) > maxRecordEntries || len(meta[MetaSwept]) > 1200 {
				t.Fatalf("sweep %d: the metadata record has %d entries (%d bytes)", i, len(rec), len(meta[MetaSwept]))
			}
			bases := 0 // besides the swept write id's entry
			for _, e := range full {
				if !strings.HasPrefix(e.ETag, sweptWIDPrefix) {
					bases++
				}
			}
			if bases != i+1 || !avoid[b] {
				t.Fatalf("sweep %d: %d bases in the full record, base avoided %v", i, bases, avoid[b])
			}
			st.info.Meta = meta
		}
		inline := parseRecord(st.info.Meta[MetaSwept]).young(time.Now(), validity)
		if _, ok := inline.marker(); !ok {
			t.Fatalf("no spill marker in %q", st.info.Meta[MetaSwept])
		}
		full, err := g.expandRecord(ctx, key, inline, validity)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bases {
			if !full.has(b) {
				t.Errorf("base %s is no longer in the record", b)
			}
		}
		// A marker whose spill is missing fails closed.
		if _, err := g.expandRecord(ctx, "spill/other", inline, validity); !errors.Is(err, ErrUnverified) {
			t.Errorf("a marker without its spill: %v, want ErrUnverified", err)
		}
		res, err := GC(ctx, s, GCOptions{SignedRequestValidity: validity})
		if err != nil || res.Failed != 0 {
			t.Fatalf("gc: %+v %v", res, err)
		}
		if _, err := s.Stat(ctx, g.lay.spillOf(key)); err != nil {
			t.Fatalf("gc removed a young spill: %v", err)
		}
		time.Sleep(validity + time.Second)
		if _, err := GC(ctx, s, GCOptions{SignedRequestValidity: validity}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Stat(ctx, g.lay.spillOf(key)); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("gc left an expired spill: %v", err)
		}
	})
}
