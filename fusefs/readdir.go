package fusefs

import (
	"context"
	"errors"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sync/errgroup"
)

var _ = (fs.NodeReaddirer)((*dirNode)(nil))

// Readdir lists the directory: one LIST with delimiter "/" (carrying each
// object's metadata where the store can: listattrs.go), minus the
// marker, tombstones, the protocol directory, names the kernel cannot show
// and prefixes holding nothing visible; plus files this mount created and
// has not committed yet. A name that is both an object and a prefix is
// listed once (as the file, as lookup resolves it).
//
// The listing's result is reused for as long as the metadata cache
// promises (filesystem.fresh, counted from when the listing finished),
// until this mount adds or removes an entry of the directory. A listing
// that carried an object's metadata gives the name its version
// (listattrs.go); otherwise it confirms the cached version it shows
// unchanged or starts a HEAD ahead of the name's lookup (prefetch.go).
func (d *dirNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	base, ok := d.names.entries(d.fsys.fresh)
	if !ok {
		prefix, err := d.dirKey()
		if err != nil {
			return nil, d.fsys.errno("readdir", "", err)
		}
		ctx, cancel := d.fsys.opctx(ctx)
		defer cancel()
		if base, err = d.list(ctx, prefix); err != nil {
			return nil, d.fsys.errno("readdir", prefix, err)
		}
		d.names.setEntries(base)
	}

	children := d.Children()
	seen := make(map[string]bool, len(base))
	out := make([]fuse.DirEntry, 0, len(base)+2)
	add := func(de fuse.DirEntry) {
		if seen[de.Name] {
			return
		}
		seen[de.Name] = true
		if ch := children[de.Name]; ch != nil && (de.Mode == 0 || ch.StableAttr().Mode == de.Mode) {
			de.Ino = ch.StableAttr().Ino
			de.Mode = ch.StableAttr().Mode
		}
		out = append(out, de)
	}
	for _, de := range base {
		add(de)
	}
	for name, ch := range children {
		// Shown though the listing may miss them: files created here
		// and not committed, directories emptied here.
		if n := nodeOf(ch); n != nil {
			b := n.base()
			b.mu.Lock()
			local := n.localOnlyLocked()
			b.mu.Unlock()
			if local {
				add(fuse.DirEntry{Name: name, Mode: b.kind})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	dots := []fuse.DirEntry{{Name: ".", Mode: syscall.S_IFDIR, Ino: d.StableAttr().Ino}}
	if _, p := d.Parent(); p != nil {
		dots = append(dots, fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Ino: p.StableAttr().Ino})
	} else {
		dots = append(dots, fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR})
	}
	return fs.NewListDirStream(append(dots, out...)), 0
}

// list runs the LIST of the directory and returns its visible entries
// (objects first, then prefixes, in listing order; Ino unset), after
// deciding the uncertain ones (possible tombstones, prefixes that may hold
// only tombstones) in parallel.
func (d *dirNode) list(ctx context.Context, prefix string) ([]fuse.DirEntry, error) {
	type cand struct {
		name  string
		entry objstore.Entry
	}
	var objs, dirs []cand
	listed := time.Now()
	names := map[string]struct{}{}
	err := d.fsys.store.ListMeta(ctx, prefix, "/", func(e objstore.Entry) error {
		name, ok := d.fsys.listedName(prefix, e.Key, e.IsPrefix)
		if !ok || !e.IsPrefix && d.fsys.deletes.isPending(e.Key) {
			return nil // an object unlinked here is gone (deletewb.go)
		}
		names[name] = struct{}{}
		if e.IsPrefix {
			dirs = append(dirs, cand{name, e})
		} else {
			objs = append(objs, cand{name, e})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	d.names.set(listed, names, true)

	live := make([]bool, len(objs)+len(dirs))
	var g errgroup.Group
	g.SetLimit(8)
	for i := range live {
		if i < len(objs) {
			if e := objs[i].entry; e.Size != fencing.TombstoneSize || e.Meta != nil {
				live[i], _ = d.fsys.notTombstone(ctx, e) // decided without a request
				continue
			}
			g.Go(func() (err error) {
				live[i], err = d.fsys.notTombstone(ctx, objs[i].entry)
				return err
			})
			continue
		}
		e := dirs[i-len(objs)].entry
		g.Go(func() (err error) {
			live[i], err = d.livePrefix(ctx, prefix, e)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}

	out := make([]fuse.DirEntry, 0, len(live))
	var pre []prefetchItem
	for i, c := range objs {
		if !live[i] {
			continue
		}
		mode, it, ok := d.listedItem(c.name, c.entry, listed)
		out = append(out, fuse.DirEntry{Name: c.name, Mode: mode})
		if ok {
			pre = append(pre, it)
		}
	}
	d.pre.start(pre)
	for i, c := range dirs {
		if live[len(objs)+i] {
			out = append(out, fuse.DirEntry{Name: c.name, Mode: syscall.S_IFDIR})
		}
	}
	return out, nil
}

// livePrefix reports whether a listed prefix is a directory to show: it
// has a marker (known or found), or holds an object that is not a
// tombstone.
func (d *dirNode) livePrefix(ctx context.Context, prefix string, e objstore.Entry) (bool, error) {
	if ch := d.GetChild(strings.TrimSuffix(strings.TrimPrefix(e.Key, prefix), "/")); ch != nil {
		if dn, ok := ch.Operations().(*dirNode); ok {
			dn.mu.Lock()
			hasMarker := dn.info.ETag != ""
			dn.mu.Unlock()
			if hasMarker {
				return true, nil
			}
		}
	}
	ok, err := d.fsys.hasLive(ctx, e.Key)
	if err != nil || ok {
		return ok, err
	}
	// A marker alone keeps a directory.
	info, serr := d.fsys.store.Stat(ctx, e.Key)
	if serr != nil && !errors.Is(serr, objstore.ErrNotFound) {
		return false, serr
	}
	return serr == nil && !fencing.IsTombstone(info), nil
}
