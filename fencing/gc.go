package fencing

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fencefs/fencefs/objstore"
)

// ReadRegister reads the fence domain's register without binding (for
// `fencefs epoch show`), and the most recent reserved epochs (up to 10,
// ascending). A missing register is an error wrapping objstore.ErrNotFound
// (recent is still filled). Other errors wrap ErrUnverified or the
// storage's.
func ReadRegister(ctx context.Context, store objstore.Store, domain string) (Register, []uint64, error) {
	lay := newLayout(domain)
	var all []uint64
	err := store.List(ctx, lay.epochsPrefix(), "/", func(e objstore.Entry) error {
		if n, ok := parseEpochName(strings.TrimPrefix(e.Key, lay.epochsPrefix())); ok && !e.IsPrefix {
			all = append(all, n)
		}
		return nil
	})
	if err != nil {
		return Register{}, nil, fmt.Errorf("listing epoch reservations: %w", err)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	if len(all) > 10 {
		all = all[len(all)-10:]
	}
	reg, _, exists, err := objects{store: store, lay: lay}.readRegister(ctx)
	if err != nil {
		return Register{}, all, err
	}
	if !exists {
		return Register{}, all, fmt.Errorf("no epoch register at %s: %w", lay.register(), objstore.ErrNotFound)
	}
	return reg, all, nil
}

// Raise binds token (0 = auto) with a short-lived strict Guard and closes
// it: it raises the bucket's epoch without mounting (`fencefs epoch
// raise`), running the takeover sweep like any binder, so that every older
// writer is fenced when it returns. cfg.Mode is forced to strict;
// cfg.Holder should name the caller (e.g. "cli:<host>").
func Raise(ctx context.Context, store objstore.Store, cfg Config, token uint64) (uint64, error) {
	cfg.Mode = ModeStrict
	g, err := New(store, cfg)
	if err != nil {
		return 0, err
	}
	n, err := g.Bind(ctx, token)
	if cerr := g.Close(ctx); err == nil && cerr != nil {
		err = cerr
	}
	return n, err
}

// GCOptions configures GC.
type GCOptions struct {
	// Domain is the fence domain, as in Config.
	Domain string
	// Prefix limits the tombstone scan to keys under Domain+Prefix.
	Prefix string
	// TombstonesBefore: tombstones last modified before this time are
	// removed, provided their ETag-ABA record has expired. Zero: tombstones
	// are kept.
	TombstonesBefore time.Time
	// UploadsBefore: incomplete multipart uploads initiated before this time
	// are aborted. Zero: uploads are kept.
	UploadsBefore time.Time
	// SignedRequestValidity as in Config (0 means the default): tombstones
	// younger than this, or with a record entry younger than this, are kept.
	SignedRequestValidity time.Duration
	// DeleteIgnoresIfMatch says the store deletes whatever a DELETE's
	// If-Match names (the probe's conditional-delete check failed): then
	// tombstones are kept (counted in GCResult.TombstonesKept), because a
	// DELETE of one could remove a file a mount creates at its name at
	// the same moment, unless UnconditionalTombstones.
	DeleteIgnoresIfMatch bool
	// UnconditionalTombstones deletes tombstones on such a store anyway,
	// after a HEAD: for when no mount writes the bucket.
	UnconditionalTombstones bool
	// DryRun reports what would be removed and removes nothing.
	DryRun bool
	// Report, if set, is called for each item removed (or that would be).
	Report func(GCItem)
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// GCItem is one object gc removes.
type GCItem struct {
	Kind   string // "intent", "tombstone" or "upload"
	Key    string
	Epoch  uint64 // the intent's epoch, or the tombstone's
	Reason string
	// Err is set when the removal failed (the item stays).
	Err error
}

// GCResult counts what GC removed (or would remove in a dry run).
type GCResult struct {
	Intents, Tombstones, Uploads int
	Failed                       int
	// TombstonesKept counts the tombstones old enough to go that were kept
	// because the store's DELETE ignores If-Match (GCOptions).
	TombstonesKept int
}

// GC removes protocol garbage (`fencefs gc`). The leading mount removes
// the tombstones it knows of by itself (see "Tombstones" in the package
// documentation); GC is for the rest, and for what no mount runs on:
//
//   - intents of epochs older than the newest epoch whose takeover sweep
//     completed (its marker under .fencefs/swept/): that sweep already
//     changed every key they name, and any intent written after it listed
//     them belongs to a writer whose validation fails. Intents of the epoch
//     being swept now, or of a sweep that never completed, are kept.
//   - tombstones older than TombstonesBefore whose ETag-ABA record has
//     expired, by a DELETE conditioned on the tombstone's ETag. On a backend
//     that ignores conditions on DELETE (DeleteIgnoresIfMatch) a create over
//     the tombstone landing between gc's HEAD and its DELETE would be
//     deleted with it, so there they are kept and counted, unless
//     UnconditionalTombstones (only while no mount writes); the bucket
//     lifecycle rule the mounts install removes them exactly instead.
//   - incomplete multipart uploads initiated before UploadsBefore.
//
// It never touches the register or the reservations. It returns the
// counts and the first listing error; per-item failures are counted and
// reported through Report.
func GC(ctx context.Context, store objstore.Store, opts GCOptions) (GCResult, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SignedRequestValidity <= 0 {
		opts.SignedRequestValidity = DefaultSignedRequestValidity
	}
	c := &collector{store: store, opts: opts, lay: newLayout(opts.Domain)}
	if err := c.intents(ctx); err != nil {
		return c.res, err
	}
	if err := c.spills(ctx); err != nil {
		return c.res, err
	}
	if !opts.TombstonesBefore.IsZero() {
		if err := c.tombstones(ctx); err != nil {
			return c.res, err
		}
	}
	if !opts.UploadsBefore.IsZero() {
		if err := c.uploads(ctx); err != nil {
			return c.res, err
		}
	}
	return c.res, nil
}

// collector is one run of GC.
type collector struct {
	store objstore.Store
	opts  GCOptions
	lay   layout
	res   GCResult
}

// report counts it among the failures if it failed and hands it to
// opts.Report.
func (c *collector) report(it GCItem) {
	if it.Err != nil {
		c.res.Failed++
	}
	if c.opts.Report != nil {
		c.opts.Report(it)
	}
}

// intents deletes the intents of epochs below the newest completed sweep.
func (c *collector) intents(ctx context.Context) error {
	store, lay := c.store, c.lay
	var swept uint64
	err := store.List(ctx, lay.sweptPrefix(), "/", func(e objstore.Entry) error {
		if n, ok := parseEpochName(strings.TrimPrefix(e.Key, lay.sweptPrefix())); ok && n > swept {
			swept = n
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing sweep markers: %w", err)
	}
	if swept == 0 {
		return nil
	}
	// Intents, and the releases their fenced owners wrote (release.go).
	for _, prefix := range []string{lay.intentsPrefix(), lay.releasedPrefix()} {
		if err := c.protocolDirsBelow(ctx, prefix, swept); err != nil {
			return err
		}
	}
	return nil
}

// protocolDirsBelow deletes every object under prefix<epoch>/ for the
// epochs below swept.
func (c *collector) protocolDirsBelow(ctx context.Context, prefix string, swept uint64) error {
	store, opts := c.store, c.opts
	var dirs []uint64
	err := store.List(ctx, prefix, "/", func(e objstore.Entry) error {
		if n, ok := parseEpochName(strings.TrimPrefix(e.Key, prefix)); ok && e.IsPrefix && n < swept {
			dirs = append(dirs, n)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing %s: %w", prefix, err)
	}
	for _, d := range dirs {
		err := store.List(ctx, prefix+epochName(d)+"/", "", func(e objstore.Entry) error {
			it := GCItem{Kind: "intent", Key: e.Key, Epoch: d, Reason: fmt.Sprintf("epoch %d < %d, whose sweep completed", d, swept)}
			if !opts.DryRun {
				if err := store.Delete(ctx, e.Key, objstore.Condition{}); err != nil && !errors.Is(err, objstore.ErrNotFound) {
					it.Err = err
				}
			}
			if it.Err == nil {
				c.res.Intents++
			}
			c.report(it)
			return ctx.Err()
		})
		if err != nil {
			return fmt.Errorf("listing %s of epoch %d: %w", prefix, d, err)
		}
	}
	return nil
}

// spills deletes the ETag-ABA record spills (spill.go) whose entries all
// expired, each with If-Match on the version read (counted as intents).
func (c *collector) spills(ctx context.Context) error {
	o := objects{store: c.store, lay: c.lay, now: time.Now}
	return c.store.List(ctx, c.lay.abaPrefix(), "", func(e objstore.Entry) error {
		b, info, err := o.getSmall(ctx, e.Key, objstore.GetOptions{}, maxSpillSize)
		if errors.Is(err, objstore.ErrNotFound) {
			return nil
		}
		it := GCItem{Kind: "intent", Key: e.Key, Reason: "an ETag-ABA record spill whose entries all expired"}
		switch {
		case err != nil:
			it.Err = err
		case len(parseRecord(string(b)).young(time.Now(), c.opts.SignedRequestValidity)) > 0:
			return nil
		case !c.opts.DryRun:
			err := c.store.Delete(ctx, e.Key, objstore.Condition{IfMatch: objstore.NormalizeETag(info.ETag)})
			if err != nil && !errors.Is(err, objstore.ErrNotFound) && !errors.Is(err, objstore.ErrPrecondition) {
				it.Err = err
			}
		}
		if it.Err == nil {
			c.res.Intents++
		}
		c.report(it)
		return ctx.Err()
	})
}

// tombstones deletes the tombstones older than opts.TombstonesBefore and
// SignedRequestValidity whose ETag-ABA record has expired, each by a
// DELETE conditioned on its ETag.
func (c *collector) tombstones(ctx context.Context) error {
	store, lay, opts := c.store, c.lay, c.opts
	now := opts.Now()
	err := store.List(ctx, opts.Domain+opts.Prefix, "", func(e objstore.Entry) error {
		if e.IsPrefix || e.Size != TombstoneSize || lay.isProtocolKey(e.Key) || !e.LastModified.Before(opts.TombstonesBefore) {
			return nil
		}
		if now.Before(e.LastModified.Add(opts.SignedRequestValidity)) {
			return nil
		}
		info, err := store.Stat(ctx, e.Key)
		if err != nil || !isTombstone(info) {
			return nil
		}
		if len(parseRecord(info.Meta[MetaSwept]).young(now, opts.SignedRequestValidity)) > 0 {
			return nil
		}
		if opts.DeleteIgnoresIfMatch && !opts.UnconditionalTombstones {
			c.res.TombstonesKept++
			return nil
		}
		st := stampOf(info.Meta)
		it := GCItem{Kind: "tombstone", Key: e.Key, Epoch: st.Epoch, Reason: "deleted at " + info.LastModified.UTC().Format(time.RFC3339)}
		if !opts.DryRun {
			err := store.Delete(ctx, e.Key, objstore.Condition{IfMatch: objstore.NormalizeETag(info.ETag)})
			if err != nil && !errors.Is(err, objstore.ErrPrecondition) {
				it.Err = err
			}
			if errors.Is(err, objstore.ErrPrecondition) {
				return nil // re-created meanwhile: not garbage any more
			}
		}
		if it.Err == nil {
			c.res.Tombstones++
		}
		c.report(it)
		return ctx.Err()
	})
	if err != nil {
		return fmt.Errorf("listing tombstones: %w", err)
	}
	return nil
}

// uploads aborts the incomplete uploads initiated before
// opts.UploadsBefore.
func (c *collector) uploads(ctx context.Context) error {
	store, opts := c.store, c.opts
	err := store.ListUploads(ctx, opts.Domain, func(u objstore.Upload) error {
		if !u.Initiated.Before(opts.UploadsBefore) {
			return nil
		}
		it := GCItem{Kind: "upload", Key: u.Key, Reason: "initiated at " + u.Initiated.UTC().Format(time.RFC3339) + ", upload " + u.UploadID}
		if !opts.DryRun {
			if err := store.AbortUpload(ctx, u.Key, u.UploadID); err != nil && !errors.Is(err, objstore.ErrNotFound) {
				it.Err = err
			}
		}
		if it.Err == nil {
			c.res.Uploads++
		}
		c.report(it)
		return ctx.Err()
	})
	if err != nil {
		return fmt.Errorf("listing incomplete uploads: %w", err)
	}
	return nil
}
