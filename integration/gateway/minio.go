package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
)

// MinIOPinnedVersion is the MinIO server the Makefile installs (the last
// community commit) and the test suite runs against besides the gateway.
const MinIOPinnedVersion = "v0.0.0-20260212201848-7aac2a2c5b7c"

// ErrNoMinIO reports that no MinIO server binary was found.
var ErrNoMinIO = errors.New("minio binary not found (run `make bin/minio`, or set FENCEFS_MINIO)")

// FindMinIO locates the MinIO server binary: $FENCEFS_MINIO, else
// <repo>/bin/minio, else minio on $PATH.
func FindMinIO() (string, error) { return FindTool("FENCEFS_MINIO", "minio", ErrNoMinIO) }

// MinIOOptions configures StartMinIO. The zero value is usable: one drive.
type MinIOOptions struct {
	// Bin is the minio binary; empty means FindMinIO().
	Bin string
	// Dir holds the drives (subdirectories d1…dN) and the log; empty means
	// a new temporary directory removed by Stop.
	Dir string
	// Drives is the number of drives of the single server: 0 or 1 is one
	// drive (no erasure coding); 4 or more is one erasure set (data and
	// parity shards on separate drives, as a production server keeps them).
	Drives int
	// AccessKey and SecretKey of the root user; empty means random ones.
	AccessKey, SecretKey string
	// Log receives the server's stdout/stderr; nil means a file minio.log
	// in Dir.
	Log *os.File
	// Env is added to the server's environment ("K=V", after the
	// defaults): an OpenID provider's MINIO_IDENTITY_OPENID_* settings,
	// say, and SSL_CERT_FILE for the CA that MinIO must trust to reach it.
	Env []string
}

// StartMinIO launches a single MinIO server on a free port of 127.0.0.1 (its
// console on another, also on loopback, and turned off) and returns once it
// serves S3 requests with write quorum, or an error with the tail of its log
// if it exits or is not ready within ctx's deadline (or 30 s).
//
// MINIO_CI_CD is set: without it MinIO refuses several drives on the root
// filesystem, which is where a test's temporary directories are.
func StartMinIO(ctx context.Context, opts MinIOOptions) (*Gateway, error) {
	bin := opts.Bin
	if bin == "" {
		var err error
		if bin, err = FindMinIO(); err != nil {
			return nil, err
		}
	}
	kind := MinIO
	if opts.Drives > 1 {
		kind = MinIOErasure
	}
	g, err := newServer(kind, opts.Dir, opts.AccessKey, opts.SecretKey)
	if err != nil {
		return nil, err
	}
	drives := []string{filepath.Join(g.Dir, "d1")}
	if opts.Drives > 1 {
		// MinIO expands the ellipsis into d1 … dN.
		drives = []string{filepath.Join(g.Dir, fmt.Sprintf("d{1...%d}", opts.Drives))}
		for i := 1; i <= opts.Drives; i++ {
			if err := os.MkdirAll(filepath.Join(g.Dir, fmt.Sprintf("d%d", i)), 0o700); err != nil {
				return nil, g.discard(err)
			}
		}
	}
	return g, g.startOnFreePort(ctx, 0, func(port int) error {
		console, err := FreePort()
		if err != nil {
			return err
		}
		g.Addr = fmt.Sprintf("127.0.0.1:%d", port)
		g.Endpoint = "http://" + g.Addr
		args := append([]string{"server", "--quiet", "--address", g.Addr,
			"--console-address", fmt.Sprintf("127.0.0.1:%d", console)}, drives...)
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(),
			"MINIO_ROOT_USER="+g.AccessKey, "MINIO_ROOT_PASSWORD="+g.SecretKey,
			"MINIO_CI_CD=1", "MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_REGION="+g.Region)
		cmd.Env = append(cmd.Env, opts.Env...)
		// The cluster health check answers 200 once the server has write
		// quorum: every drive of the erasure set is formatted and online.
		return g.run(ctx, cmd, opts.Log, "minio.log", "/minio/health/cluster",
			func(r *http.Response) bool { return r.StatusCode == http.StatusOK })
	})
}
