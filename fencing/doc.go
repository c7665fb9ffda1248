// Package fencing is fencefs's single door for mutations of the bucket: it
// binds a fencing token (a leader epoch), fences writers whose epoch is
// older, and makes every Put, Copy and Delete conditional on both the
// object's base version and a validated epoch. docs/DESIGN.md §4–§9
// describes the protocol and its argument; this documentation states what
// it guarantees and how.
//
// # Objects
//
// Protocol objects live under <domain>.fencefs/ (ProtocolDir), hidden from
// the filesystem and never writable through Guard:
//
//	epoch                 the register: JSON {format, epoch, holder, claim_id,
//	                      prev_epoch, claimed_at}; written with If-Match only
//	                      (If-None-Match:* the first time); never deleted
//	epochs/<20-digit N>   create-once reservation of epoch N (an audit trail;
//	                      no number is granted twice even if the register is
//	                      reset)
//	intents/<N>/<id>      "epoch N may be committing to key K on base B":
//	                      a strict Guard's journal (one per binding, every
//	                      key it may be committing to, rewritten with
//	                      If-Match; sealed by the next binder), or a sweep's
//	                      own intent (written before its validation)
//	swept/<N>             the takeover sweep of epoch N completed (gc uses it)
//	tombstones/<N>-<claim> the ledger of binding (N, claim): the tombstones
//	                      it knows of and has not removed yet (see
//	                      "Tombstones"); adopted and deleted by the next
//	                      binder
//
// Every committed object carries the stamps MetaEpoch, MetaHolder and
// MetaWID (a write id unique per logical write, reused across retries), and
// while a takeover sweep's record is young, MetaSwept (see "ETag ABA").
//
// # Binding
//
// Bind(N) reads the register; refuses N if the register is newer, or holds
// N for another holder (ErrBadToken, saying who holds what); creates
// epochs/N with If-None-Match:* (someone else's reservation: refused);
// seals the intent journals of older epochs (so that their writers are
// fenced from the moment the raise is visible); raises the register with
// If-Match on the ETag read (a lost race is re-read and re-decided; a lost
// response is recognised by the claim id);
// runs the takeover sweep; in strict mode creates its intent journal; and
// validates once more; only then is the Guard active. Bind(0) has
// the register issue one above every epoch and reservation seen. The
// holder is Config.Holder (a stable name: a restart with the same name and
// token reclaims the epoch and fences the previous instance) or a random
// per-instance id.
//
// The takeover sweep lists the intents of every older epoch (and of earlier
// instances of this one), seals every journal among them (a
// compare-and-swap marking it sealed, repeated until it lands between two
// writes of its writer), writes its own intent naming the keys and bases,
// validates, and then, for each key, changes its ETag to one no older writer
// can hold (server-side multipart copy onto itself in another shape, or a
// conditional re-PUT when only the plain shape is fresh), or creates a
// tombstone if the key is absent; then deletes the intents. Binding sweeps
// whatever the binder's mode, so a strict writer is protected even when the
// next leader runs in fast mode. A sweep interrupted half-way (crash, lost
// storage) is finished by the next Bind of the same token or by any newer
// epoch, ending in the same state: every key named by an older intent has a
// fresh ETag or a tombstone, and no older intent remains.
//
// # Every mutation (strict)
//
//  1. if the Guard knows of a newer epoch: ErrFenced, no round trip;
//  2. the intent: the binding's journal names the key and base (written
//     once per key and base, right before the commit and never earlier, so
//     that a journal names only commits that may be in flight; concurrent
//     writes share one journal write; several coming mutations at once with
//     Reserve, as a rename does). The journal write carries If-Match
//     on the ETag of the Guard's previous write;
//  3. validation: that journal write succeeding is the validation (see
//     below; fast mode instead reads the register with If-None-Match on the
//     cached ETag, normally a 304). A sealed or removed journal (or, in fast
//     mode, a newer register) latches the Guard fenced; a journal that
//     cannot be written (a register that cannot be read) is ErrUnverified
//     (fail closed: nothing is written);
//  4. the commit, conditioned on the key itself: If-Match: base, or
//     If-None-Match:* for a create;
//  5. a refused commit is resolved with a HEAD: our write id there means our
//     own retried write landed (success, never "fenced" or "stale"); a stamp
//     of a newer epoch means fenced; else the register is validated once
//     more (fenced) or the answer is ErrStale. A commit whose outcome the
//     store reports unknown (ErrUnavailable after its retries) is resolved
//     the same way once: our write id there is success, else the outcome
//     stays unknown (see Retries);
//  6. the entry leaves the journal (batched, with the next write or a trim)
//     once no commit needs it; never after an unknown outcome: the next
//     sweep must see it.
//
// Why it is exact: B binds N+1 by sealing every older journal it lists or
// reads by name (a read, then a write with If-Match on the ETag read,
// retried until no write of the journal's owner came between; the owner
// stops writing once refused), raising the register (t1), then sealing
// again (t2) for journals created meanwhile. A journal is named after its
// binding, and B reads by name those of the binding in the register it
// replaces and of the register's Unsealed bindings (a listing may miss a
// journal that is being rewritten; see claimRef). A (epoch N) created its
// journal during its own binding before the validation that made it
// active, so at t2 B reads it unless A's binding validated after t1, saw
// N+1, and A never became active, or a completed sweep sealed it and swept
// what it named already. If A's journal
// write naming key K succeeded, it happened before B's seal, so the sealed
// content names K and B's sweep changes K's version: A's commit, whenever
// it arrives, fails its precondition, unless it landed before the sweep,
// i.e. before B was active. If it came after the seal, its precondition
// fails and A is fenced: A never commits. Every base a commit is
// conditioned on is named by its intent before its commit (a sweep's own
// rewrites included: the sweep writes a plain intent, then validates by
// register, which the same argument with t3 = that write covers), so the
// intents name exactly the bases an older writer may still use.
//
// # Modes and their guarantees
//
//   - strict (default): no mutation of an epoch-N writer lands after a
//     writer of a newer epoch is active, whatever the pauses (GC, SIGSTOP,
//     VM freeze, partitions) between any two steps. Cost: one journal write
//     (a conditional PUT) before a commit, shared by concurrent commits.
//     Requires strongly consistent
//     LIST and atomic conditional PUT/Complete (checked by the probe).
//   - fast: no intents: validate, then conditional commit (two round trips).
//     A writer paused between a validation and its commit can still land
//     that one commit after a newer epoch became active, if the key is
//     still at the writer's base (the new epoch has not changed it; for a
//     create: the key is still absent). On a key the new epoch did change,
//     the commit is refused (ErrFenced). Validation, latching, stamps,
//     lost-response resolution and the ABA record are as in strict.
//   - off: no tokens, no register, no stamps of epochs: a plain S3
//     filesystem. Commits are still conditioned on the base version the
//     caller read (ErrStale on a concurrent change), and the write id still
//     resolves lost responses. Bind fails with ErrBadToken.
//
// # ETag ABA
//
// An ETag is a hash of the content, so a new writer storing the exact bytes
// of an old writer's base would restore that base's ETag and let a delayed
// old commit through. The sweep records in the key's metadata (MetaSwept)
// the bases older writers may hold, with the time; every commit carries the
// record forward while an entry is younger than SignedRequestValidity
// (default 15 min, the longest a signed request stays valid), and while it
// is young a commit whose ETag would equal a recorded base uses another
// upload shape (plain ↔ multipart, or another part count; the ETag is
// predicted with objstore.ETagOf before uploading). A delete of such a key
// writes a tombstone instead (a DELETE would drop the record with the
// object). Tombstones contain the epoch and write id, so no two share an
// ETag. The window: an old writer paused between its validation and the
// signing of its commit for longer than SignedRequestValidity, whose base
// bytes then reappear in the same shape, is not covered; raise the validity
// if such pauses are possible. When both shapes of a small object (≤ 5 MiB,
// which has only the plain and the one-part shape) are held as bases, the
// commit or sweep waits for the older record entry to expire.
//
// # Directory markers
//
// A directory marker ("dir/", written by mkdir) is an empty object: its
// ETag is that of no bytes and cannot be changed by a sweep, and stores that
// keep directories as directories (the Versity gateway) refuse any body or
// multipart upload at such a key. The sweep therefore leaves markers named by
// older intents as they are. What stays open, in strict mode as in fast: a
// writer paused between its validation and its commit can still land one
// mkdir of a still-absent directory or one rmdir of a still-empty,
// unchanged marker after the takeover. Neither touches file data (rmdir of
// a marker leaves any files under the prefix in place; the directory stays
// visible as an implicit one). File creates, overwrites, deletes, renames
// and metadata changes keep the full strict guarantee.
//
// # Tombstones
//
// A tombstone is an object with MetaTombstone "1" and a body of exactly
// TombstoneSize bytes; readers treat it as absent (a listing without
// metadata tells sizes only: entries of that size need a HEAD). Deletes write
// tombstones when Config.TombstoneDeletes is set (for backends whose DELETE
// ignores If-Match, where an unconditional DELETE cannot be fenced), and
// sweeps write them at absent keys. A create over a tombstone is an
// If-Match on its ETag; Put does that by itself when the caller saw the key
// absent.
//
// Removal. A tombstone is needed until no request an older writer may
// still send can use the absence it hides: SignedRequestValidity after it
// was written (and after every entry of the ABA record it carries). The
// active Guard removes the tombstones it knows of by itself once due
// (Config.ReapTombstones; a background loop bound to the Guard, started at
// the first activation, idle while the Guard is not active, stopped by
// Close): those its sweeps and deletes wrote (a sweep's rewrite of an
// existing tombstone included) and those in the ledgers of older bindings
// (tombstones/<N>-<claim>), which it adopts once per binding — one LIST of
// that small prefix, never of the bucket. Its own ledger is rewritten at
// most once a second while its set changes, and deleted when the set is
// empty, so the tombstones of a mount that is killed are removed by the
// next one. Where DELETE honours If-Match (ReapAuto, the default) each goes
// by a DELETE conditioned on its ETag: exact, a newer write of the key is
// never deleted. Where it does not (TombstoneDeletes), ReapAuto has the
// store remove them: a bucket lifecycle rule installed before the first
// tombstone expires objects tagged fencefs-tombstone=1, which only
// tombstones carry, and the store checks the current version under the
// object's lock before it expires one, so that too is exact (tombstone.go;
// the tombstones go one to two days after they were written; without the
// permission to install the rule they wait for gc). ReapAlways removes them
// after a validation of the epoch with a
// HEAD (still this tombstone?) and an unconditional DELETE, while this
// Guard's own mutations of the key wait. That leaves a window: a write of
// the key landing between the HEAD and the DELETE is deleted with the
// tombstone — a plain S3 client's, or a newer leader's while this Guard is
// paused after its validation. Either way the removal has the ABA window's
// limit: an older writer paused between its validation and the sending of
// its create for longer than SignedRequestValidity can create the key once
// its tombstone is gone (raise the validity if such pauses are possible).
// Not removed by a Guard, and left to gc (see GC): tombstones written in the
// second before a crash (not yet in the ledger), those of a binding fenced
// before they were due (it does nothing once not active), more than 10000
// per Guard, and those written before ledgers existed. Metrics:
// fencefs_fencing_tombstones (known, not yet removed),
// fencefs_fencing_tombstone_oldest_age_seconds and
// fencefs_fencing_tombstones_removed_total.
//
// # Errors
//
// Errors returned by Guard wrap one sentinel, with a message naming the
// key, the epochs and the holders: ErrFenced (EROFS; the Guard stays
// fenced until bound again), ErrStale (ESTALE), ErrUnverified (EIO: the
// register, an intent or the sweep could not be read or written; the
// storage error is wrapped too), ErrReadOnly (EROFS: no token), ErrBadToken
// (EINVAL), or a storage sentinel (objstore.ErrUnavailable after retries
// means the outcome is unknown).
//
// # Retries
//
// Transient storage failures (409, 5xx, 499, timeouts, resets) are retried
// in one place: the store (objstore/s3), which alone knows whether an
// attempt may have been applied. Guard retries none of them. Each mutation
// (Put, Copy, Delete) runs under one retry deadline, Config.OpTimeout from
// its start (objstore.WithRetryDeadline): every request of its protocol —
// the journal write, the HEADs, the commit — retries only until then, so a
// mutation that cannot reach the storage fails within about that time,
// never a multiple of it. What Guard does after the store gives up is
// resolution, not retry: a journal write or a commit whose outcome is
// unknown is read back once (our write id or journal sequence there is
// success); otherwise the mutation fails (EIO), its intent left for the
// next sweep. Guard repeats a step only for protocol reasons: a lost race
// on the register or a journal (re-read and re-decide), a rebase over a
// tombstone.
//
// # Failpoints
//
// Config.Hooks pause a writer after its intent, after its validation, or
// abort a sweep before a key; FailpointsFromEnv builds them from
// $FENCEFS_FAILPOINTS for the real binary.
//
// # Concurrency
//
// A Guard is safe for concurrent use; see Guard for its locks.
package fencing
