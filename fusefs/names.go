package fusefs

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// maxRefreshNames is the largest directory whose name knowledge a lookup
// renews with one LIST when it expired: one page of a ListObjectsV2
// response. A larger directory's knowledge comes only from a full listing
// (readdir) and is used while fresh.
const maxRefreshNames = 1000

// maxKnownNames bounds the names kept for one directory, listed or created
// by this mount (about 100 bytes each); past it the directory's knowledge is
// dropped and lookups ask the store.
const maxKnownNames = 100_000

// dirNames is what this mount knows of the names in one directory: every
// name its last listing showed (files, tombstones and subdirectories alike)
// plus every name this mount created there since. A lookup of a name that is
// not in the set, while the knowledge is younger than Options.EntryTTL (or
// LeaderCacheTTL, for knowledge gained while leading: no other fencefs
// writer creates names meanwhile), is answered ENOENT without a request:
// creating files in a directory costs no HEAD/LIST per file, also in a
// directory of many thousands. It is the kernel's promise for negative
// entries (a name found absent is believed absent for EntryTTL), with the
// absence of every unlisted name established by one listing instead of one
// lookup each; never a weaker write condition: a create is still
// conditioned on the key's absence at the storage.
//
// Names removed by this mount stay in the set (a lookup then asks the
// store); the set only ever errs on the side of asking.
type dirNames struct {
	mu    sync.Mutex
	at    time.Time           // GUARDED_BY(mu): when the listing was started; zero = nothing known
	names map[string]struct{} // GUARDED_BY(mu): the listing's names; nil = none usable
	// own holds the names this mount created in the directory, kept across
	// listings: a listing that raced with a create (or ran before a created
	// file was first committed) may lack the name.
	own map[string]struct{} // GUARDED_BY(mu)
	big bool                // GUARDED_BY(mu): too many names to keep
	// ents is the last listing's result (objects and prefixes found live,
	// before this mount's own entries are merged in), listed when it
	// finished at entsAt; dropped by any change of the directory through
	// this mount. Readdir reuses it while filesystem.fresh(entsAt).
	ents   []fuse.DirEntry // GUARDED_BY(mu)
	entsAt time.Time       // GUARDED_BY(mu)
}

// setEntries records a finished listing's entries.
func (k *dirNames) setEntries(ents []fuse.DirEntry) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ents, k.entsAt = ents, time.Now()
}

// entries returns the last listing's entries if fresh is true of when it
// finished.
func (k *dirNames) entries(fresh func(time.Time) bool) ([]fuse.DirEntry, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ents == nil || !fresh(k.entsAt) {
		return nil, false
	}
	return k.ents, true
}

// removed records that an entry left the directory through this mount.
func (k *dirNames) removed() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ents = nil
}

// set records a listing started at at; complete is false when it stopped
// before the end (then nothing is known).
func (k *dirNames) set(at time.Time, names map[string]struct{}, complete bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if at.Before(k.at) {
		return // an older listing finishing late
	}
	k.at, k.names, k.big = at, names, !complete || len(names) > maxKnownNames
	if k.big {
		k.names, k.own = nil, nil
	}
}

// probed records that a lookup which began at at found a name absent in a
// directory this mount knows nothing of: programs that look up one absent
// name look up many (a shell loop of creates, tar x into an existing
// directory), so the next lookup of an absent name renews the knowledge
// with one LIST page (knownAbsent), and names this mount creates from now
// on are kept. A directory of more than a page then stays unknown (big).
func (k *dirNames) probed(at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.at.IsZero() && !k.big {
		k.at = at
	}
}

// forget drops everything known (the mount became the leader: see
// activate.go).
func (k *dirNames) forget() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.at, k.names, k.own, k.big, k.ents = time.Time{}, nil, nil, false, nil
}

// add records a name this mount created (a file, directory, symlink or a
// rename target). Without it, a name created after the listing would read as
// absent once its inode is forgotten.
func (k *dirNames) add(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ents = nil
	if k.big || k.at.IsZero() {
		return
	}
	if k.own == nil {
		k.own = map[string]struct{}{}
	}
	k.own[name] = struct{}{}
	if len(k.own)+len(k.names) > maxKnownNames {
		k.names, k.own, k.big = nil, nil, true
	}
}

// absent reports whether name is known to be absent by knowledge that
// young(when it was listed) accepts. fresh reports whether the knowledge is
// that young; refresh whether a stale one is worth renewing with a listing
// (a small directory).
func (k *dirNames) absent(name string, young func(time.Time) bool) (absent, fresh, refresh bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.names == nil {
		return false, false, !k.big && !k.at.IsZero()
	}
	if !young(k.at) {
		return false, false, len(k.names) <= maxRefreshNames
	}
	_, listed := k.names[name]
	_, created := k.own[name]
	return !listed && !created, true, false
}

// listNames lists the raw names directly below prefix (one LIST with
// delimiter "/"), stopping after maxRefreshNames+1 names (complete false).
// Hidden and invalid names are left out: lookups never reach the store for
// them.
func (fsys *filesystem) listNames(ctx context.Context, prefix string) (names map[string]struct{}, complete bool, err error) {
	names = map[string]struct{}{}
	err = fsys.store.List(ctx, prefix, "/", func(e objstore.Entry) error {
		if name, ok := fsys.listedName(prefix, e.Key, e.IsPrefix); ok {
			names[name] = struct{}{}
			if len(names) > maxRefreshNames {
				return errStopList
			}
		}
		return nil
	})
	if errors.Is(err, errStopList) {
		return names, false, nil
	}
	return names, err == nil, err
}

// listedName is the directory entry name of a listed key below prefix, or
// false for the marker itself, hidden keys and names the kernel cannot show.
func (fsys *filesystem) listedName(prefix, key string, isPrefix bool) (string, bool) {
	if fsys.isHidden(strings.TrimSuffix(key, "/")) {
		return "", false
	}
	name := strings.TrimPrefix(key, prefix)
	if isPrefix {
		name = strings.TrimSuffix(name, "/")
	}
	return name, validName(name)
}

// validName reports whether a listed name can be shown by the kernel.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && len(name) <= 255 &&
		!strings.ContainsRune(name, 0) && !strings.Contains(name, "/")
}
