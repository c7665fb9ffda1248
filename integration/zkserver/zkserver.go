// Package zkserver starts and stops ZooKeeper (the real coordinator
// `fencefs run --zookeeper` is tested against): one standalone server or a
// quorum ensemble, on free loopback ports, with the data in a private
// directory.
//
// It runs Debian's ZooKeeper (the zookeeper package: the server's classes
// in /usr/share/java/zookeeper.jar, whose manifest names its dependencies)
// with java from $PATH; $FENCEFS_ZOOKEEPER_JAR names another jar. `make
// deps` installs the package. Readiness and the role of each server come
// from the "srvr" four-letter command, allowed in the configuration this
// package writes.
package zkserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/internal/procwait"
)

// ErrNoServer reports that ZooKeeper or java is not installed.
var ErrNoServer = errors.New("ZooKeeper not found (run `make deps`, or as root: apt-get install zookeeper; or set FENCEFS_ZOOKEEPER_JAR)")

// DefaultJar is where Debian's zookeeper package puts the server.
const DefaultJar = "/usr/share/java/zookeeper.jar"

// slf4jSimple, when present, gives the server a log (Debian's
// libslf4j-java, a dependency of the zookeeper package).
const slf4jSimple = "/usr/share/java/slf4j-simple.jar"

// Find returns the java binary and the ZooKeeper jar, or ErrNoServer.
func Find() (java, jar string, err error) {
	jar = os.Getenv("FENCEFS_ZOOKEEPER_JAR")
	if jar == "" {
		jar = DefaultJar
	}
	if _, err := os.Stat(jar); err != nil {
		return "", "", ErrNoServer
	}
	java, err = exec.LookPath("java")
	if err != nil {
		return "", "", ErrNoServer
	}
	return java, jar, nil
}

// Options configures Start. The zero value is one standalone server in a
// temporary directory, ticking every 500 ms.
type Options struct {
	// Servers is the number of servers: 1 (standalone, the default) or
	// more (a quorum ensemble).
	Servers int
	// Dir holds the data and the logs; empty means a temporary directory
	// removed by Stop.
	Dir string
	// Tick is ZooKeeper's tickTime; the session timeouts it grants lie
	// between 2 and 20 ticks. Zero means 500 ms (1 s to 10 s).
	Tick time.Duration
}

// Ensemble is a running ZooKeeper. Stop it with Stop.
type Ensemble struct {
	Servers []*Server
	Dir     string
	tempDir bool
}

// Server is one ZooKeeper server of an ensemble.
type Server struct {
	ID      int
	Addr    string // client address, 127.0.0.1:PORT
	LogPath string
	args    []string
	dir     string

	mu      sync.Mutex
	cmd     *exec.Cmd     // GUARDED_BY(mu)
	done    chan struct{} // GUARDED_BY(mu): closed when cmd has exited
	running bool          // GUARDED_BY(mu)
}

// Start launches the servers and returns once every one serves clients
// (standalone, leader or follower), or an error with the tail of a log.
func Start(ctx context.Context, opts Options) (*Ensemble, error) {
	java, jar, err := Find()
	if err != nil {
		return nil, err
	}
	// A free port can be taken before ZooKeeper binds it (the server
	// exits): try again with new ports.
	for attempt := 1; ; attempt++ {
		e, err := launch(ctx, opts, java, jar)
		if err == nil || attempt == 3 || !errors.Is(err, procwait.ErrExited) {
			return e, err
		}
	}
}

