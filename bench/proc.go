package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
)

// isMounted reports whether dir is a mountpoint in /proc/self/mountinfo
// (parsed, not stat'ed: a hung FUSE server must not hang the check).
func isMounted(dir string) (bool, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(filepath.Clean(dir)))
	if err != nil {
		return false, err
	}
	return len(mounts) > 0, nil
}

// unmount makes sure dir is not a mountpoint: fusermount3 -u a few times
// (EBUSY while the kernel drains), then a lazy unmount, which is reported as
// an error.
func unmount(dir string) error {
	for i := 0; i < 20; i++ {
		ok, err := isMounted(dir)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if exec.Command("fusermount3", "-u", dir).Run() == nil {
			continue
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, err := exec.Command("fusermount3", "-uz", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("lazy unmount of %s failed: %v: %s", dir, err, bytes.TrimSpace(out))
	}
	return fmt.Errorf("%s stayed busy; lazily unmounted", dir)
}

// peakRSS returns the peak resident set size (VmHWM) of process pid in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseVmHWM(b)
}

// parseVmHWM extracts VmHWM (in bytes) from the text of /proc/PID/status.
func parseVmHWM(status []byte) (int64, error) {
	for _, line := range strings.Split(string(status), "\n") {
		rest, ok := strings.CutPrefix(line, "VmHWM:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("unexpected VmHWM line %q", line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("VmHWM line %q: %w", line, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no VmHWM in /proc status")
}

// resetPeakRSS resets the peak RSS of pid to its current RSS (writing 5 to
// /proc/PID/clear_refs, Linux ≥ 4.0), so that the next peakRSS is the peak of
// what happened in between. It needs the right to ptrace pid (same user or
// root).
func resetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// cpuTimes reads the aggregate "cpu" line of /proc/stat: idle ticks and
// total ticks.
func cpuTimes() (idle, total uint64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("unexpected /proc/stat line %q", line)
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
		total += v
		if i == 3 { // idle; iowait (i == 4) is not idle for us: the disk is busy
			idle = v
		}
	}
	return idle, total, nil
}

// cpuIdle returns the fraction of CPU time the whole machine was idle
// during d.
func cpuIdle(d time.Duration) (float64, error) {
	i0, t0, err := cpuTimes()
	if err != nil {
		return 0, err
	}
	time.Sleep(d)
	i1, t1, err := cpuTimes()
	if err != nil {
		return 0, err
	}
	if t1 == t0 {
		return 0, fmt.Errorf("no CPU ticks in %v", d)
	}
	return float64(i1-i0) / float64(t1-t0), nil
}

// clockTicks is USER_HZ, the unit of /proc CPU times (100 on every Linux
// architecture Go supports).
const clockTicks = 100

// busyTicks is the machine's non-idle CPU time so far (idle and iowait
// excluded), in clock ticks.
func busyTicks() (uint64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, fmt.Errorf("unexpected /proc/stat line %q", line)
	}
	var busy uint64
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		if i != 3 && i != 4 && i < 8 { // not idle, iowait, guest (already in user)
			busy += v
		}
	}
	return busy, nil
}

// procTicks is the CPU time (user + system, all threads) process pid has
// used so far, in clock ticks; 0 if it cannot be read.
func procTicks(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state … : comm may hold spaces, so split after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)  // field 14 utime
	st, _ := strconv.ParseUint(f[12], 10, 64) // field 15 stime
	return u + st
}

// cpuMeter measures, over an interval, how much CPU the machine spent
// outside the processes under measurement (the benchmark, the gateway, a
// mount process): other load that makes a run noisy. Kernel threads (disk
// write-back, network soft interrupts run there) count as other load.
type cpuMeter struct {
	start     time.Time
	busy0     uint64
	ours0     uint64
	ourPIDs   []int
	unreadErr error
}

// startCPUMeter starts a meter over the given processes (pids already
// running).
func startCPUMeter(pids ...int) *cpuMeter {
	m := &cpuMeter{start: time.Now(), ourPIDs: pids}
	m.busy0, m.unreadErr = busyTicks()
	for _, p := range pids {
		m.ours0 += procTicks(p)
	}
	return m
}

// add includes a process started after the meter (its whole CPU time
// counts as ours).
func (m *cpuMeter) add(pid int) { m.ourPIDs = append(m.ourPIDs, pid) }

// other returns the CPU time spent outside our processes since the start,
// in CPUs (1.0 = one CPU busy all the time); -1 if unknown. Call it while
// the processes are still running.
func (m *cpuMeter) other() float64 {
	busy1, err := busyTicks()
	if err != nil || m.unreadErr != nil {
		return -1
	}
	var ours uint64
	for _, p := range m.ourPIDs {
		ours += procTicks(p)
	}
	d := time.Since(m.start).Seconds()
	other := float64(busy1-m.busy0) - float64(ours-m.ours0)
	if d <= 0 {
		return -1
	}
	return max(other, 0) / clockTicks / d
}
