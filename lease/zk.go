package lease

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"
)

// Leader election in ZooKeeper, the recipe of ZooKeeper's documentation:
// each candidate creates an ephemeral sequential znode under the
// election's path; the lowest sequence leads; every other candidate
// watches only the znode just before its own (no herd when the leader
// goes), and re-checks when it goes. The token is the leader znode's
// creation zxid (Czxid): zxids are ZooKeeper's total order of
// transactions, never reused, their high 32 bits the epoch of the
// ZooKeeper leader that committed them (a new ZooKeeper leader starts a
// higher epoch), so a znode created later has a greater Czxid, across
// ZooKeeper leader changes too; and a candidate leads only once every
// candidate created before it is gone, so each fencefs leader's token is
// above every earlier leader's.
//
// The missing parent znodes are created as container znodes (ZooKeeper
// 3.5.3 or later), which the server deletes once their last child is gone
// (within its container check interval, a minute by default); a clean
// Release deletes its own znode and, at once, the containers above it
// that are left empty, so nothing stays behind. Release tells these by
// their data (zkContainerMark): a znode an operator made is never deleted.

// DefaultZooKeeperPrefix is the path under which the election NAME lives
// (DefaultZooKeeperPrefix + "/" + NAME) when ZooKeeperOptions.Prefix is
// empty.
const DefaultZooKeeperPrefix = "/fencefs/elections"

// zkCandidate is the name the candidates' znodes are created with (the
// client prefixes it with "_c_GUID-", the server appends the sequence).
const zkCandidate = "n_"

// zkContainerMark is the data of the container znodes fencefs creates:
// Release deletes an empty parent only if it holds this (ZooKeeper does not
// tell clients which znodes are containers).
var zkContainerMark = []byte("fencefs: election container, deleted when empty")

// ZooKeeperSource names ZooKeeper's zxids in ErrTokenSource errors.
var ZooKeeperSource = TokenSource{Token: "the ZooKeeper zxid", Others: "another ZooKeeper ensemble", Flag: "--zookeeper"}

// ZooKeeperOptions configures CampaignZooKeeper.
type ZooKeeperOptions struct {
	// Servers are the ensemble's client addresses, HOST:PORT. Required.
	Servers []string
	// SessionTimeout is the session timeout asked for (the servers bound
	// it by their minSessionTimeout and maxSessionTimeout, by default 2
	// and 20 ticks). Zero means DefaultTTL.
	SessionTimeout time.Duration
	// DialTimeout bounds the wait for a first session; zero means 5 s.
	DialTimeout time.Duration
	// Prefix is the path of the elections ("" means DefaultZooKeeperPrefix):
	// the election NAME lives at Prefix + "/" + NAME.
	Prefix string
	// Digest is "user:password" for ZooKeeper's digest scheme, or empty.
	// With it, the znodes created are readable and writable by that user
	// only (ACL "auth"); without, by anyone (ACL "world:anyone").
	Digest string
	// Holder is the candidate znode's data (for people reading
	// ZooKeeper); empty means "hostname:pid".
	Holder string
	// Bind binds token, the leader znode's Czxid, once elected (as
	// ElectionOptions.Bind). Required.
	Bind func(ctx context.Context, token uint64) error
	// Logger receives progress and warnings; nil discards them.
	Logger *slog.Logger
	// Registerer receives the fencefs_lease_* metrics, labelled by
	// election name; nil records none.
	Registerer prometheus.Registerer
}

// ZooKeeperElection is a ZooKeeper election won: the leadership lasts as
// long as the session and the leader znode. Create with
// CampaignZooKeeper; end with Release. Safe for concurrent use.
type ZooKeeperElection struct {
	holding // Name, Lost, Err
	sess    *zkSession
	dir     string // the election's path
	node    string // the leader znode's path
	token   uint64
	acl     []zk.ACL
	digest  string // "user:password" or "", for naming the user in errors

	watcher // the loss watch, Release once
}

