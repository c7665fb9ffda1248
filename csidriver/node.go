package csidriver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NodeGetInfo names the node; a node mounts any number of volumes, from
// any bucket it reaches.
func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: d.opts.NodeID}, nil
}

// NodeGetCapabilities: volume stats, and the single-node access modes
// (SINGLE_NODE_SINGLE_WRITER refuses a second target on the node). No
// STAGE_UNSTAGE: each publish is a mount of its own (see docs/CSI.md).
func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	rpc := func(t csi.NodeServiceCapability_RPC_Type) *csi.NodeServiceCapability {
		return &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}}
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: []*csi.NodeServiceCapability{
		rpc(csi.NodeServiceCapability_RPC_GET_VOLUME_STATS),
		rpc(csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER),
	}}, nil
}

// NodePublishVolume mounts the volume at the target path: a fencefs
// process of its own, without a token (read-only until the pod binds
// one). Publishing again with the same arguments succeeds; with others it
// is AlreadyExists.
func (d *Driver) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	s, err := parsePublish(req, os.Environ())
	if err != nil {
		return nil, err
	}
	s.Target = filepath.Clean(s.Target)
	if err := d.claim(s.Target); err != nil {
		return nil, err
	}
	defer d.release(s.Target)

	if r := d.volume(s.Target); r != nil {
		switch {
		case r.Identity == "":
			return nil, status.Errorf(codes.AlreadyExists, "target path %s holds a fencefs mount the driver has no record of (adopted after a restart): unpublish it first", s.Target)
		case r.Identity != s.Identity():
			return nil, status.Errorf(codes.AlreadyExists, "target path %s is published already with other arguments (volume %q)", s.Target, r.VolumeID)
		case r.alive():
			// kubelet publishes again with a fresh token (requiresRepublish):
			// the mount reads it at its next renewal.
			if err := d.refreshToken(s); err != nil {
				return nil, err
			}
			return &csi.NodePublishVolumeResponse{}, nil
		}
		// The same publish, whose process is gone: mount it again.
		d.log.Warn("the fencefs process of a published volume is gone: mounting it again", "volume_id", r.VolumeID, "target", s.Target, "pid", r.Pid)
		if _, err := d.run.unmount(ctx, s.Target); err != nil {
			return nil, err
		}
		d.setVolume(s.Target, nil)
	}
	if err := d.checkSingleWriter(s); err != nil {
		return nil, err
	}
	if m, ok, err := mountedAt(s.Target); err != nil {
		return nil, status.Errorf(codes.Internal, "reading the mount table: %v", err)
	} else if ok {
		return nil, status.Errorf(codes.FailedPrecondition, "target path %s is a %s mount of %s already, not one of this driver's", s.Target, m.FSType, m.Source)
	}
	if err := makeTarget(s.Target); errors.Is(err, errNotDir) {
		return nil, invalid("target path %s is not a directory", s.Target)
	} else if err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	r, err := d.mount(ctx, s)
	if err != nil {
		return nil, err
	}
	d.setVolume(s.Target, r)
	return &csi.NodePublishVolumeResponse{}, nil
}

// mount starts the fencefs process of s and records it. The record is
// written first, so that a driver that dies mid-mount finds the mount
// again with its arguments.
func (d *Driver) mount(ctx context.Context, s volumeSpec) (*record, error) {
	dir := volumeDir(d.opts.StateDir, s.Target)
	if err := os.MkdirAll(filepath.Join(dir, cacheDir), 0o700); err != nil {
		return nil, status.Errorf(codes.Internal, "volume directory %s: %v", dir, unwrap(err))
	}
	r := &record{VolumeID: s.VolumeID, Target: s.Target, Identity: s.Identity(),
		SingleWriter: s.Mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, ReadOnly: s.ReadOnly()}
	if err := saveRecord(dir, *r); err != nil {
		return nil, status.Errorf(codes.Internal, "volume record in %s: %v", dir, unwrap(err))
	}
	if err := d.refreshToken(s); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	pid, err := d.run.mount(ctx, s)
	if err != nil {
		if _, ok, _ := mountedAt(s.Target); !ok {
			_ = os.RemoveAll(dir)
		}
		return nil, err
	}
	r.Pid = pid
	if start, _, ok := procStart(pid); ok {
		r.Start = start
	}
	if err := saveRecord(dir, *r); err != nil {
		d.log.Warn("cannot update the volume's record; a restarted driver finds its process by its command line", "target", s.Target, "err", err)
	}
	d.log.Info("mounted", "volume_id", s.VolumeID, "target", s.Target, "bucket", s.Bucket, "options", s.optionList(), "pid", pid)
	return r, nil
}

