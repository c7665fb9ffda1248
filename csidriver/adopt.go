package csidriver

// Finding the mounts again after a restart of the driver. The mount
// processes run on (their own sessions); what the driver lost is its
// memory of them, which the records on disk and /proc/self/mountinfo give
// back:
//
//   - a record whose target holds a fencefs mount is adopted as it was;
//     its process is found by pid and start time, or, for a record written
//     just before its mount started, by its command line;
//   - a record whose target holds no mount is dropped with its directory
//     (the volume was unmounted while the driver was away, or the node
//     rebooted);
//   - a fencefs mount under the kubelet directory that no record names is
//     adopted without arguments: NodeUnpublishVolume removes it, a
//     NodePublishVolume on it is refused (AlreadyExists).
//
// A mount whose process is gone (the container that ran it was restarted,
// or it was killed) stays adopted as dead: its pod sees ENOTCONN; a
// repeated NodePublishVolume mounts it again, NodeUnpublishVolume removes
// it.

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// adopt fills d.vols from the records under d.opts.StateDir and the
// fencefs mounts under d.opts.KubeletDir. It runs before the server
// serves.
func (d *Driver) adopt() error {
	recs, bad, err := loadRecords(d.opts.StateDir)
	if err != nil {
		return err
	}
	for _, dir := range bad {
		d.log.Warn("a volume directory has no readable record; left as it is", "dir", dir)
	}
	for _, r := range recs {
		m, ok, err := mountedAt(r.Target)
		if err != nil {
			return err
		}
		if !ok || m.FSType != FSType {
			d.log.Info("a recorded volume is no longer mounted: record dropped", "volume_id", r.VolumeID, "target", r.Target)
			if err := os.RemoveAll(volumeDir(d.opts.StateDir, r.Target)); err != nil {
				d.log.Warn("cannot remove the directory of a dropped volume", "target", r.Target, "err", err)
			}
			continue
		}
		if !r.alive() {
			r.Pid, r.Start = findMountProcess(r.Target)
		}
		d.vols[r.Target] = &r
		d.log.Info("adopted a mounted volume", "volume_id", r.VolumeID, "target", r.Target, "pid", r.Pid, "alive", r.alive())
	}
	if d.opts.KubeletDir == "" {
		return nil
	}
	orphans, err := fencefsMountsUnder(d.opts.KubeletDir)
	if err != nil {
		return err
	}
	for _, m := range orphans {
		if _, ok := d.vols[m.Mountpoint]; ok {
			continue
		}
		r := record{Target: m.Mountpoint}
		r.Pid, r.Start = findMountProcess(m.Mountpoint)
		d.vols[m.Mountpoint] = &r
		d.log.Warn("adopted a fencefs mount the driver has no record of: NodeUnpublishVolume removes it", "target", m.Mountpoint, "source", m.Source, "pid", r.Pid)
	}
	return nil
}

// findMountProcess finds the live `fencefs mount BUCKET TARGET …` process
// serving target, by its command line (the driver's mountArgs), and
// returns its pid and start time (0, 0 when none).
func findMountProcess(target string) (int, uint64) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, 0
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})
		if len(argv) < 4 || string(argv[1]) != "mount" || string(argv[3]) != target {
			continue
		}
		if start, ended, ok := procStart(pid); ok && !ended {
			return pid, start
		}
	}
	return 0, 0
}
