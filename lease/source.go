package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencefs/fencefs/fencing"
	"github.com/fencefs/fencefs/objstore"
)

// ErrTokenSource: the coordinator's number that would be the token (an
// etcd revision, a ZooKeeper zxid) is not above the bucket's epoch,
// because the fence domain was used with another token source (auto,
// --token, the S3 lease, another etcd cluster or ZooKeeper ensemble).
var ErrTokenSource = errors.New("token source mismatch")

// coordinatorToken turns a coordinator's number (an etcd create revision, a
// ZooKeeper creation zxid: both int64s, so never above fencing.MaxToken)
// into a fencing token. A number below 1 is refused: as a token, 0 would
// mean auto (the register's next epoch, not the coordinator's order) and a
// negative one would wrap to a huge token.
func coordinatorToken(src TokenSource, n int64) (uint64, error) {
	if n < 1 {
		return 0, fmt.Errorf("%w: %s %d is not a token (accepted: 1 to %d)", fencing.ErrBadToken, src.Token, n, fencing.MaxToken)
	}
	return uint64(n), nil
}

// TokenSource names a coordinator's tokens in ErrTokenSource errors.
type TokenSource struct {
	Token  string // what a token is: "the etcd revision"
	Others string // another source of the same kind: "another etcd cluster"
	Flag   string // the flag of fencefs run that uses it: "--etcd"
}

// EtcdSource names etcd's revisions in ErrTokenSource errors.
var EtcdSource = TokenSource{Token: "the etcd revision", Others: "another etcd cluster", Flag: "--etcd"}

// CheckTokenSource refuses (ErrTokenSource) an etcd token that is not
// above the epoch of the fence domain's register; see CheckTokenFrom.
func CheckTokenSource(ctx context.Context, store objstore.Store, domain string, token uint64) error {
	return CheckTokenFrom(ctx, store, domain, EtcdSource, token)
}

// CheckTokenFrom refuses (ErrTokenSource) a token of src that is not above
// the epoch of the fence domain's register: the domain was then used with
// another token source (auto, explicit tokens, the S3 lease, or another
// cluster), and binding would fail, or worse, not be ordered with that
// source's tokens. Tokens of one fence domain must come from one source. A
// missing register passes.
func CheckTokenFrom(ctx context.Context, store objstore.Store, domain string, src TokenSource, token uint64) error {
	reg, _, err := fencing.ReadRegister(ctx, store, domain)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("reading the epoch register: %w", err)
	case reg.Epoch >= token:
		return fmt.Errorf("%w: %s %d (this leader's token) is not above the bucket's epoch %d: the fence domain was used with another token source (auto, --token, the S3 lease or %s); use one token source per fence domain: see `fencefs epoch show`, and run %s on a fresh bucket or a prefix domain (--fence-domain prefix)",
			ErrTokenSource, src.Token, token, reg.Epoch, src.Others, src.Flag)
	}
	return nil
}
