package fusefs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestAReadMovedToAShorterVersionNeverReturnsZeros: a handle opened on a
// version that another client then replaced with a shorter one, whose
// first read moves to the current version (rebase), returns that version
// exactly — never the new bytes padded with NULs up to the old size (the
// kernel zero-fills a short READ up to its i_size when the attributes
// were invalidated while the READ was in flight; found by the history
// checker, docs/HISTORY.md).
func TestAReadMovedToAShorterVersionNeverReturnsZeros(t *testing.T) {
	k := newKT(t, 2*time.Minute)
	m := k.mount(serveConfig{Token: 1})
	for i, sizes := range [][2]int{{179, 105}, {9000, 100}, {200, 199}, {100, 300}} {
		old := bytes.Repeat([]byte{'a' + byte(i)}, sizes[0])
		cur := bytes.Repeat([]byte{'A' + byte(i)}, sizes[1])
		name := fmt.Sprintf("f%d", i) // a leader trusts what it saw: a new name each round
		k.putObject(t, name, old, nil)
		// stat: the kernel takes the old size.
		if fi, err := os.Stat(m.Path(name)); err != nil || fi.Size() != int64(len(old)) {
			t.Fatalf("stat: %v, %v; want size %d", fi, err, len(old))
		}
		f, err := os.Open(m.Path(name))
		if err != nil {
			t.Fatal(err)
		}
		k.putObject(t, name, cur, nil)
		got, err := io.ReadAll(f)
		f.Close()
		if errors.Is(err, syscall.ESTALE) {
			continue // refusing the moved version is allowed; a mix is not
		}
		if err != nil {
			t.Fatalf("round %d: read: %v", i, err)
		}
		if !bytes.Equal(got, old) && !bytes.Equal(got, cur) {
			t.Fatalf("round %d (%d → %d bytes): read %d bytes, %d NULs: neither version", i, sizes[0], sizes[1], len(got), bytes.Count(got, []byte{0}))
		}
	}
}