var _ Leader = (*ZooKeeperElection)(nil)

// CampaignZooKeeper connects to the ensemble, waits until it wins the
// election name (or ctx is done), then binds the leader znode's Czxid as
// the fencing token through opts.Bind. ctx bounds the wait and the bind,
// not the leadership: it lasts until Release or the session's end.
//
// Errors: ErrBadName; a server that cannot be reached within the dial
// timeout; a path ZooKeeper refuses (no access: NoAuth; under an
// ephemeral znode); ctx's error while waiting; the bind's error (the
// election is then resigned).
func CampaignZooKeeper(ctx context.Context, name string, opts ZooKeeperOptions) (*ZooKeeperElection, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if opts.Bind == nil || len(opts.Servers) == 0 {
		return nil, errors.New("lease: CampaignZooKeeper needs ZooKeeperOptions.Bind and Servers")
	}
	timeout := cmpOr(opts.SessionTimeout, DefaultTTL)
	dial := cmpOr(opts.DialTimeout, 5*time.Second)
	prefix := strings.TrimSuffix(cmpOr(opts.Prefix, DefaultZooKeeperPrefix), "/")
	holder := cmpOr(opts.Holder, defaultHolder())
	acl := zk.WorldACL(zk.PermAll)
	if opts.Digest != "" {
		acl = zk.AuthACL(zk.PermAll)
	}
	log := orDiscard(opts.Logger).With("election", name)
	met := newMetrics(opts.Registerer, name)

	e := &ZooKeeperElection{dir: prefix + "/" + name, acl: acl, digest: opts.Digest}
	if err := e.campaign(ctx, opts.Servers, timeout, dial, opts.Digest, holder, log); err != nil {
		met.ended(false)
		return nil, err
	}
	e.start(name, log, met, HowElected)
	e.sess.count(met)
	e.startWatch(e.watch)
	log.Info("elected", "token", e.token, "znode", e.node, "session_timeout", e.sess.sessionTimeout())
	if err := bindElected(ctx, e, &e.holding, e.token, opts.Bind, timeout); err != nil {
		return nil, err
	}
	return e, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// campaign wins the election in a new session, starting over with a new
// session when the one campaigning ends before winning (its znode is
// gone: a "win" then would not be a leadership).
func (e *ZooKeeperElection) campaign(ctx context.Context, servers []string, timeout, dial time.Duration, digest, holder string, log *slog.Logger) error {
	for {
		sess, err := dialZooKeeper(ctx, servers, timeout, dial, digest, log)
		if err != nil {
			return err
		}
		log.Info("campaigning", "path", e.dir, "servers", sess.servers, "session_timeout", sess.sessionTimeout())
		e.sess = sess
		err = e.run(ctx, holder)
		if err == nil {
			return nil
		}
		e.withdraw()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch {
		case errors.Is(err, errStartOver):
			log.Warn("starting over with a new ZooKeeper session", "reason", err)
		case errors.Is(err, errSessionEnded):
			log.Warn("the ZooKeeper session ended while campaigning; starting over with a new one", "reason", sess.err())
		default:
			return err
		}
	}
}

// errSessionEnded: the session campaigning ended. errStartOver: the
// campaign cannot tell whether its candidate znode was created.
var (
	errSessionEnded = errors.New("the ZooKeeper session ended")
	errStartOver    = errors.New("the connection to ZooKeeper broke while creating the candidate znode")
)

// run creates this candidate's znode and waits until it is the lowest.
func (e *ZooKeeperElection) run(ctx context.Context, holder string) error {
	conn := e.sess.conn
	var node string
	for attempt := 0; ; attempt++ {
		if err := e.ensurePath(ctx); err != nil {
			return err
		}
		p, err := zkCall(ctx, func() (string, error) {
			return conn.CreateProtectedEphemeralSequential(e.dir+"/"+zkCandidate, []byte(holder), e.acl)
		})
		// A concurrent Release may delete the emptied parents between
		// ensurePath and the create: make them again.
		if errors.Is(err, zk.ErrNoNode) && attempt < 10 {
			continue
		}
		if zkTransient(err) {
			// A second create could leave a candidate of this session
			// ahead of this one: start over in a new session instead.
			return errStartOver
		}
		if err != nil {
			return e.explain("creating a candidate znode under", e.dir, err)
		}
		node = p
		break
	}
	e.node = node
	me := path.Base(node)
	for {
		kids, err := zkRetry(ctx, e.sess, func() ([]string, error) {
			kids, _, err := conn.Children(e.dir)
			return kids, err
		})
		if err != nil {
			return e.explain("listing the candidates under", e.dir, err)
		}
		pred, found := predecessor(kids, me)
		if !found {
			return errSessionEnded // our ephemeral znode is gone
		}
		if pred == "" {
			return e.readToken(ctx)
		}
		if err := e.waitGone(ctx, e.dir+"/"+pred); err != nil {
			return err
		}
	}
}

// readToken reads the leader znode's Czxid as the token.
func (e *ZooKeeperElection) readToken(ctx context.Context) error {
	st, err := zkRetry(ctx, e.sess, func() (*zk.Stat, error) {
		ok, st, err := e.sess.conn.Exists(e.node)
		if err == nil && !ok {
			err = errSessionEnded
		}
		return st, err
	})
	if err != nil {
		return e.explain("reading", e.node, err)
	}
	if !e.sess.alive() {
		return errSessionEnded
	}
	tok, err := coordinatorToken(ZooKeeperSource, st.Czxid)
	if err != nil {
		return err
	}
	e.token = tok
	return nil
}

// waitGone waits until the znode at p is deleted (or the session ends).
func (e *ZooKeeperElection) waitGone(ctx context.Context, p string) error {
	type res struct {
		ok bool
		ch <-chan zk.Event
	}
	r, err := zkRetry(ctx, e.sess, func() (res, error) {
		ok, _, ch, err := e.sess.conn.ExistsW(p)
		return res{ok, ch}, err
	})
	if err != nil {
		return e.explain("watching", p, err)
	}
	if !r.ok {
		return nil
	}
	e.sess.log.Debug("waiting for the candidate before this one", "znode", p)
	select {
	case <-r.ch: // deleted, or the watch ended: look again
		return nil
	case <-e.sess.ended:
		return errSessionEnded
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ensurePath creates the missing znodes of the election's path, as
// containers.
func (e *ZooKeeperElection) ensurePath(ctx context.Context) error {
	var missing []string
	for p := e.dir; p != "/"; p = path.Dir(p) {
		ok, err := zkRetry(ctx, e.sess, func() (bool, error) {
			ok, _, err := e.sess.conn.Exists(p)
			return ok, err
		})
		if err != nil {
			return e.explain("reading", p, err)
		}
		if ok {
			break
		}
		missing = append(missing, p)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		p := missing[i]
		_, err := zkRetry(ctx, e.sess, func() (string, error) {
			return e.sess.conn.CreateContainer(p, zkContainerMark, zk.FlagContainer, e.acl)
		})
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return e.explain("creating", p, err)
		}
	}
	return nil
}

// explain describes a failed operation on znode p in one line.
func (e *ZooKeeperElection) explain(what, p string, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, errSessionEnded):
		return err
	case errors.Is(err, zk.ErrSessionExpired):
		return errSessionEnded
	case zkTransient(err):
		if !e.sess.alive() {
			return errSessionEnded
		}
	case errors.Is(err, zk.ErrNoAuth):
		if user, _, ok := strings.Cut(e.digest, ":"); ok {
			return fmt.Errorf("ZooKeeper refused %s %s (NoAuth): its ACL does not admit user %q with this password", what, p, user)
		}
		return fmt.Errorf("ZooKeeper refused %s %s (NoAuth): its ACL does not admit anonymous clients (set zookeeper.username and its password)", what, p)
	case errors.Is(err, zk.ErrNoChildrenForEphemerals):
		return fmt.Errorf("ZooKeeper refused %s %s: a parent is an ephemeral znode, which cannot have children; choose another zookeeper.prefix", what, p)
	case errors.Is(err, zk.ErrInvalidACL):
		return fmt.Errorf("ZooKeeper refused %s %s: invalid ACL (digest credentials need zookeeper.username and a password)", what, p)
	}
	return fmt.Errorf("ZooKeeper at %s: %s %s: %w", e.sess.servers, what, p, err)
}

