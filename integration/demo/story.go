package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"

	"github.com/fencefs/fencefs/integration/gateway"
)

// reportName is the file both leaders write.
const reportName = "report.txt"

// firstTokenA is leader A's token on a fresh bucket (the worked example's
// 17; B takes 18).
const firstTokenA = 17

// errInterrupted: Ctrl-C during the story.
var errInterrupted = errors.New("interrupted")

// story is the takeover told with two mounts of one bucket.
type story struct {
	bin              string
	gw               *gateway.Gateway
	state            string
	mntA, mntB       string
	sig              chan os.Signal
	tokenA, tokenB   uint64
	a, b             *mountProc
	app              *app
	textA, textB     string // what A and B store as report.txt
	textLate         string // what the application on A writes and never gets stored
	cleanupOnce      sync.Once
	reportA, reportB string // report.txt's path on A's and B's mounts
}

// tell runs the story, printing it; it returns an error when something did
// not go as told (the demo then exits 1).
func (s *story) tell() error {
	if err := s.intro(); err != nil {
		return err
	}
	var err error
	step(1, "Leader A mounts the bucket at %s with token %d and writes %s.", rel(s.mntA), s.tokenA, reportName)
	if s.a, err = s.mount("A", s.mntA, s.tokenA); err != nil {
		return err
	}
	if err := os.WriteFile(s.reportA, []byte(s.textA), 0o644); err != nil {
		return fmt.Errorf("A writes %s: %w", reportName, err)
	}
	if _, err := s.showObject(); err != nil {
		return err
	}
	if err := s.interrupted(); err != nil {
		return err
	}

	step(2, "An application on A opens %s, writes %q and keeps it open: written, not closed.", reportName, trimmed(s.textLate))
	if s.app, err = startApp(s.reportA, s.textLate); err != nil {
		return err
	}

	step(3, "A freezes: SIGSTOP to its fencefs process (pid %d), as a GC pause, a VM snapshot or a partition would.", s.a.pid())
	if err := s.a.freeze(); err != nil {
		return err
	}
	fmt.Println("      A cannot notice that it loses the lead.")
	if err := s.interrupted(); err != nil {
		return err
	}

	step(4, "Leader B mounts the bucket at %s with token %d (sealing A's intent journal and sweeping the keys A may be writing) and writes %s.", rel(s.mntB), s.tokenB, reportName)
	if s.b, err = s.mount("B", s.mntB, s.tokenB); err != nil {
		return err
	}
	if err := os.WriteFile(s.reportB, []byte(s.textB), 0o644); err != nil {
		return fmt.Errorf("B writes %s: %w", reportName, err)
	}
	if _, err := s.showObject(); err != nil {
		return err
	}

	step(5, "A wakes up (SIGCONT), and the application closes its file.")
	if err := s.a.thaw(); err != nil {
		return err
	}
	res, err := s.app.close()
	if err != nil {
		return err
	}
	fmt.Printf("      close(2) on A: %s\n", res)
	state, reason := xattr(s.mntA, "state"), xattr(s.mntA, "reason")
	fmt.Printf("      A's state: %s (%s)\n", state, reason)

	step(6, "The bucket, read with a plain S3 client:")
	st, err := s.showObject()
	if err != nil {
		return err
	}
	return s.verdict(res, state, st)
}

// intro picks the tokens (17 and 18 on a new bucket, else the next two
// epochs) and the texts, and says so.
func (s *story) intro() error {
	prev, err := s.bucketEpoch()
	if err != nil {
		return err
	}
	s.tokenA = firstTokenA
	if prev >= firstTokenA {
		s.tokenA = prev + 1
	}
	s.tokenB = s.tokenA + 1
	s.textA = fmt.Sprintf("report v1 by leader A (token %d)\n", s.tokenA)
	s.textLate = fmt.Sprintf("late update by leader A (token %d), written before it froze\n", s.tokenA)
	s.textB = fmt.Sprintf("report v2 by leader B (token %d)\n", s.tokenB)
	s.reportA, s.reportB = filepath.Join(s.mntA, reportName), filepath.Join(s.mntB, reportName)

	fmt.Println("\nThe takeover: a leader that froze wakes up and writes; fencefs refuses it at the storage.")
	if prev >= firstTokenA {
		fmt.Printf("The bucket's epoch is already %d from an earlier run, so leader A takes token %d and leader B token %d.\n", prev, s.tokenA, s.tokenB)
	} else {
		fmt.Printf("Leader A takes token %d, leader B token %d.\n", s.tokenA, s.tokenB)
	}
	return nil
}

