package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"

	"github.com/fencefs/fencefs/integration/gateway"
)

// method describes how the numbers were obtained.
func method(cfg config) string {
	server := "- One Versity S3 gateway on 127.0.0.1 (posix backend, started with --keep-alive: HTTP connections are reused, as on\n" +
		"  AWS S3, MinIO or Ceph RGW; the gateway's default closes every connection)"
	if cfg.Server == gateway.MinIO {
		server = "- One MinIO server on 127.0.0.1 (the pinned community release, one drive; its listings carry each object's metadata)"
	}
	return server + fmt.Sprintf(`, a fresh bucket per target and run; runs interleaved across targets,
  each run starting with the next target (run 1: raw first, run 2: the second target first …).
  The gateway's data and every mount's cache/staging directory are in the work directory (see Machine): on tmpfs by default,
  so that the numbers compare the clients rather than the machine's disk.
- Workloads are plain system calls from the benchmark process on each kernel mount, in this order: sequential read of a %[1]s object
  the mount has never seen (%[2]s read(2) calls; the object is deleted afterwards, so that the gateway holds less in memory while
  the next phase writes: its CPU per byte written was measured to double once a few GiB are resident), sequential write of a %[1]s file (%[2]s write(2) calls, open to close; deleted afterwards too, through the S3 client), %[3]d small
  files create+write+close, lstat, one readdir of their directory, read back (after posix_fadvise(DONTNEED) of each; the
  filesystem's own caches count) and content check, rename of %[4]d files one by one, rename of a %[5]d-file directory, unlink of every small file and fsync(2) of
  their directory (where a local file system's unlinks are durable, and fencefs's: it acknowledges deletes before storing them).
- Rates count only the time spent in the operations (the unlink rate counts the directory's fsync). Durability: after close or rename
  returns, and after the unlinks' fsync, the benchmark's own
  S3 client checks the object (every %[6]dth small file, the last one, and the large file). A target where objects appear only
  later is marked "not durable at close"; it fails every goal it appears in as the subject.
- raw: minio-go v7 directly; the large object with PutObject from a file (%[7]s parts, %[8]d in parallel, streaming-signed
  SigV4 payloads) and one streaming GetObject; small files with serial signed PutObject, HeadObject, one ListObjectsV2,
  GetObject, DeleteObject; rename = CopyObject + DeleteObject (a directory: list, then each object serially).
- fencefs: the binary in strict, fast and off mode (token auto), default options. s3fs: foreground, use_path_request_style,
  sigv4, tmpdir in its cache directory, defaults otherwise. rclone: `+"`rclone mount`"+` with an s3 remote (provider Other), --vfs-cache-mode off or writes, defaults otherwise.
  geesefs (only with -geesefs): foreground, --fsync-on-close, --endpoint and --region of the server, credentials in its
  environment, defaults otherwise (path-style requests, buffers in memory). --fsync-on-close uploads when the kernel releases
  the file (FUSE RELEASE), which it sends after close(2) returned, so geesefs is not durable at close; its renames and deletes
  too reach the bucket after they return (an fsync of their directory waits for them).
- "close(2) after seq write" is the part of the sequential write spent in close: the upload, for a filesystem that commits
  at close.
- Peak RSS: VmHWM of the mount process, reset before each workload (clear_refs 5): "seq write" is the peak while writing the
  large file, "all" the peak over every workload.
`, sizeString(cfg.LargeSize), sizeString(int64(cfg.WriteChunk)), cfg.SmallCount, cfg.RenameFiles, cfg.DirFiles,
		cfg.CheckEvery, sizeString(cfg.PartSize), cfg.RawThreads)
}

// reproFlags are the flags that differ from the defaults, for the
// "reproduce" line.
func reproFlags(cfg config) []string {
	var f []string
	if cfg.Quick {
		f = append(f, "-quick")
	}
	if cfg.Server != gateway.Versity {
		f = append(f, "-server "+string(cfg.Server))
	}
	if len(cfg.Only) > 0 {
		f = append(f, "-only "+strings.Join(cfg.Only, ","))
	}
	if cfg.Runs != 3 && !cfg.Quick {
		f = append(f, fmt.Sprintf("-runs %d", cfg.Runs))
	}
	if len(cfg.Workloads) > 0 && !slices.Equal(cfg.Workloads, workloadGroups["all"]) {
		f = append(f, "-workloads "+strings.Join(cfg.Workloads, ","))
	}
	if cfg.GeesefsBin != "" {
		f = append(f, "-geesefs "+cfg.GeesefsBin)
	}
	if len(cfg.FencefsArgs) > 0 {
		f = append(f, fmt.Sprintf("-fencefs-args %q", strings.Join(cfg.FencefsArgs, " ")))
	}
	return f
}

// kv is one line of the machine description.
type kv struct{ k, v string }

// describeMachine collects what the numbers depend on.
func describeMachine(cfg config) []kv {
	first := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil && len(out) == 0 {
			return "not available (" + err.Error() + ")"
		}
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return line
	}
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			return "?"
		}
		return strings.TrimSpace(string(b))
	}
	cpu := "?"
	for _, line := range strings.Split(read("/proc/cpuinfo"), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			cpu = strings.TrimSpace(v)
			break
		}
	}
	mem := "?"
	for _, line := range strings.Split(read("/proc/meminfo"), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(rest), &kb)
			mem = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	distro := "?"
	for _, line := range strings.Split(read("/etc/os-release"), "\n") {
		if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
			distro = strings.Trim(v, `"`)
		}
	}
	host, _ := os.Hostname()
	gw := cfg.GatewayBin
	if gw == "" {
		gw, _ = gateway.FindBinary()
	}
	fencefsVersion := first(cfg.FencefsBin, "version")
	if rev := first("git", "-C", repoDir(), "rev-parse", "--short", "HEAD"); !strings.Contains(rev, "not available") {
		dirty := ""
		if out, err := exec.Command("git", "-C", repoDir(), "status", "--porcelain").Output(); err == nil && len(out) > 0 {
			dirty = " (uncommitted changes)"
		}
		fencefsVersion += "; source " + rev + dirty
	}
	geesefs := "not measured (no -geesefs)"
	if cfg.GeesefsBin != "" {
		geesefs = first(cfg.GeesefsBin, "--version") + " (" + cfg.GeesefsBin + ")"
	}
	return []kv{
		{"host", host},
		{"CPU", fmt.Sprintf("%d × %s", runtime.NumCPU(), cpu)},
		{"memory", mem},
		{"OS", distro + ", kernel " + read("/proc/sys/kernel/osrelease")},
		{"gateway data and caches on", first("stat", "-f", "-c", "%T", cfg.WorkDir) + " (" + cfg.WorkDir + ")"},
		{"load average at start (counts tasks blocked in the kernel too)", read("/proc/loadavg")},
		{"go", runtime.Version()},
		{"fencefs", fencefsVersion},
		{"versitygw", gateway.PinnedVersion + " (" + gw + ")"},
		{"S3 server of this run", string(cfg.Server)},
		{"s3fs", first("s3fs", "--version")},
		{"rclone", first("rclone", "version")},
		{"geesefs", geesefs},
		{"fuse", first("fusermount3", "--version")},
	}
}

func repoDir() string {
	if root, err := gateway.RepoRoot(); err == nil {
		return root
	}
	return "."
}
