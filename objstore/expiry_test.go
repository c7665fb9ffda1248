package objstore

import (
	"testing"
	"time"
)

func TestTagExpiryIsDueAtTheMidnightAfterItsDays(t *testing.T) {
	for _, tc := range []struct {
		written string
		days    int
		want    string
	}{
		{"2020-05-21T13:42:50Z", 1, "2020-05-23T00:00:00Z"}, // MinIO's ExpectedExpiryTime example
		{"2020-05-21T00:00:00Z", 1, "2020-05-23T00:00:00Z"},
		{"2020-05-21T23:59:59Z", 2, "2020-05-24T00:00:00Z"},
		{"2020-05-21T15:00:00+02:00", 1, "2020-05-23T00:00:00Z"},
	} {
		w, _ := time.Parse(time.RFC3339, tc.written)
		if got := (TagExpiry{Days: tc.days}).Due(w).Format(time.RFC3339); got != tc.want {
			t.Errorf("written %s, %d days: due %s, want %s", tc.written, tc.days, got, tc.want)
		}
	}
}