// verdict checks the story's end: A's close refused with EROFS, A fenced,
// and the bucket holding B's bytes stamped with B's token.
func (s *story) verdict(closeRes, stateA string, st object) error {
	var problems []string
	if !strings.HasPrefix(closeRes, "EROFS") {
		problems = append(problems, fmt.Sprintf("A's close returned %q, not EROFS", closeRes))
	}
	if stateA != "fenced" {
		problems = append(problems, fmt.Sprintf("A's state is %q, not fenced", stateA))
	}
	if st.body != s.textB || st.epoch != strconv.FormatUint(s.tokenB, 10) {
		problems = append(problems, fmt.Sprintf("the bucket holds %q stamped epoch %s, not B's bytes stamped %d", st.body, st.epoch, s.tokenB))
	}
	if len(problems) > 0 {
		return fmt.Errorf("the story did not end as it should: %s", strings.Join(problems, "; "))
	}
	fmt.Printf("      B's bytes, stamped epoch %d: A's late write never landed.\n", s.tokenB)
	return nil
}

// trimmed is s without its final newline, for quoting.
func trimmed(s string) string { return strings.TrimSuffix(s, "\n") }

func step(n int, format string, args ...any) {
	fmt.Printf("\n %d. %s\n", n, fmt.Sprintf(format, args...))
}

// mount starts leader name's mount at dir with token.
func (s *story) mount(name, dir string, token uint64) (*mountProc, error) {
	lower := map[string]string{"A": "a", "B": "b"}[name]
	return startMount(s.bin, name, dir, filepath.Join(s.state, "mount-"+lower+".log"), s.gw.Env(),
		"--endpoint", s.gw.Endpoint, "--token", strconv.FormatUint(token, 10), "--holder", "demo-"+lower,
		"--cache-dir", filepath.Join(s.state, "cache-"+lower))
}

// bucketEpoch is the newest epoch the bucket has seen (0 for a new one), as
// `fencefs epoch show --json` reports it.
func (s *story) bucketEpoch() (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, "epoch", "show", bucket, "--json", "--endpoint", s.gw.Endpoint)
	cmd.Env = append(os.Environ(), s.gw.Env()...)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return 0, fmt.Errorf("fencefs epoch show: %v: %s", err, ee.Stderr)
		}
		return 0, fmt.Errorf("fencefs epoch show: %w", err)
	}
	var v struct {
		Register *struct {
			Epoch uint64 `json:"epoch"`
		} `json:"register"`
		Recent []uint64 `json:"recent_epochs"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return 0, fmt.Errorf("fencefs epoch show --json: %v: %s", err, out)
	}
	var n uint64
	if v.Register != nil {
		n = v.Register.Epoch
	}
	for _, e := range v.Recent {
		n = max(n, e)
	}
	return n, nil
}

// object is report.txt as a plain S3 client reads it.
type object struct {
	body, epoch, holder string
}

// showObject reads report.txt with a plain S3 client and prints it with
// its fencing stamp.
func (s *story) showObject() (object, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o, err := s.gw.Client().GetObject(ctx, bucket, reportName, minio.GetObjectOptions{})
	if err != nil {
		return object{}, err
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil {
		return object{}, fmt.Errorf("reading object %s: %w", reportName, err)
	}
	info, err := o.Stat()
	if err != nil {
		return object{}, err
	}
	obj := object{body: string(b), epoch: info.UserMetadata["Fencefs-Epoch"], holder: info.UserMetadata["Fencefs-Holder"]}
	fmt.Printf("      bucket %s, object %s: %q, stamped epoch %s by holder %s\n", bucket, reportName, trimmed(obj.body), obj.epoch, obj.holder)
	return obj, nil
}

// xattr reads the root xattr user.fencefs.<name> of a mount ("?" when it
// cannot be read).
func xattr(mnt, name string) string {
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(mnt, "user.fencefs."+name, buf)
	if err != nil {
		return "?"
	}
	return string(buf[:n])
}

// interrupted reports errInterrupted once Ctrl-C was pressed.
func (s *story) interrupted() error {
	select {
	case <-s.sig:
		return errInterrupted
	default:
		return nil
	}
}

// anyMountExited is closed when either mount process exits.
func (s *story) anyMountExited() <-chan struct{} {
	ch := make(chan struct{})
	var once sync.Once
	for _, m := range []*mountProc{s.a, s.b} {
		go func() {
			err := <-m.done
			m.done <- err
			once.Do(func() { close(ch) })
		}()
	}
	return ch
}

// cleanup continues A if it is frozen, ends the application, and stops
// both mounts (flush, unmount). The gateway is stopped by the caller.
func (s *story) cleanup() {
	s.cleanupOnce.Do(func() {
		if s.a != nil {
			_ = s.a.thaw() // first: the application's exit flushes its file to A
		}
		if s.app != nil {
			s.app.kill()
		}
		for _, m := range []*mountProc{s.b, s.a} {
			if m != nil {
				m.stop()
			}
		}
	})
}
