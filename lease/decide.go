package lease

import "time"

// This file holds the timing rules as pure functions of the caller's
// monotonic clock readings: no I/O, no goroutines. See "Expiry without
// synchronized clocks" in the package documentation for why they are safe.

// margin is how much earlier than a contender may take over the holder
// gives the lease up.
func margin(ttl time.Duration) time.Duration { return ttl / 5 }

// holdDeadline returns the instant at which the holder considers the lease
// lost, given basis, the start of its last successful write.
func holdDeadline(basis time.Time, ttl time.Duration) time.Time {
	return basis.Add(ttl - margin(ttl))
}

// renewAt returns when the holder starts its next renewal after a
// successful write started at basis.
func renewAt(basis time.Time, ttl time.Duration) time.Time { return basis.Add(ttl / 3) }

// retryDelay is the pause between failed renewal attempts.
func retryDelay(ttl time.Duration) time.Duration { return max(ttl/15, time.Millisecond) }

// defaultPoll is how often a contender re-reads a lease it waits for.
func defaultPoll(ttl time.Duration) time.Duration {
	return min(max(ttl/4, 10*time.Millisecond), time.Second)
}

// nextWake returns when the renewer should act next and whether that
// action is giving up: the next renewal (or retry, when retryAt is set), but
// never later than the deadline.
func nextWake(basis time.Time, ttl time.Duration, retryAt time.Time) (at time.Time, giveUp bool) {
	deadline := holdDeadline(basis, ttl)
	at = renewAt(basis, ttl)
	if !retryAt.IsZero() {
		at = retryAt
	}
	if !at.Before(deadline) {
		return deadline, true
	}
	return at, false
}

// held reports whether a holder whose last successful write started at
// basis may still consider the lease its own at now.
func held(basis time.Time, ttl time.Duration, now time.Time) bool {
	return now.Before(holdDeadline(basis, ttl))
}

// observation is a contender's memory of the lease version it waits on.
type observation struct {
	etag  string
	since time.Time // when a read that returned etag first came back
}

// action is what a contender does after a read.
type action int

const (
	actWait   action = iota // keep watching
	actCreate               // create the object (If-None-Match: *)
	actTake                 // write over the version read (If-Match)
)

// How an acquisition came about.
const (
	HowCreated  = "created"  // no lease object existed
	HowReleased = "released" // the previous holder released it
	HowExpired  = "expired"  // unchanged for the previous holder's TTL
)

// decision is the outcome of decide.
type decision struct {
	act action
	how string // for actCreate/actTake: HowCreated, HowReleased or HowExpired
	// wait is, for actWait, how long until the watched version would have
	// been unchanged for a full TTL.
	wait time.Duration
}

// decide is the contender's rule. obs is what it watched so far (updated
// in place); v is the read that returned at now; ownTTL stands in for the
// holder's TTL when the object is unreadable.
func decide(obs *observation, v view, ownTTL time.Duration, now time.Time) decision {
	if !v.exists {
		*obs = observation{}
		return decision{act: actCreate, how: HowCreated}
	}
	if v.rec != nil && v.rec.Released {
		*obs = observation{}
		return decision{act: actTake, how: HowReleased}
	}
	if obs.etag != v.etag {
		*obs = observation{etag: v.etag, since: now}
	}
	ttl := ownTTL
	if v.rec != nil && v.rec.ttl() > 0 {
		ttl = v.rec.ttl()
	}
	if elapsed := now.Sub(obs.since); elapsed >= ttl {
		return decision{act: actTake, how: HowExpired}
	} else {
		return decision{act: actWait, wait: ttl - elapsed}
	}
}
