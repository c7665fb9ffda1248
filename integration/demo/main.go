// Command fencefs-demo is what `make run` runs. It starts a local Versity S3
// gateway on a free loopback port (data under --state), creates the bucket
// "demo", and tells the takeover story with two real fencefs mounts: leader
// A (at --mountpoint, token 17) writes; an application on A holds a file
// written but not closed; A freezes (SIGSTOP); leader B (at
// <mountpoint>-b) takes over with token 18 and writes the same file; A
// wakes (SIGCONT), the application's close(2) fails with EROFS, and a plain
// S3 client shows that the bucket holds B's bytes.
//
// Then it leaves both mounts up and prints what to try; Ctrl-C (or SIGTERM)
// flushes and unmounts both and stops the gateway, so nothing is left
// mounted or running. With --once it does that right after the story, and
// exits 1 if the story did not go as told. Running it again reuses the
// data: the bucket's epoch is then already 18 or more, and A and B take
// the next two epochs (read with `fencefs epoch show`).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/minio/minio-go/v7"
)

const (
	bucket    = "demo"
	accessKey = "fencefs-demo"
	secretKey = "fencefs-demo-secret-key"
)

// options are the demo's flags, with absolute paths.
type options struct {
	bin, gateway, state, mnt string
	once                     bool
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin/fencefs", "fencefs binary")
	flag.StringVar(&o.gateway, "gateway", "bin/versitygw", "versitygw binary")
	flag.StringVar(&o.state, "state", ".run", "directory for the gateway's data, the caches and the logs")
	flag.StringVar(&o.mnt, "mountpoint", "mnt", "where leader A mounts the bucket; leader B mounts at <mountpoint>-b")
	flag.BoolVar(&o.once, "once", false, "stop everything right after the story instead of waiting for Ctrl-C")
	hold := flag.String("app-hold", "", "internal: run as the story's application, holding this file open")
	text := flag.String("app-text", "", "internal: what the application writes")
	flag.Parse()
	if *hold != "" {
		os.Exit(runApp(*hold, *text))
	}
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "fencefs-demo: unexpected argument %q (flags only; see -h)\n", flag.Arg(0))
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "fencefs-demo:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	// `make run | tee run.log`, then Ctrl-C: tee exits with the terminal's
	// SIGINT, and the demo's next line ("stopping: …") would raise SIGPIPE,
	// which kills a Go program writing to fd 1 or 2 unless it handles it;
	// the mounts would die with it (Pdeathsig) and leave both mountpoints
	// answering ENOTCONN. Handled, such writes just fail, and the demo
	// still unmounts both and stops the gateway. Notify, not Ignore: the
	// processes it starts must get the default SIGPIPE.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	for _, p := range []*string{&o.bin, &o.gateway, &o.state, &o.mnt} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	for _, p := range []string{o.bin, o.gateway} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%v (run `make build bin/versitygw` first)", err)
		}
	}
	if err := os.MkdirAll(o.state, 0o755); err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := gateway.Start(ctx, gateway.Options{
		Bin: o.gateway, Dir: filepath.Join(o.state, "gateway"), AccessKey: accessKey, SecretKey: secretKey,
	})
	if err != nil {
		return fmt.Errorf("starting the S3 gateway: %w", err)
	}
	defer func() {
		if err := g.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the gateway:", err)
		}
		fmt.Println("gateway stopped.")
	}()
	fmt.Printf("S3 gateway (versitygw %s) serving at %s, data in %s\n", gateway.PinnedVersion, g.Endpoint, rel(g.Dir))
	if err := g.CreateBucket(ctx, bucket); err != nil && !isAlreadyOwned(err) {
		return fmt.Errorf("creating bucket %q: %w", bucket, err)
	}
	envFile := filepath.Join(o.state, "env")
	if err := os.WriteFile(envFile, []byte(strings.Join(g.Env(), "\n")+"\n"), 0o600); err != nil {
		return err
	}

	s := &story{bin: o.bin, gw: g, state: o.state, mntA: o.mnt, mntB: o.mnt + "-b", sig: sig}
	defer s.cleanup()
	if err := s.tell(); err != nil {
		if err == errInterrupted {
			fmt.Println("\ninterrupted: cleaning up …")
			return nil
		}
		return err
	}
	if o.once {
		return nil
	}
	printTour(o.bin, s, envFile)
	select {
	case <-sig:
		fmt.Println("\nstopping: flushing and unmounting …")
	case <-s.anyMountExited():
		fmt.Fprintln(os.Stderr, "a fencefs mount exited unexpectedly; see its log; cleaning up")
	}
	return nil
}

func isAlreadyOwned(err error) bool {
	code := minio.ToErrorResponse(err).Code
	return code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists"
}

// rel shows p relative to the working directory when it is below it.
func rel(p string) string {
	if wd, err := os.Getwd(); err == nil {
		if r, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(r, "..") {
			return "./" + r
		}
	}
	return p
}

func printTour(bin string, s *story, envFile string) {
	b, a, m := rel(bin), rel(s.mntA), rel(s.mntB)
	tries := [][2]string{
		{"cat " + m + "/" + reportName + " " + a + "/" + reportName, "B's report, on both: readers are never fenced"},
		{"echo more > " + a + "/a.txt", "A is fenced: Read-only file system"},
		{"echo more > " + m + "/a.txt", "B is the leader: it lands"},
		{"cat " + a + "/a.txt", "a second later, A reads B's file too"},
		{b + " status " + a, "state fenced, and why (the root xattrs)"},
		{b + " status " + m, fmt.Sprintf("state active, token %d", s.tokenB)},
		{"set -a; . " + rel(envFile) + "; set +a", "credentials + endpoint for the CLI"},
		{b + " epoch show " + bucket, "the bucket's epoch register"},
		{b + " epoch raise " + bucket + " auto", "a third leader: now B is fenced too"},
	}
	width := 0
	for _, t := range tries {
		width = max(width, len(t[0]))
	}
	fmt.Printf("\nBoth mounts stay up: A at %s (fenced), B at %s (the leader). In another terminal, try:\n\n", a, m)
	for _, t := range tries {
		fmt.Printf("  %-*s   # %s\n", width, t[0], t[1])
	}
	fmt.Printf("\nLogs: %s, %s. Press Ctrl-C here to flush, unmount both and stop the server.\n", rel(s.a.logPath), rel(s.b.logPath))
}