// predecessor returns the candidate just before me in sequence order (""
// when me leads); found is false when me is not among kids.
func predecessor(kids []string, me string) (pred string, found bool) {
	type cand struct {
		name string
		seq  int64
	}
	var cs []cand
	for _, k := range kids {
		if seq, ok := zkSequence(k); ok {
			cs = append(cs, cand{k, seq})
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].seq < cs[j].seq })
	for i, c := range cs {
		if c.name == me {
			if i == 0 {
				return "", true
			}
			return cs[i-1].name, true
		}
	}
	return "", false
}

// zkSequence returns the sequence number the server appended to a
// sequential znode's name (its last 10 digits).
func zkSequence(name string) (int64, bool) {
	if len(name) < 10 {
		return 0, false
	}
	n, err := strconv.ParseInt(name[len(name)-10:], 10, 64)
	return n, err == nil && n >= 0
}

// watch ends the leadership when the session ends (expired, or no server
// answered for the session timeout) or the leader znode is deleted. Every
// third of the session timeout it records the session as renewed while
// connected: the client drops a connection that heard nothing from its
// server for two thirds of it.
func (e *ZooKeeperElection) watch(ctx context.Context) {
	tick := time.NewTicker(e.sess.sessionTimeout() / 3)
	defer tick.Stop()
	for {
		type res struct {
			ok bool
			ch <-chan zk.Event
		}
		r, err := zkCall(ctx, func() (res, error) {
			ok, _, ch, err := e.sess.conn.ExistsW(e.node)
			return res{ok, ch}, err
		})
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && !r.ok:
			e.lose(fmt.Errorf("%w: the leader znode %s is gone (its session expired, or it was deleted)", ErrLost, e.node))
			return
		case err != nil:
			// Down: the session's timer or expiry decides.
			select {
			case <-e.sess.ended:
				e.lose(fmt.Errorf("%w: %v", ErrLost, e.sess.err()))
				return
			case <-ctx.Done():
				return
			case <-time.After(e.sess.sessionTimeout() / 10):
				continue
			}
		}
		if !e.await(ctx, r.ch, tick.C) {
			return
		}
	}
}