// launch configures and starts the servers on new free ports.
func launch(ctx context.Context, opts Options, java, jar string) (*Ensemble, error) {
	var err error
	n := max(opts.Servers, 1)
	tick := opts.Tick
	if tick == 0 {
		tick = 500 * time.Millisecond
	}
	e := &Ensemble{Dir: opts.Dir}
	if e.Dir == "" {
		if e.Dir, err = os.MkdirTemp("", "fencefs-zk-"); err != nil {
			return nil, err
		}
		e.tempDir = true
	}
	ports, err := freePorts(3 * n)
	if err != nil {
		e.Stop()
		return nil, err
	}
	var quorum []string
	if n > 1 {
		for i := 0; i < n; i++ {
			quorum = append(quorum, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", i+1, ports[3*i+1], ports[3*i+2]))
		}
	}
	cp := jar
	if _, err := os.Stat(slf4jSimple); err == nil {
		cp += ":" + slf4jSimple
	}
	for i := 0; i < n; i++ {
		s, err := e.configure(i+1, ports[3*i], tick, quorum)
		if err != nil {
			e.Stop()
			return nil, err
		}
		s.args = []string{java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
			"-Dzookeeper.jmx.log4j.disable=true", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
			"-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(s.dir, "zoo.cfg")}
		e.Servers = append(e.Servers, s)
	}
	for _, s := range e.Servers {
		if err := s.Start(); err != nil {
			e.Stop()
			return nil, err
		}
	}
	for _, s := range e.Servers {
		if err := s.WaitServing(ctx, 60*time.Second); err != nil {
			e.Stop()
			return nil, err
		}
	}
	return e, nil
}

// configure writes server id's directory: zoo.cfg and myid.
func (e *Ensemble) configure(id, port int, tick time.Duration, quorum []string) (*Server, error) {
	dir := filepath.Join(e.Dir, "zk"+strconv.Itoa(id))
	data := filepath.Join(dir, "data")
	_ = os.RemoveAll(dir) // a failed earlier attempt's
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	cfg := []string{
		"tickTime=" + strconv.FormatInt(tick.Milliseconds(), 10),
		"initLimit=20", "syncLimit=5",
		"dataDir=" + data,
		"clientPort=" + strconv.Itoa(port), "clientPortAddress=127.0.0.1",
		"admin.enableServer=false",
		"4lw.commands.whitelist=srvr",
		"snapCount=100000", "autopurge.purgeInterval=0",
	}
	cfg = append(cfg, quorum...)
	if err := os.WriteFile(filepath.Join(dir, "zoo.cfg"), []byte(strings.Join(cfg, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(id)+"\n"), 0o600); err != nil {
		return nil, err
	}
	return &Server{ID: id, Addr: fmt.Sprintf("127.0.0.1:%d", port), LogPath: filepath.Join(dir, "zookeeper.log"), dir: dir}, nil
}

// freePorts returns n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for len(out) < n {
		p, err := gateway.FreePort()
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// Start starts the server's JVM (again, after Kill or Stop); WaitServing
// waits until it serves.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil
	}
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start ZooKeeper: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done, s.running = cmd, done, true
	return nil
}

// WaitServing waits until the server answers "srvr" as a member that
// serves clients.
func (s *Server) WaitServing(ctx context.Context, timeout time.Duration) error {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	err := procwait.Ready(ctx, timeout, done, func() bool {
		mode, err := s.Mode()
		return err == nil && mode != ""
	})
	switch {
	case errors.Is(err, procwait.ErrExited):
		return fmt.Errorf("ZooKeeper server %d: %w: %s", s.ID, err, s.LogTail())
	case err != nil:
		return fmt.Errorf("ZooKeeper server %d at %s not serving: %w: %s", s.ID, s.Addr, err, s.LogTail())
	}
	return nil
}

// Mode asks the server its role with "srvr": standalone, leader or
// follower; "" while it does not serve clients (no quorum yet).
func (s *Server) Mode() (string, error) {
	conn, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte("srvr")); err != nil {
		return "", err
	}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		if mode, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return strings.TrimSpace(mode), nil
		}
	}
	return "", sc.Err()
}

// LogTail returns the end of the server's log, for failure messages.
func (s *Server) LogTail() string { return procwait.LogTail(s.LogPath) }

// Pid returns the server's process id (0 when not running).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return 0
	}
	return s.cmd.Process.Pid
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (s *Server) Kill() { s.stop(syscall.SIGKILL) }

// Stop stops the server (SIGTERM, then SIGKILL after 5 s).
func (s *Server) Stop() { s.stop(syscall.SIGTERM) }

func (s *Server) stop(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return
	}
	s.running = false
	_ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGCONT)
	_ = syscall.Kill(s.cmd.Process.Pid, sig)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// Addrs returns the servers' client addresses.
func (e *Ensemble) Addrs() []string {
	var out []string
	for _, s := range e.Servers {
		out = append(out, s.Addr)
	}
	return out
}

// Connect returns the client connect string, "HOST:PORT,…".
func (e *Ensemble) Connect() string { return strings.Join(e.Addrs(), ",") }

// Leader returns the server that leads the ensemble now (nil if none
// answers so).
func (e *Ensemble) Leader() *Server {
	for _, s := range e.Servers {
		if mode, err := s.Mode(); err == nil && (mode == "leader" || mode == "standalone") {
			return s
		}
	}
	return nil
}

// Stop stops every server and removes the directory if Start created it.
// Safe to call more than once.
func (e *Ensemble) Stop() error {
	for _, s := range e.Servers {
		s.Stop()
	}
	if e.tempDir {
		return os.RemoveAll(e.Dir)
	}
	return nil
}

// ForTest starts ZooKeeper for the test (opts.Dir defaults to a test
// directory) and stops it in t.Cleanup. Without ZooKeeper it skips (fails
// when CI is set).
func ForTest(t testing.TB, opts Options) *Ensemble {
	t.Helper()
	if _, _, err := Find(); err != nil {
		gateway.SkipOrFail(t, "%v", err)
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := time.Now()
	e, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start ZooKeeper: %v", err)
	}
	t.Logf("ZooKeeper (%d servers) serving after %v", len(e.Servers), time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stop ZooKeeper: %v", err)
		}
	})
	return e
}

var (
	sharedMu  sync.Mutex
	shared    *Ensemble // GUARDED_BY(sharedMu)
	sharedErr error     // GUARDED_BY(sharedMu)
)

// Shared returns one standalone server for every test of the process that
// calls it (a JVM start saved per test), started at the first call; tests
// keep apart by using paths of their own. StopShared stops it (call it
// from TestMain). Without ZooKeeper it skips (fails when CI is set).
func Shared(t testing.TB) *Ensemble {
	t.Helper()
	if _, _, err := Find(); err != nil {
		gateway.SkipOrFail(t, "%v", err)
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil && sharedErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		start := time.Now()
		shared, sharedErr = Start(ctx, Options{})
		if sharedErr == nil {
			t.Logf("shared ZooKeeper serving after %v", time.Since(start).Round(time.Millisecond))
		}
	}
	if sharedErr != nil {
		t.Fatalf("start ZooKeeper: %v", sharedErr)
	}
	for _, s := range shared.Servers {
		if s.Pid() == 0 {
			t.Fatalf("the shared ZooKeeper was stopped by a test")
		}
	}
	return shared
}

// StopShared stops the server Shared started, if any.
func StopShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		_ = shared.Stop()
		shared = nil
	}
}
