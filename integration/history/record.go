package history

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Kind names what an operation does to its file.
type Kind string

// The kinds of operations in a history.
const (
	// KWrite replaces a file's value: open with O_TRUNC, write the pieces,
	// close (Flavor: plain, fsync, dup, fork, peek; rename writes a private
	// temporary file and renames it over the file).
	KWrite Kind = "write"
	// KAppend appends one line (open O_APPEND|O_CREAT, write, close).
	KAppend Kind = "append"
	// KDelete unlinks the file and fsyncs its directory.
	KDelete Kind = "delete"
	// KRead reads the file whole through a mount.
	KRead Kind = "read"
	// KS3Read reads the object with a plain S3 client.
	KS3Read Kind = "s3read"
	// KChmod changes the file's mode (an attribute write-back).
	KChmod Kind = "chmod"
	// KBatch is a worker command only (never in a history): its Batch of
	// commands, one after the other.
	KBatch Kind = "batch"
	// KBind binds a token: the root xattr of a mount, or `fencefs epoch
	// raise` (Mount -1).
	KBind Kind = "bind"
)

// Outcome is what the application was told about a mutation.
type Outcome string

// Outcomes. A mutation that returned success took effect exactly once
// between its invocation and Decided; one refused definitively (EROFS,
// ESTALE, EEXIST, ENOSPC …) never took effect; one whose outcome is unknown
// (EIO, the mount killed) may have, at any time after its invocation.
const (
	OK      Outcome = "ok"
	Failed  Outcome = "fail"
	Unknown Outcome = "unknown"
)

// Step is one system call of an operation, as its process saw it.
type Step struct {
	Call  string `json:"call"`
	Errno string `json:"errno,omitempty"`
	T     int64  `json:"t"` // when it returned (monotonic ns)
}

// Op is one recorded operation.
type Op struct {
	ID      int    `json:"id"`
	Process int    `json:"process"` // worker process; -1 the nemesis, -2 the driver; peeks: 1000+worker
	Mount   int    `json:"mount"`   // mount slot, -1 for S3 or the CLI
	Holder  string `json:"holder"`  // the mount instance (its --holder name), or the CLI's holder
	Token   uint64 `json:"token"`   // the token the mount held at invocation (a bind: the token bound)
	Kind    Kind   `json:"kind"`
	Flavor  string `json:"flavor,omitempty"`
	File    string `json:"file,omitempty"`
	// Value is what a write or append wrote (the pieces that write(2)
	// accepted); a write's whole intended value is Intended.
	Value    string `json:"value,omitempty"`
	Intended string `json:"intended,omitempty"`
	Mode     uint32 `json:"mode,omitempty"`

	Invoke   int64   `json:"invoke"`
	Written  int64   `json:"written,omitempty"` // after the last write(2): the content is made
	Decided  int64   `json:"decided,omitempty"` // when the outcome was decided
	Complete int64   `json:"complete"`          // when the last call returned (0: never)
	Outcome  Outcome `json:"outcome,omitempty"` // mutations and binds
	Errno    string  `json:"errno,omitempty"`   // the deciding error
	Steps    []Step  `json:"steps,omitempty"`

	// Reads.
	Found bool   `json:"found,omitempty"`
	Data  string `json:"data,omitempty"`
	Epoch string `json:"epoch,omitempty"` // the object's Fencefs-Epoch stamp (S3 reads)
}

// Fault is one fault the nemesis injected.
type Fault struct {
	Kind   string `json:"kind"` // move, failback, raise, freeze, cut, kill, hog
	Target string `json:"target"`
	Start  int64  `json:"start"`
	End    int64  `json:"end"`
	Detail string `json:"detail,omitempty"`
}

// History is a whole run: what a replay needs to check it again.
type History struct {
	Server   string    `json:"server"`
	Binary   string    `json:"binary"`
	Started  time.Time `json:"started"`
	Duration string    `json:"duration"`
	Mounts   int       `json:"mounts"`
	Files    []string  `json:"files"`
	Logs     []string  `json:"logs"` // files that only ever get appends
	Ops      []Op      `json:"ops"`
	Faults   []Fault   `json:"faults"`
	LoadAvg  string    `json:"loadavg,omitempty"`
}

// Now is the clock of every process of a run: CLOCK_MONOTONIC, which all
// processes of the machine share.
func Now() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// Save writes h as JSON to path.
func (h *History) Save(path string) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// Load reads a history saved by Save.
func Load(path string) (*History, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h History
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return &h, nil
}

// FaultCounts returns "kind=N …" of h's faults, sorted by kind.
func (h *History) FaultCounts() string {
	n := map[string]int{}
	for _, f := range h.Faults {
		n[f.Kind]++
	}
	kinds := make([]string, 0, len(n))
	for k := range n {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var b strings.Builder
	for i, k := range kinds {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, n[k])
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// errnoName is the symbolic name of err's errno ("EROFS"), "" for nil.
func errnoName(err error) string {
	if err == nil {
		return ""
	}
	var e syscall.Errno
	if ok := asErrno(err, &e); ok {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
		return fmt.Sprintf("errno%d", int(e))
	}
	return "ERR:" + err.Error()
}

// definitive reports whether an errno refuses a mutation for certain:
// nothing of it was stored. EIO, ENOTCONN (the mount died), timeouts and
// anything unrecognised leave the outcome unknown.
func definitive(errno string) bool {
	switch errno {
	case "EROFS", "ESTALE", "EEXIST", "ENOSPC", "ENOENT", "EINVAL", "EXDEV", "ESPIPE",
		"EACCES", "EPERM", "EISDIR", "ENOTDIR", "ENOTEMPTY", "EBADF":
		return true
	}
	return false
}