// await waits for an event on the leader znode's watch ch (true: look
// again), recording the session's liveness at each tick; false when ctx
// is done or the session ended (the leadership is then lost).
func (e *ZooKeeperElection) await(ctx context.Context, ch <-chan zk.Event, tick <-chan time.Time) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-e.sess.ended:
			e.lose(fmt.Errorf("%w: %v", ErrLost, e.sess.err()))
			return false
		case <-ch: // deleted, changed, or the watch ended
			return true
		case <-tick:
			if e.sess.connected() {
				e.met.wrote()
			}
		}
	}
}

// Token returns the fencing token: the leader znode's Czxid.
func (e *ZooKeeperElection) Token() uint64 { return e.token }

// Node returns the leader znode's path.
func (e *ZooKeeperElection) Node() string { return e.node }

// SessionTimeout returns the session timeout the servers granted.
func (e *ZooKeeperElection) SessionTimeout() time.Duration { return e.sess.sessionTimeout() }

// Held reports whether the leadership is still this process's by its own
// reckoning: not lost or released, and the session not ended (expired, or
// no server reached for the session timeout). A true result may be stale
// by the time the caller acts on it: writes rely on the token.
func (e *ZooKeeperElection) Held() bool {
	return e.Err() == nil && e.sess.alive()
}

