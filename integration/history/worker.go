package history

// The client side of a run: a worker is a process of its own (the test
// binary started again with WorkerEnv set), doing one operation at a time on
// one mount as the driver tells it over stdin, and answering each with a
// JSON line on stdout. Processes, not goroutines of the test process: every
// fork+exec of a process closes the child's copies of its descriptors,
// which the kernel turns into FUSE FLUSHes that commit files (.ci/gotest),
// so a descriptor held in the test process would be committed behind the
// history's back whenever the driver starts a mount or a CPU hog.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"golang.org/x/sys/unix"
)

// WorkerEnv, set in a process's environment, makes TestMain run a worker
// (RunWorker) instead of the tests. Its value is "endpoint bucket".
const WorkerEnv = "FENCEFS_HISTORY_WORKER"

// Command is one operation a worker is told to do.
type Command struct {
	ID     int      `json:"id"`
	Kind   Kind     `json:"kind"`
	Flavor string   `json:"flavor,omitempty"`
	Path   string   `json:"path,omitempty"` // the file on the mount
	Dir    string   `json:"dir,omitempty"`  // its directory (fsync after unlink)
	Tmp    string   `json:"tmp,omitempty"`  // rename: the temporary file
	Key    string   `json:"key,omitempty"`  // the object (S3 reads, peeks)
	Pieces []string `json:"pieces,omitempty"`
	Pause  int      `json:"pause,omitempty"` // ms between pieces; a delete's between unlink and fsync
	Hold1  int      `json:"hold1,omitempty"` // dup: ms before closing the first descriptor
	Hold2  int      `json:"hold2,omitempty"` // dup: ms before closing the second
	Mode   uint32   `json:"mode,omitempty"`
	// Peek: read the object with a plain S3 client after the first piece
	// (the "peek" flavor and the second write of a churn round).
	Peek bool `json:"peek,omitempty"`
	// Batch (KBatch): commands done one after the other with nothing in
	// between, answered together (churn rounds).
	Batch []Command `json:"batch,omitempty"`
}

// Result is a worker's answer to a Command.
type Result struct {
	ID       int      `json:"id"`
	Invoke   int64    `json:"invoke"`
	Complete int64    `json:"complete"`
	Written  int64    `json:"written,omitempty"`
	Pieces   int      `json:"pieces"` // pieces write(2) accepted
	Steps    []Step   `json:"steps,omitempty"`
	Found    bool     `json:"found,omitempty"`
	Data     string   `json:"data,omitempty"`
	Epoch    string   `json:"epoch,omitempty"`
	Err      string   `json:"err,omitempty"` // reads: the error, if any
	Peek     *Result  `json:"peek,omitempty"`
	Batch    []Result `json:"batch,omitempty"`
}

// RunWorker is a worker process's main: it reads Commands from stdin until
// it closes and answers each on stdout.
func RunWorker(spec string) int {
	var endpoint, bucket, access, secret, region string
	if _, err := fmt.Sscan(spec, &endpoint, &bucket); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	access, secret, region = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), os.Getenv("AWS_REGION")
	s3c, err := minio.New(endpoint, &minio.Options{Creds: credentials.NewStaticV4(access, secret, ""),
		Region: region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	w := &worker{s3: s3c, bucket: bucket}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var c Command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			return 2
		}
		r := w.do(c)
		if err := out.Encode(r); err != nil {
			return 2
		}
	}
	return 0
}

type worker struct {
	s3     *minio.Client
	bucket string
}