// refreshToken writes the pod's token of s (authenticationSource: pod)
// into its volume's token file; nothing for a volume without one.
func (d *Driver) refreshToken(s volumeSpec) error {
	if s.Audience == "" {
		return nil
	}
	if err := writeTokenFile(volumeDir(d.opts.StateDir, s.Target), s.Token); err != nil {
		return status.Errorf(codes.Internal, "%v", err)
	}
	return nil
}

// checkSingleWriter refuses a second target of a volume on this node when
// either publish is SINGLE_NODE_SINGLE_WRITER.
func (d *Driver) checkSingleWriter(s volumeSpec) error {
	single := s.Mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
	d.mu.Lock()
	defer d.mu.Unlock()
	for t, r := range d.vols {
		if t != s.Target && r.VolumeID == s.VolumeID && (single || r.SingleWriter) {
			return status.Errorf(codes.FailedPrecondition, "volume %q is published at %s already, single-writer (SINGLE_NODE_SINGLE_WRITER)", s.VolumeID, t)
		}
	}
	return nil
}

// NodeUnpublishVolume unmounts the target path and removes it. A target
// that is not mounted is success (the call is repeated after a failure or
// a restart).
func (d *Driver) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, invalid("volume_id is missing")
	case req.GetTargetPath() == "":
		return nil, invalid("target_path is missing")
	}
	target := filepath.Clean(req.GetTargetPath())
	if err := d.claim(target); err != nil {
		return nil, err
	}
	defer d.release(target)
	r := d.volume(target)
	if r != nil && r.VolumeID != "" && r.VolumeID != req.GetVolumeId() {
		return nil, status.Errorf(codes.NotFound, "target path %s holds volume %q, not %q", target, r.VolumeID, req.GetVolumeId())
	}
	lazy, err := d.run.unmount(ctx, target)
	if err != nil {
		return nil, err
	}
	if lazy {
		d.log.Warn("the mount stayed busy: detached lazily; its process serves the files still open, then exits", "target", target)
	} else if r != nil && r.alive() {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := waitExit(wctx, *r); err != nil {
			d.log.Warn("unmounted, but the mount process has not exited yet", "target", target, "err", err)
		}
		cancel()
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "unmounted, but cannot remove target path %s: %v", target, unwrap(err))
	}
	if err := os.RemoveAll(volumeDir(d.opts.StateDir, target)); err != nil {
		d.log.Warn("cannot remove the volume's directory", "target", target, "err", err)
	}
	d.setVolume(target, nil)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// statfsTimeout bounds the statfs of NodeGetVolumeStats: a stopped fencefs
// process would block it forever.
const statfsTimeout = 5 * time.Second

// NodeGetVolumeStats reports the statfs of a published volume's mount
// (fencefs reports a fixed capacity: S3 has no size) and whether its
// process is alive.
func (d *Driver) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, invalid("volume_id is missing")
	case req.GetVolumePath() == "":
		return nil, invalid("volume_path is missing")
	}
	path := filepath.Clean(req.GetVolumePath())
	r := d.volume(path)
	if r == nil || (r.VolumeID != "" && r.VolumeID != req.GetVolumeId()) {
		return nil, status.Errorf(codes.NotFound, "volume %q is not published at %s", req.GetVolumeId(), path)
	}
	gone := func() error {
		return status.Errorf(codes.FailedPrecondition, "the fencefs process of volume %q at %s is gone (its pod sees ENOTCONN; restart the pod)", req.GetVolumeId(), path)
	}
	if !r.alive() {
		return nil, gone()
	}
	type result struct {
		st  unix.Statfs_t
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var res result
		res.err = unix.Statfs(path, &res.st)
		ch <- res
	}()
	var res result
	select {
	case res = <-ch:
	case <-time.After(statfsTimeout):
		return nil, status.Errorf(codes.Unavailable, "the mount of volume %q at %s did not answer statfs within %v (is its fencefs process stopped?)", req.GetVolumeId(), path, statfsTimeout)
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if errors.Is(res.err, unix.ENOTCONN) || errors.Is(res.err, unix.ECONNABORTED) {
		return nil, gone() // the process ended after alive looked
	}
	if res.err != nil {
		return nil, status.Errorf(codes.Internal, "statfs %s: %v", path, res.err)
	}
	bs := int64(res.st.Bsize)
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(res.st.Blocks) * bs, Available: int64(res.st.Bavail) * bs, Used: int64(res.st.Blocks-res.st.Bfree) * bs},
		{Unit: csi.VolumeUsage_INODES, Total: int64(res.st.Files), Available: int64(res.st.Ffree), Used: int64(res.st.Files - res.st.Ffree)},
	}}, nil
}