// Confirm syncs with the ensemble's leader and reads the leader znode: the
// leadership is confirmed while the znode exists, and lost when it is gone
// or the session has ended (expired while this process was frozen, say)
// (Leader.Confirm).
func (e *ZooKeeperElection) Confirm(ctx context.Context) error {
	if err := e.Err(); err != nil {
		return err
	}
	ok, err := zkRetry(ctx, e.sess, func() (bool, error) {
		if _, err := e.sess.conn.Sync(e.node); err != nil {
			return false, err
		}
		ok, _, err := e.sess.conn.Exists(e.node)
		return ok, err
	})
	switch {
	case !e.sess.alive() || errors.Is(err, zk.ErrSessionExpired):
		why := e.sess.err()
		if why == nil {
			why = fmt.Errorf("no ZooKeeper server answered for the session timeout %v", e.sess.sessionTimeout())
		}
		e.lose(fmt.Errorf("%w: %v", ErrLost, why))
		return e.Err()
	case err != nil:
		return fmt.Errorf("confirming the leadership in ZooKeeper: %w", err)
	case !ok:
		e.lose(fmt.Errorf("%w: the leader znode %s is gone (its session expired, or it was deleted)", ErrLost, e.node))
		return e.Err()
	}
	return nil
}

// Release resigns: it deletes the leader znode (the next candidate wins at
// once), the containers above it left empty, and closes the session. It
// returns nil, an error wrapping ErrLost when the leadership had been
// lost, or ZooKeeper's error (the znode then goes with the session).
// Idempotent.
func (e *ZooKeeperElection) Release(ctx context.Context) error {
	return e.release(&e.holding, func(lostErr error) error {
		err := lostErr
		if e.sess.alive() {
			_, derr := zkCall(ctx, func() (struct{}, error) { return struct{}{}, e.sess.conn.Delete(e.node, -1) })
			if derr != nil && !errors.Is(derr, zk.ErrNoNode) && err == nil {
				err = fmt.Errorf("resigning from ZooKeeper election %s (deleting %s): %w", e.name, e.node, derr)
			}
			if derr == nil {
				e.deleteEmptyContainers(e.dir)
			}
		}
		e.sess.close()
		return err
	})
}

// withdraw deletes this candidate's znode (if created) and the containers
// left empty, and closes the session, after a campaign that did not win.
func (e *ZooKeeperElection) withdraw() {
	if e.node != "" && e.sess.alive() {
		ctx, cancel := context.WithTimeout(context.Background(), e.sess.sessionTimeout())
		_, err := zkCall(ctx, func() (struct{}, error) { return struct{}{}, e.sess.conn.Delete(e.node, -1) })
		cancel()
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			e.deleteEmptyContainers(e.dir)
		}
	}
	e.node = ""
	e.sess.close()
}

// deleteEmptyContainers deletes p and its parents while each is an empty
// container znode (best effort: the server deletes empty containers
// itself, later).
func (e *ZooKeeperElection) deleteEmptyContainers(p string) {
	if !e.sess.alive() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.sess.sessionTimeout())
	defer cancel()
	for ; p != "/" && p != "."; p = path.Dir(p) {
		_, err := zkCall(ctx, func() (struct{}, error) {
			data, st, err := e.sess.conn.Get(p)
			switch {
			case err != nil:
				return struct{}{}, err
			case !bytes.Equal(data, zkContainerMark) || st.NumChildren > 0:
				return struct{}{}, zk.ErrNotEmpty
			}
			return struct{}{}, e.sess.conn.Delete(p, st.Version)
		})
		if err != nil {
			return
		}
	}
}
