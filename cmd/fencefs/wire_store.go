package main

import (
	"context"
	"log/slog"

	"github.com/fencefs/fencefs/config"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/s3"
	"github.com/prometheus/client_golang/prometheus"
)

// s3Config builds the objstore/s3 configuration of cfg.
func s3Config(cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) s3.Config {
	return s3.Config{
		Endpoint:             cfg.EndpointURL(),
		Bucket:               cfg.S3.Bucket,
		CheckPrefix:          cfg.S3.Prefix,
		Region:               cfg.S3.Region,
		AccessKey:            cfg.S3.AccessKey,
		SecretKey:            cfg.S3.SecretKey.Reveal(),
		SessionToken:         cfg.S3.SessionToken.Reveal(),
		Profile:              cfg.NamedProfile(),
		CredentialsFile:      cfg.S3.CredentialsFile,
		WebIdentityTokenFile: cfg.S3.WebIdentityTokenFile,
		RoleARN:              cfg.S3.RoleARN,
		AssumeRole:           cfg.S3.AssumeRole,
		STSEndpoint:          cfg.S3.STSEndpoint,
		CAFile:               cfg.S3.CAFile,
		PathStyle:            cfg.S3.PathStyle,
		IdleTimeout:          cfg.S3.Timeout,
		ConnectTimeout:       cfg.S3.ConnectTimeout,
		RetryDeadline:        cfg.S3.RetryDeadline,
		Concurrency:          cfg.S3.Concurrency,
		PartSize:             int64(cfg.S3.PartSizeMiB) << 20,
		MultipartThreshold:   2 * int64(cfg.S3.PartSizeMiB) << 20,
		SpoolDir:             cfg.Mount.CacheDir,
		Logger:               log,
		Registerer:           reg,
	}
}

// openStore connects to the bucket. s3.New checks that the bucket exists and
// the credentials are accepted; its errors wrap the objstore sentinels.
func openStore(ctx context.Context, cfg *config.Config, log *slog.Logger, reg prometheus.Registerer) (objstore.Store, error) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	st, err := s3.New(ctx, s3Config(cfg, log, reg))
	if err != nil {
		return nil, err
	}
	return st, nil
}

// limitPlainPuts applies the probe's finding that the server holds a key's
// lock while a conditional PUT's body arrives (objstore.CheckLockFreeBody
// failed: MinIO): commits whose request would not leave in one write go as
// multipart uploads, so that a writer frozen mid-body stalls no other
// request on the key. It runs before the Guard reads the store's Sizing.
func limitPlainPuts(store objstore.Store, caps objstore.Capabilities) {
	if s, ok := store.(*s3.Store); ok && !caps.Has(objstore.CheckLockFreeBody) {
		s.LimitPlainToOneWrite()
	}
}