func (w *worker) do(c Command) Result {
	r := Result{ID: c.ID, Invoke: Now()}
	step := func(call string, err error) error {
		r.Steps = append(r.Steps, Step{Call: call, Errno: errnoName(err), T: Now()})
		return err
	}
	switch c.Kind {
	case KBatch:
		for _, sub := range c.Batch {
			r.Batch = append(r.Batch, w.do(sub))
		}
	case KWrite, KAppend:
		w.write(c, &r, step)
	case KDelete:
		if step("unlink", unix.Unlink(c.Path)) == nil {
			r.Written = Now()
			time.Sleep(time.Duration(c.Pause) * time.Millisecond)
			w.fsyncDir(c.Dir, step)
		}
	case KChmod:
		_ = step("chmod", unix.Chmod(c.Path, c.Mode))
	case KRead:
		data, err := os.ReadFile(c.Path)
		if err == nil {
			r.Found, r.Data = true, string(data)
		} else {
			r.Err = errnoName(err)
		}
	case KS3Read:
		w.s3read(c.Key, &r)
	}
	r.Complete = Now()
	return r
}

func (w *worker) fsyncDir(dir string, step func(string, error) error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if step("open-dir", err) != nil {
		return
	}
	_ = step("fsync-dir", unix.Fsync(fd))
	_ = unix.Close(fd)
}

// write does a whole-file write or an append in the command's flavor.
func (w *worker) write(c Command, r *Result, step func(string, error) error) {
	path, flags := c.Path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC
	if c.Kind == KAppend {
		flags = unix.O_WRONLY | unix.O_CREAT | unix.O_APPEND | unix.O_CLOEXEC
	}
	if c.Flavor == "rename" {
		path = c.Tmp
	}
	fd, err := unix.Open(path, flags, 0o644)
	if step("open", err) != nil {
		return
	}
	for i, p := range c.Pieces {
		if i > 0 && c.Pause > 0 {
			time.Sleep(time.Duration(c.Pause) * time.Millisecond)
		}
		if _, err := unix.Write(fd, []byte(p)); step("write", err) != nil {
			break
		}
		r.Pieces++
		if i == 0 && (c.Flavor == "peek" || c.Peek) {
			// Another client looks at the object while the file is open
			// and truncated here: it must see a whole version that a
			// close or fsync produced, never the truncation.
			p := Result{Invoke: Now()}
			w.s3read(c.Key, &p)
			p.Complete = Now()
			r.Peek = &p
		}
	}
	r.Written = Now()
	switch c.Flavor {
	case "fsync":
		_ = step("fsync", unix.Fsync(fd))
	case "fork":
		// A child inherits the descriptor (fork) and drops it (exec of a
		// close-on-exec descriptor): the kernel sends a FLUSH.
		_ = step("fork-exec", exec.Command("true").Run())
	case "dup":
		fd2, err := unix.Dup(fd)
		if step("dup", err) == nil {
			time.Sleep(time.Duration(c.Hold1) * time.Millisecond)
			_ = step("close", unix.Close(fd))
			time.Sleep(time.Duration(c.Hold2) * time.Millisecond)
			_ = step("close-dup", unix.Close(fd2))
			return
		}
	}
	_ = step("close", unix.Close(fd))
	if c.Flavor == "rename" && len(r.Steps) > 0 && r.Steps[len(r.Steps)-1].Errno == "" && r.Pieces == len(c.Pieces) {
		r.Written = Now()
		_ = step("rename", unix.Rename(c.Tmp, c.Path))
	}
}

// s3read GETs key whole; a fencefs tombstone counts as absent.
func (w *worker) s3read(key string, r *Result) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o, err := w.s3.GetObject(ctx, w.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		r.Err = err.Error()
		return
	}
	defer o.Close()
	st, err := o.Stat()
	if minio.ToErrorResponse(err).Code == "NoSuchKey" {
		return
	}
	if err != nil {
		r.Err = err.Error()
		return
	}
	r.Epoch = st.UserMetadata["Fencefs-Epoch"]
	if st.UserMetadata["Fencefs-Tombstone"] == "1" {
		return
	}
	b, err := io.ReadAll(o)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			r.Err = "timeout"
		} else {
			r.Err = err.Error()
		}
		return
	}
	r.Found, r.Data = true, string(b)
}
