package s3_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencefs/fencefs/integration/gateway"
	"github.com/fencefs/fencefs/objstore"
	"github.com/fencefs/fencefs/objstore/s3"
	"github.com/fencefs/fencefs/objstore/storetest"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// writeCA writes a private CA and a server certificate for 127.0.0.1 signed
// by it; it returns the paths of the CA, the certificate and the key.
func writeCA(t *testing.T, dir string) (caPath, certPath, keyPath string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fencefs test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srv := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server.key", "EC PRIVATE KEY", keyDER)
}

// startTLSGateway runs the gateway with TLS (gateway.Start serves plain
// HTTP only) and returns its https endpoint.
func startTLSGateway(t *testing.T, cert, key, access, secret string) string {
	t.Helper()
	bin, err := gateway.FindBinary()
	if err != nil {
		gateway.SkipOrFail(t, "%v", err)
	}
	port, err := gateway.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "--port", addr, "--quiet", "--cert", cert, "--key", key, "posix", root)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+access, "ROOT_SECRET_ACCESS_KEY="+secret)
	log, err := os.Create(filepath.Join(t.TempDir(), "gw.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); log.Close() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // readiness probe only
		if err == nil {
			c.Close()
			return "https://" + addr
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("TLS gateway not ready: %v: %s", err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestTLSWithCustomCA(t *testing.T) {
	dir := t.TempDir()
	caPath, certPath, keyPath := writeCA(t, dir)
	const access, secret = "tlsaccess", "tlssecret0123456789"
	endpoint := startTLSGateway(t, certPath, keyPath, access, secret)
	ctx := ctxT(t)

	// Create a bucket with a client trusting the CA.
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(caPath)
	pool.AppendCertsFromPEM(pem)
	tr, err := minio.DefaultTransport(true)
	if err != nil {
		t.Fatal(err)
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	mc, err := minio.New(strings.TrimPrefix(endpoint, "https://"), &minio.Options{Creds: credentials.NewStaticV4(access, secret, ""), Secure: true, Transport: tr, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	if err := mc.MakeBucket(ctx, "tls-bucket", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	base := s3.Config{Endpoint: endpoint, Bucket: "tls-bucket", AccessKey: access, SecretKey: secret, PathStyle: true, MaxRetries: -1}

	works := func(t *testing.T, cfg s3.Config) {
		t.Helper()
		s := newStore(t, cfg)
		info := storetest.MustPut(t, ctx, s, "k", []byte("over TLS"), objstore.PutOptions{})
		if err := s.Delete(ctx, "k", objstore.Condition{IfMatch: info.ETag}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("CAFile", func(t *testing.T) {
		t.Setenv("AWS_CA_BUNDLE", "")
		cfg := base
		cfg.CAFile = caPath
		works(t, cfg)
	})
	t.Run("AWS_CA_BUNDLE", func(t *testing.T) {
		t.Setenv("AWS_CA_BUNDLE", caPath)
		works(t, base)
	})
	t.Run("InsecureSkipVerify", func(t *testing.T) {
		t.Setenv("AWS_CA_BUNDLE", "")
		cfg := base
		cfg.InsecureSkipVerify = true
		works(t, cfg)
	})
	t.Run("untrusted certificate is a clear error", func(t *testing.T) {
		t.Setenv("AWS_CA_BUNDLE", "")
		_, err := s3.New(ctx, base)
		if !errors.Is(err, objstore.ErrUnavailable) || !strings.Contains(err.Error(), "not trusted") {
			t.Fatalf("got %v", err)
		}
	})
}
