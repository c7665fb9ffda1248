package main

import (
	"fmt"
	"os"
	"time"

	"github.com/prometheus/procfs"
)

// peakRSS returns the peak resident set size (VmHWM) of process pid in bytes.
func peakRSS(pid int) (int64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, err
	}
	if st.VmHWM == 0 {
		return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
	}
	return int64(st.VmHWM), nil
}

// resetPeakRSS resets the peak RSS of pid to its current RSS (writing 5 to
// /proc/PID/clear_refs, Linux ≥ 4.0), so that the next peakRSS is the peak of
// what happened in between. It needs the right to ptrace pid (same user or
// root).
func resetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// cpuTotal reads the machine's aggregate CPU times (seconds) from /proc/stat.
func cpuTotal() (procfs.CPUStat, error) {
	st, err := procfs.NewStat()
	if err != nil {
		return procfs.CPUStat{}, err
	}
	return st.CPUTotal, nil
}

// busySeconds is the non-idle part of c: idle and iowait excluded (iowait
// is not idle for us only in cpuIdle), guest time excluded because user
// time already counts it.
func busySeconds(c procfs.CPUStat) float64 {
	return c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
}

// cpuIdle returns the fraction of CPU time the whole machine was idle
// during d (iowait counts as busy: the disk is).
func cpuIdle(d time.Duration) (float64, error) {
	c0, err := cpuTotal()
	if err != nil {
		return 0, err
	}
	time.Sleep(d)
	c1, err := cpuTotal()
	if err != nil {
		return 0, err
	}
	idle := c1.Idle - c0.Idle
	total := idle + (c1.Iowait - c0.Iowait) + busySeconds(c1) - busySeconds(c0)
	if total <= 0 {
		return 0, fmt.Errorf("no CPU time passed in %v", d)
	}
	return idle / total, nil
}

// procSeconds is the CPU time (user + system, all threads) process pid has
// used so far, in seconds; 0 if it cannot be read.
func procSeconds(pid int) float64 {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0
	}
	st, err := p.Stat()
	if err != nil {
		return 0
	}
	return st.CPUTime()
}

// cpuMeter measures, over an interval, how much CPU the machine spent
// outside the processes under measurement (the benchmark, the gateway, a
// mount process): other load that makes a run noisy. Kernel threads (disk
// write-back, network soft interrupts run there) count as other load.
type cpuMeter struct {
	start     time.Time
	busy0     float64
	ours0     float64
	ourPIDs   []int
	unreadErr error
}

// startCPUMeter starts a meter over the given processes (pids already
// running).
func startCPUMeter(pids ...int) *cpuMeter {
	m := &cpuMeter{start: time.Now(), ourPIDs: pids}
	c, err := cpuTotal()
	m.busy0, m.unreadErr = busySeconds(c), err
	for _, p := range pids {
		m.ours0 += procSeconds(p)
	}
	return m
}

// add includes a process started after the meter (its whole CPU time
// counts as ours).
func (m *cpuMeter) add(pid int) { m.ourPIDs = append(m.ourPIDs, pid) }

// ours returns the CPU time (seconds) our processes spent since the start.
// Call it while they are still running: an exited process counts 0.
func (m *cpuMeter) ours() float64 {
	var ours float64
	for _, p := range m.ourPIDs {
		ours += procSeconds(p)
	}
	return ours - m.ours0
}

// other returns the CPU time spent outside our processes since the start,
// in CPUs (1.0 = one CPU busy all the time); -1 if unknown. Call it while
// the processes are still running.
func (m *cpuMeter) other() float64 {
	c, err := cpuTotal()
	if err != nil || m.unreadErr != nil {
		return -1
	}
	d := time.Since(m.start).Seconds()
	other := busySeconds(c) - m.busy0 - m.ours()
	if d <= 0 {
		return -1
	}
	return max(other, 0) / d
}
