package fencing

import (
	"fmt"
	"strings"

	"github.com/fencefs/fencefs/objstore"
)

// tombstoneSize is the exact length of every tombstone body. A listing
// without metadata (objstore.Entry.Meta nil) tells only sizes, so readers use
// the size to decide whether an entry needs a HEAD to be recognised as a
// tombstone.
const tombstoneSize = 128

// tombstoneBody returns the fixed-length body of a tombstone written by
// epoch with write id wid. It differs for every write id, so no two
// tombstones share an ETag.
func tombstoneBody(epoch uint64, wid string) []byte {
	s := fmt.Sprintf("fencefs tombstone: deleted key; epoch=%s wid=%s", epochName(epoch), wid)
	if len(s) > tombstoneSize-1 {
		s = s[:tombstoneSize-1]
	}
	s += strings.Repeat(" ", tombstoneSize-1-len(s)) + "\n"
	return []byte(s)
}

// isTombstone reports whether info (with metadata) describes a tombstone.
func isTombstone(info objstore.ObjectInfo) bool {
	return info.Size == tombstoneSize && info.Meta[MetaTombstone] == "1"
}
