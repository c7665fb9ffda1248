package main

import (
	"context"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/lease"
	"github.com/prometheus/client_golang/prometheus"
)

// `fencefs run --zookeeper`: the leader is elected in a ZooKeeper
// ensemble, whose leader znode's creation zxid is the token bound on the
// mount; everything else (the supervision of COMMAND, the exit statuses,
// /healthz, the metrics) is run.go's.

// campaignZooKeeper takes part in the ZooKeeper election o.lease, with
// --ttl as the session timeout; once won, the token is bound on the mount
// at mp. The election owns its session: the returned function has nothing
// more to close.
func campaignZooKeeper(ctx context.Context, zc *config.ZooKeeper, env *adminEnv, o runOptions, mp string, reg prometheus.Registerer) (lease.Leader, func(), error) {
	env.log.Info("campaigning in ZooKeeper", "election", o.lease, "servers", zc.Servers, "prefix", zc.Prefix,
		"session_timeout", o.ttl, "user", zc.Username, "bucket", env.cfg.S3.Bucket, "domain", env.cfg.DomainKeyPrefix(), "mount", mp)
	e, err := lease.CampaignZooKeeper(ctx, o.lease, lease.ZooKeeperOptions{
		Servers:        zc.Servers,
		SessionTimeout: o.ttl,
		DialTimeout:    zc.DialTimeout,
		Prefix:         zc.Prefix,
		Digest:         zc.Digest(),
		Holder:         env.cfg.Fence.Holder,
		Bind:           coordinatorBinder(env, mp, lease.ZooKeeperSource),
		Logger:         env.log,
		Registerer:     reg,
	})
	if err != nil {
		return nil, nil, err
	}
	return e, func() {}, nil
}
