// Package lease is leader election paired with fencing: a held leadership
// (lease.Leader) whose fencing token the bucket's epoch register orders.
// The default is a named lease on the S3 bucket itself, which one holder at
// a time acquires, renews and releases by conditional writes, and whose
// holder takes its token from the same register every fencefs mount uses;
// an etcd election (the leader key's create revision) and a ZooKeeper
// election (the leader znode's creation zxid) give their tokens the same
// way. The lease detects a lost leader; the token stops the lost leader's
// writes. Neither alone is enough: a leader paused by GC or a VM freeze
// does not learn in time that its lease expired, and a token without a
// lease has no one to hand it out. This is the "robust scheme"
// (Kleppmann's lease + fencing token); the S3 lease needs nothing but the
// bucket.
//
// # Objects
//
// The lease named N lives at <domain>.fencefs/leases/N (domain is the fence
// domain prefix, "" for the whole bucket), next to the epoch register. Its
// body is JSON:
//
//	{"format":1, "name":"N", "holder":"host:pid", "id":"<random>",
//	 "token":17, "prev_token":16, "ttl_ms":15000, "renewed_seq":42,
//	 "renewed_at":"…", "acquired_at":"…", "released":false}
//
// Every change is a conditional PUT: If-None-Match:* to create the object,
// If-Match on the ETag just read to take it over, renew it or release it.
// renewed_seq grows by one on every write (also across holders) and id is
// random per acquisition, so no two versions of the object have the same
// body, hence the same ETag: an If-Match can never match a stale version
// (no ETag ABA). The object is never deleted (some backends ignore
// conditions on DELETE); a release is a write with "released":true.
// renewed_at and acquired_at are informational only: no decision reads
// another machine's clock.
//
// # Expiry without synchronized clocks
//
// Only durations measured on one machine's monotonic clock are compared:
//
//   - The holder keeps the start time s of its last successful write (the
//     earliest attempt that could have produced the version now current).
//     It renews at s + TTL/3 (retrying every TTL/15 on failure) and
//     considers the lease LOST at s + TTL − TTL/5, whether or not anyone
//     took it. A refused renewal (the object changed: someone took it over)
//     is a loss at once.
//   - A contender reads the object; if it is missing it creates it; if it
//     is released it takes it at once (If-Match on that version); otherwise
//     it remembers the ETag and the time f at which the read RETURNED, and
//     takes the lease over (If-Match on that ETag) only after seeing the
//     very same ETag, unchanged, for the holder's full TTL (the ttl_ms in
//     the object) of its own clock. Any change of the ETag restarts the
//     count.
//
// The version the contender watches was written after the holder started
// writing it (s ≤ landing ≤ f), so the takeover lands at or after
// f + TTL ≥ s + TTL, later than the holder's own deadline s + TTL − TTL/5.
// The margin absorbs clock rate differences (NTP slews rates by at most
// 0.05%; TTL/5 is 20%). So, on two machines whose clocks run at roughly the
// same rate, the holder always gives the lease up before anyone can take it.
// Within one process (the tests) this is exact: Held is false before a
// contender's Acquire can return.
//
// That is the lease's promise, and it is not enough on its own: a holder
// frozen for longer than the TTL cannot act on its own deadline. Hence the
// token.
//
// # Fencing tokens
//
// After the lease is held, Acquire binds a fencing token: Options.Guard
// (fencing.Guard.Bind(ctx, 0), "auto": the register's next epoch, with the
// takeover sweep) or Options.Bind (any function; `fencefs run` sets the
// mount's root xattr user.fencefs.token to "auto"), and records the token in
// the lease object. Binding AFTER holding the lease means a later holder
// always binds a later epoch than an earlier one, so the earlier holder's
// writes are refused by the storage itself (fencing.ErrFenced, EROFS on a
// mount) even if its process was frozen and never noticed the loss. Tokens
// issued through leases and tokens given explicitly (--token N) share the one
// register, hence one monotonic sequence. prev_token carries the highest
// token recorded through the lease across holders that bound none, and
// Acquire refuses (ErrToken) a bound token not above it.
//
// Residual hazard: a bind that was started while the lease was held and is
// delayed in the network beyond the loss can still complete and bind an
// epoch newer than the next holder's, fencing the NEW holder. That costs
// liveness (the new holder's writes fail, and it must re-acquire), never
// safety: at most one token is current. Acquire cancels the bind on loss to
// keep the window small.
//
// # Go API
//
//	l, err := lease.Acquire(ctx, store, "leader", lease.Options{TTL: 15 * time.Second, Guard: guard})
//	if err != nil { … }                // ctx bounds the wait and the bind
//	defer l.Release(context.Background())
//	for {
//		select {
//		case <-l.Lost():              // renewal failed or someone took over
//			return l.Err()            // wraps ErrLost
//		case work := <-queue:
//			guard.Put(ctx, …)         // refused (ErrFenced) once a newer holder bound
//		}
//	}
//
// See Example. Renewal runs by itself (every TTL/3); Renew forces one now,
// Held asks the holder's own clock, Lost/Err report the end. Without Guard
// or Bind the lease carries no token; the caller binds one itself (after
// Acquire returns) and may record it with RecordToken.
//
// Tokens are per fence domain, not per lease: binding one for any lease
// fences every other writer of the domain. Give a domain one lease name for
// its writers (leader election); other names are fine for leases that bind
// no token.
//
// # fencefs run
//
// `fencefs run --lease NAME --mount MOUNTPOINT [--ttl 15s] [--grace 10s] --
// COMMAND ARGS…` is this package plus a process supervisor: wait for the
// lease, bind its token on the mount, run COMMAND with FENCEFS_TOKEN set,
// renew while it runs; on loss SIGTERM the command (its process group), then
// SIGKILL after the grace period, and exit 75; release on exit. Like
// `etcdctl lock` or `consul lock`, but a stalled old holder is also refused
// by the storage.
//
// # Leaders elected in etcd
//
// Campaign is the same pairing with etcd as the coordinator (the etcd
// client's concurrency package): a session whose etcd lease has the TTL,
// an election under ElectionOptions.Prefix + name, and, once won, the
// leader key's create revision as the token, bound through
// ElectionOptions.Bind. Revisions only grow within an etcd cluster and a
// later leader's key is created after an earlier leader's, so tokens grow
// with leadership. The Election is lost when the session ends (keepalives
// unanswered for the TTL, the lease expired or revoked) or the leader key
// is deleted; Release resigns. *Lease and *Election are both a Leader, so
// that `fencefs run`, its metrics and /healthz serve either. A fence domain
// takes its tokens from one source: CheckTokenSource refuses a revision
// not above the domain's epoch (ErrTokenSource). See docs/ETCD.md.
//
// CampaignZooKeeper is the same with a ZooKeeper ensemble (zk.go): the
// recipe's ephemeral sequential candidates, each watching only its
// predecessor, and the leader znode's creation zxid as the token; the
// ZooKeeperElection is lost when the session expires, when no server has
// answered for the session timeout, or when the znode is deleted; Release
// deletes the znode and the containers above it left empty.
// CheckTokenFrom(…, ZooKeeperSource, …) refuses a zxid not above the
// domain's epoch. See docs/ZOOKEEPER.md.
//
// # Leaders elected by a Kubernetes Lease
//
// CampaignKubernetes (kube.go, kubelock.go) is client-go's leader elector
// over a coordination.k8s.io/v1 Lease, through kubeLock, which writes the
// Lease as client-go's LeaseLock does and keeps the resourceVersion of the
// write that made this process the holder: that is the token. The API
// server answers a write with the etcd revision of that write; a new
// holder's acquiring write is conditional on the resourceVersion it read
// (or creates the Lease anew), so it lands after every write of every
// earlier holder and its revision is above their tokens. resourceVersions
// are comparable integers by contract since Kubernetes 1.35 (KEP-5504); kubeToken
// still refuses one that is not a positive decimal int64 (a storage that
// is not etcd), and CheckTokenFrom(…, KubernetesSource(ns, name), …)
// refuses one not above the domain's epoch (another cluster, an etcd
// restored from a backup). leaseTransitions is not used: it restarts when
// the Lease is recreated. The leadership is lost when no renewal landed
// within 4/5 of the TTL, when another holder has the Lease, or when it is
// deleted; Release writes it free. A holder that is not a fencefs (no
// "fencefs:" prefix) is logged: it takes part in the election, but is not
// fenced. See docs/DESIGN.md §14.
//
// # Concurrency
//
// A Lease is safe for concurrent use. One goroutine per held lease renews it
// until Release or loss. Lock order: Lease.wmu (serializes writes of the
// lease object, held across I/O) before Lease.mu (state, never held across
// I/O).
package lease
