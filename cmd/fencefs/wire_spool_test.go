package main

import (
	"testing"

	"github.com/fencefs/fencefs/config"
)

func TestTheCacheDirIsWhereFencingAndTheStoreSpool(t *testing.T) {
	cfg := &config.Config{}
	cfg.Mount.CacheDir = "/var/cache/fencefs-test"
	if got := fencingConfig(cfg, nil, nil).SpoolDir; got != cfg.Mount.CacheDir {
		t.Errorf("fencing.Config.SpoolDir = %q, want mount.cache_dir %q", got, cfg.Mount.CacheDir)
	}
	if got := s3Config(cfg, nil, nil).SpoolDir; got != cfg.Mount.CacheDir {
		t.Errorf("s3.Config.SpoolDir = %q, want mount.cache_dir %q", got, cfg.Mount.CacheDir)
	}
}
