package lease

import (
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func heldBy(etag string, ttl time.Duration) view {
	return view{exists: true, etag: etag, rec: &record{Format: 1, ID: "other", Holder: "h", TTLMillis: ttl.Milliseconds(), Seq: 3}}
}

func TestContenderDecision(t *testing.T) {
	const ttl = 10 * time.Second
	released := heldBy("e1", ttl)
	released.rec.Released = true
	garbage := view{exists: true, etag: "g1"}
	tests := []struct {
		name     string
		obs      observation
		v        view
		ownTTL   time.Duration
		now      time.Time
		wantAct  action
		wantHow  string
		wantWait time.Duration
		wantObs  observation
	}{
		{name: "missing object is created at once", obs: observation{etag: "e0", since: at(0)}, v: view{}, now: at(time.Second),
			wantAct: actCreate, wantHow: HowCreated},
		{name: "released lease is taken at once", v: released, now: at(0),
			wantAct: actTake, wantHow: HowReleased},
		{name: "first sight of a held version starts the count", v: heldBy("e1", ttl), now: at(3 * time.Second),
			wantAct: actWait, wantWait: ttl, wantObs: observation{etag: "e1", since: at(3 * time.Second)}},
		{name: "same version seen for less than the holder's TTL waits for the rest", obs: observation{etag: "e1", since: at(0)}, v: heldBy("e1", ttl), now: at(ttl - time.Millisecond),
			wantAct: actWait, wantWait: time.Millisecond, wantObs: observation{etag: "e1", since: at(0)}},
		{name: "same version seen for the holder's full TTL is taken over", obs: observation{etag: "e1", since: at(0)}, v: heldBy("e1", ttl), now: at(ttl),
			wantAct: actTake, wantHow: HowExpired, wantObs: observation{etag: "e1", since: at(0)}},
		{name: "a renewal (new ETag) restarts the count", obs: observation{etag: "e1", since: at(0)}, v: heldBy("e2", ttl), now: at(2 * ttl),
			wantAct: actWait, wantWait: ttl, wantObs: observation{etag: "e2", since: at(2 * ttl)}},
		{name: "the holder's TTL counts, not the contender's shorter one", obs: observation{etag: "e1", since: at(0)}, v: heldBy("e1", ttl), ownTTL: time.Second, now: at(5 * time.Second),
			wantAct: actWait, wantWait: 5 * time.Second, wantObs: observation{etag: "e1", since: at(0)}},
		{name: "the holder's TTL counts, not the contender's longer one", obs: observation{etag: "e1", since: at(0)}, v: heldBy("e1", ttl), ownTTL: time.Hour, now: at(ttl),
			wantAct: actTake, wantHow: HowExpired, wantObs: observation{etag: "e1", since: at(0)}},
		{name: "an unreadable object expires after the contender's TTL", obs: observation{etag: "g1", since: at(0)}, v: garbage, ownTTL: 4 * time.Second, now: at(4 * time.Second),
			wantAct: actTake, wantHow: HowExpired, wantObs: observation{etag: "g1", since: at(0)}},
		{name: "an unreadable object is waited on before that", obs: observation{etag: "g1", since: at(0)}, v: garbage, ownTTL: 4 * time.Second, now: at(time.Second),
			wantAct: actWait, wantWait: 3 * time.Second, wantObs: observation{etag: "g1", since: at(0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs := tt.obs
			own := tt.ownTTL
			if own == 0 {
				own = ttl
			}
			d := decide(&obs, tt.v, own, tt.now)
			if d.act != tt.wantAct || d.how != tt.wantHow || d.wait != tt.wantWait {
				t.Errorf("decide = %+v, want act %v how %q wait %v", d, tt.wantAct, tt.wantHow, tt.wantWait)
			}
			if obs != tt.wantObs {
				t.Errorf("observation = %+v, want %+v", obs, tt.wantObs)
			}
		})
	}
}

func TestHolderTiming(t *testing.T) {
	const ttl = 15 * time.Second
	basis := at(0)
	tests := []struct {
		name       string
		retryAt    time.Time
		wantAt     time.Time
		wantGiveUp bool
	}{
		{name: "renews a third of the TTL after the last successful write started", wantAt: at(5 * time.Second)},
		{name: "retries when asked", retryAt: at(7 * time.Second), wantAt: at(7 * time.Second)},
		{name: "a retry past the deadline gives up at the deadline", retryAt: at(13 * time.Second), wantAt: at(12 * time.Second), wantGiveUp: true},
		{name: "a retry exactly at the deadline gives up", retryAt: at(12 * time.Second), wantAt: at(12 * time.Second), wantGiveUp: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, giveUp := nextWake(basis, ttl, tt.retryAt)
			if !got.Equal(tt.wantAt) || giveUp != tt.wantGiveUp {
				t.Errorf("nextWake = %v, %v; want %v, %v", got.Sub(t0), giveUp, tt.wantAt.Sub(t0), tt.wantGiveUp)
			}
		})
	}
}

func TestHolderGivesUpBeforeAnyContenderMayTakeOver(t *testing.T) {
	// The holder's write starts at s and lands at some point; a contender
	// first sees it when its read returns, at f >= s. It may take over at
	// f + TTL. The holder must count itself lost strictly before, for every
	// TTL, even when f == s.
	for _, ttl := range []time.Duration{MinTTL, time.Second, 2 * time.Second, DefaultTTL, time.Hour} {
		s := at(0)
		var obs observation
		v := heldBy("e", ttl)
		f := s // the most unfavourable case
		if d := decide(&obs, v, ttl, f); d.act != actWait {
			t.Fatalf("ttl %v: contender acts at first sight: %+v", ttl, d)
		}
		takeover := f.Add(ttl)
		if d := decide(&obs, v, ttl, takeover); d.act != actTake {
			t.Fatalf("ttl %v: contender does not take over after a full TTL: %+v", ttl, d)
		}
		if held(s, ttl, takeover.Add(-time.Nanosecond)) {
			t.Errorf("ttl %v: holder still counts itself holding just before the earliest takeover", ttl)
		}
		if !held(s, ttl, s.Add(ttl/3)) {
			t.Errorf("ttl %v: holder counts itself lost at its first renewal", ttl)
		}
		if m := takeover.Sub(holdDeadline(s, ttl)); m < ttl/5 {
			t.Errorf("ttl %v: safety margin %v, want at least %v", ttl, m, ttl/5)
		}
	}
}

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"leader", true}, {"db-primary.v2_A", true}, {"", false}, {".", false}, {"..", false},
		{"a/b", false}, {"with space", false}, {"ünïcode", false}, {string(make([]byte, 129)), false},
	}
	for _, tt := range tests {
		if err := ValidName(tt.name); (err == nil) != tt.ok {
			t.Errorf("ValidName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}
