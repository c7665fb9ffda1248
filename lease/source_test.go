package lease

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/fencefs/fencefs/fencing"
)

func TestCoordinatorTokensAreOneToTheLargest(t *testing.T) {
	tests := []struct {
		n    int64
		want uint64
		ok   bool
	}{
		{math.MinInt64, 0, false},
		{-1, 0, false},
		{0, 0, false}, // would be auto
		{1, 1, true},
		{math.MaxInt64, fencing.MaxToken, true},
	}
	for _, src := range []TokenSource{EtcdSource, ZooKeeperSource} {
		for _, tc := range tests {
			got, err := coordinatorToken(src, tc.n)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("coordinatorToken(%s, %d) = %d, %v; want %d, ok=%v", src.Token, tc.n, got, err, tc.want, tc.ok)
			}
			if err != nil && (!errors.Is(err, fencing.ErrBadToken) || !strings.Contains(err.Error(), src.Token)) {
				t.Errorf("coordinatorToken(%s, %d) error %v: want ErrBadToken naming the source", src.Token, tc.n, err)
			}
		}
	}
}
