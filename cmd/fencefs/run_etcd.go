package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/lease"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// `fencefs run --etcd`: the leader is elected in etcd, whose leader key's
// create revision is the token bound on the mount; everything else (the
// supervision of COMMAND, the exit statuses, /healthz, the metrics) is
// run.go's.

// checkEtcdTTL refuses a --ttl that an etcd lease cannot have.
func checkEtcdTTL(ttl time.Duration) error {
	if ttl < time.Second || ttl%time.Second != 0 {
		return usageErrorf("--ttl %v: etcd leases last whole seconds (accepted with --etcd: 2s, 3s, 15s, …)", ttl)
	}
	return nil
}

// etcdClientConfig turns the etcd settings into a client configuration.
func etcdClientConfig(ec *config.Etcd) (clientv3.Config, error) {
	cc := clientv3.Config{
		Endpoints:   ec.Endpoints,
		DialTimeout: ec.DialTimeout,
		Username:    ec.Username,
		Password:    ec.Password.Reveal(),
		Logger:      zap.NewNop(), // failures reach the user through our errors
	}
	if ec.TLS() {
		info := transport.TLSInfo{TrustedCAFile: ec.CAFile, CertFile: ec.CertFile, KeyFile: ec.KeyFile}
		tc, err := info.ClientConfig()
		if err != nil {
			return cc, usageError{fmt.Errorf("etcd TLS files: %v", err)}
		}
		cc.TLS = tc
	}
	return cc, nil
}

// probeEtcd checks that some endpoint answers at the TCP and TLS level
// within the dial timeout, so that a wrong address or certificate is
// reported as such (the client itself would only retry until a deadline).
func probeEtcd(ctx context.Context, ec *config.Etcd, tc *tls.Config) error {
	var lastErr error
	for _, ep := range ec.Endpoints {
		u, err := url.Parse(ep)
		if err != nil {
			return usageErrorf("etcd.endpoints: %q: %v", ep, err)
		}
		dctx, cancel := context.WithTimeout(ctx, ec.DialTimeout)
		var d net.Dialer
		conn, err := d.DialContext(dctx, "tcp", u.Host)
		if err == nil && u.Scheme == "https" {
			cfg := tc.Clone()
			if cfg.ServerName == "" {
				cfg.ServerName = u.Hostname()
			}
			tconn := tls.Client(conn, cfg)
			if herr := tconn.HandshakeContext(dctx); herr != nil {
				err = fmt.Errorf("TLS handshake: %v", herr)
			}
			conn = tconn
		}
		cancel()
		if conn != nil {
			conn.Close()
		}
		if err == nil {
			return nil
		}
		lastErr = fmt.Errorf("etcd at %s: %v", ep, unwrapNet(err))
	}
	return fmt.Errorf("cannot reach etcd (etcd.dial_timeout %v): %w", ec.DialTimeout, lastErr)
}

// unwrapNet drops the "dial tcp …:" wrapping of a dial error.
func unwrapNet(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err
	}
	return err
}

// openEtcd connects to etcd and checks, within the dial timeout, that it
// answers a read under the election prefix with these credentials.
func openEtcd(ctx context.Context, ec *config.Etcd) (*clientv3.Client, error) {
	cc, err := etcdClientConfig(ec)
	if err != nil {
		return nil, err
	}
	if err := probeEtcd(ctx, ec, cc.TLS); err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, ec.DialTimeout)
	defer cancel()
	cc.Context = ctx
	client, err := clientv3.New(cc)
	if err == nil {
		_, err = client.Get(pctx, ec.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			client.Close()
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		at := strings.Join(ec.Endpoints, ",")
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("etcd at %s did not answer within %v (etcd.dial_timeout): is it an etcd client URL, with the right scheme (http or https)?", at, ec.DialTimeout)
		}
		return nil, fmt.Errorf("etcd at %s: %v", at, err)
	}
	return client, nil
}

// coordinatorBinder binds token, from the coordinator src, on the mount at
// mp, after checking that it is above the fence domain's epoch (one token
// source per fence domain).
func coordinatorBinder(env *adminEnv, mp string, src lease.TokenSource) func(ctx context.Context, token uint64) error {
	domain := env.cfg.DomainKeyPrefix()
	return func(ctx context.Context, token uint64) error {
		if err := lease.CheckTokenFrom(ctx, env.store, domain, src, token); err != nil {
			return err
		}
		got, err := mountBinder(mp, strconv.FormatUint(token, 10))(ctx)
		if err != nil {
			// Another source may have raised the epoch since the check.
			if cerr := lease.CheckTokenFrom(ctx, env.store, domain, src, token); errors.Is(cerr, lease.ErrTokenSource) {
				return cerr
			}
			return err
		}
		if got != token {
			return fmt.Errorf("%s shows token %d after binding %d", mp, got, token)
		}
		return nil
	}
}

// campaignEtcd connects to etcd and campaigns for the election o.lease;
// once won, the token is bound on the mount at mp. The returned function
// closes the client (after Release).
func campaignEtcd(ctx context.Context, ec *config.Etcd, env *adminEnv, o runOptions, mp string, reg prometheus.Registerer) (lease.Leader, func(), error) {
	client, err := openEtcd(ctx, ec)
	if err != nil {
		return nil, nil, err
	}
	env.log.Info("campaigning in etcd", "election", o.lease, "endpoints", ec.Endpoints, "prefix", ec.Prefix,
		"bucket", env.cfg.S3.Bucket, "domain", env.cfg.DomainKeyPrefix(), "mount", mp)
	e, err := lease.Campaign(ctx, client, o.lease, lease.ElectionOptions{
		Prefix:     ec.Prefix,
		TTL:        o.ttl,
		Holder:     env.cfg.Fence.Holder,
		Bind:       coordinatorBinder(env, mp, lease.EtcdSource),
		Logger:     env.log,
		Registerer: reg,
	})
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return e, func() { client.Close() }, nil
}
