package fusefs

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"syscall"
	"testing"
	"time"
)

// TestLookupsOfAbsentNamesAreAnsweredFromTheDirectorysListing checks the
// negative lookup knowledge (dirNames): inside the entry TTL a directory
// this mount created or listed answers lookups of names it did not see
// without asking the store (shown by an object another client wrote there
// staying invisible), a listing renews the knowledge, names the mount
// created stay visible, and a create over a name it wrongly believed absent
// fails at close instead of overwriting the other client's object.
func TestLookupsOfAbsentNamesAreAnsweredFromTheDirectorysListing(t *testing.T) {
	k := newKT(t, 2*time.Minute)
	// The knowledge lives as long as the kernel's negative entries
	// (EntryTTL): an hour here.
	m := k.mount(serveConfig{Token: 1, EntryTTL: time.Hour})

	if err := os.Mkdir(m.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.Path("d/mine"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	k.putObject(t, "d/other", []byte("other"), nil)

	// The directory is known (created here) and young: "other" is absent
	// as far as this mount knows, without a request.
	if _, err := os.Stat(m.Path("d/other")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat d/other inside the TTL of the directory's knowledge: %v; want ENOENT (answered without a request)", err)
	}
	// What this mount created is always found.
	if b, err := os.ReadFile(m.Path("d/mine")); err != nil || string(b) != "mine" {
		t.Fatalf("read d/mine = %q, %v", b, err)
	}

	// A create over the name it believes absent is still conditioned on
	// absence at the storage: close fails, the other object is intact.
	f, err := os.OpenFile(m.Path("d/other"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("overwrite")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err == nil {
		t.Fatal("close of a create over an object this mount did not know of succeeded; want an error")
	}
	if b, err := k.getObject("d/other"); err != nil || string(b) != "other" {
		t.Fatalf("S3 d/other = %q, %v; want the other client's content", b, err)
	}

	// The name soon shows the other client's object: the failed file is
	// gone from the directory (the kernel's entry is invalidated in the
	// background). Wait for that event, boundedly.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(m.Path("d/other"))
		if err == nil && string(b) == "other" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("read d/other after the failed create = %q, %v; want the other client's object", b, err)
		}
	}

	// A listing renews the knowledge: a name the mount never looked up,
	// written by another client after the knowledge was set, is found.
	k.putObject(t, "d/third", []byte("third"), nil)
	if _, err := os.Stat(m.Path("d/third")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat d/third before a readdir: %v; want ENOENT", err)
	}
	k.putObject(t, "d/fourth", []byte("fourth"), nil)
	// Names only: os.ReadDir would lstat "third", which the kernel's own
	// negative entry (EntryTTL) still hides.
	dir, err := os.Open(m.Path("d"))
	if err != nil {
		t.Fatal(err)
	}
	names, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	if want := "[fourth mine other third]"; fmt.Sprint(names) != want {
		t.Fatalf("readdir d = %v; want %s", names, want)
	}
	if b, err := os.ReadFile(m.Path("d/fourth")); err != nil || string(b) != "fourth" {
		t.Fatalf("read d/fourth after readdir = %q, %v; want the other client's object", b, err)
	}
}

// TestAbsentNameKnowledgeExpiresWithTheEntryTTL checks that another
// client's new object becomes visible once the entry TTL has passed (the
// knowledge is renewed with a listing), without any readdir.
func TestAbsentNameKnowledgeExpiresWithTheEntryTTL(t *testing.T) {
	k := newKT(t, 2*time.Minute)
	const ttl = 300 * time.Millisecond
	m := k.mount(serveConfig{Token: 1, EntryTTL: ttl})
	if err := os.Mkdir(m.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	k.putObject(t, "d/late", []byte("late"), nil)
	// Poll for the event; the bound is generous (the TTL is 300ms).
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := os.Stat(m.Path("d/late"))
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.ENOENT) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("another client's object is still invisible 30s after it was written (entry TTL 300ms)")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestABigDirectorysListingAnswersLookupsOfAbsentNames checks that a
// directory of more names than one LIST page still answers lookups of
// names its full listing (readdir) did not show without asking the store:
// an object another client writes afterwards stays invisible inside the
// entry TTL. Creating files in a big existing directory costs no lookup
// requests.
func TestABigDirectorysListingAnswersLookupsOfAbsentNames(t *testing.T) {
	k := newKT(t, 2*time.Minute)
	for i := 0; i < maxRefreshNames+50; i++ {
		k.putObject(t, fmt.Sprintf("big/f%05d", i), []byte("x"), nil)
	}
	m := k.mount(serveConfig{Token: 1, EntryTTL: time.Hour})
	dir, err := os.Open(m.Path("big"))
	if err != nil {
		t.Fatal(err)
	}
	names, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil || len(names) != maxRefreshNames+50 {
		t.Fatalf("readdir: %d names, %v", len(names), err)
	}
	k.putObject(t, "big/late", []byte("late"), nil)
	if _, err := os.Stat(m.Path("big/late")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat big/late after the listing: %v; want ENOENT answered from the listing", err)
	}
	if b, err := os.ReadFile(m.Path("big/f00007")); err != nil || string(b) != "x" {
		t.Fatalf("read a listed name = %q, %v", b, err)
	}
}

// TestALeadersAbsentNameKnowledgeLastsTheLeaderCacheTTL checks that name
// knowledge gained while leading outlives the entry TTL (no other fencefs
// writer can create names meanwhile) for LeaderCacheTTL.
func TestALeadersAbsentNameKnowledgeLastsTheLeaderCacheTTL(t *testing.T) {
	k := newKT(t, 2*time.Minute)
	const entryTTL = 200 * time.Millisecond
	m := k.mount(serveConfig{Token: 1, EntryTTL: entryTTL, MetaTTL: entryTTL, LeaderCacheTTL: time.Hour})
	if err := os.Mkdir(m.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	k.putObject(t, "d/outside", []byte("written outside fencefs"), nil)
	time.Sleep(3 * entryTTL) // past the entry TTL: only the leader's trust can answer now
	if _, err := os.Stat(m.Path("d/outside")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat d/outside past the entry TTL while leading: %v; want ENOENT from the leader's knowledge", err)
	}
}

// TestAnAbsentNameMakesTheNextLookupLearnTheDirectory checks that in a
// directory the mount has never listed, the first lookup of an absent name
// asks the store and the next one learns the directory's names with one
// listing: from then on an object another client writes stays invisible
// inside the entry TTL (no request per lookup), as after a readdir.
func TestAnAbsentNameMakesTheNextLookupLearnTheDirectory(t *testing.T) {
	k := newKT(t, 2*time.Minute)
	k.putObject(t, "d/a", []byte("a"), nil)
	m := k.mount(serveConfig{Token: 1, EntryTTL: time.Hour})
	for _, name := range []string{"x1", "x2"} {
		if _, err := os.Stat(m.Path("d/" + name)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("stat d/%s: %v; want ENOENT", name, err)
		}
	}
	k.putObject(t, "d/late", []byte("late"), nil)
	if _, err := os.Stat(m.Path("d/late")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat d/late after two absent names: %v; want ENOENT answered from the learned listing", err)
	}
	if b, err := os.ReadFile(m.Path("d/a")); err != nil || string(b) != "a" {
		t.Fatalf("read d/a = %q, %v", b, err)
	}
}
