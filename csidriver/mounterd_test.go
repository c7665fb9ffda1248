package csidriver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// lockedBuffer is a log written by the server while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer // GUARDED_BY(mu)
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// serveMounter serves a Mounter whose targets must be below kubelet on a
// unix socket until the test ends, and returns the socket and its log.
// Its binary does not exist: a request that passed the checks fails
// when it runs it.
func serveMounter(t *testing.T, kubelet string) (string, *lockedBuffer) {
	t.Helper()
	log := &lockedBuffer{}
	m, err := NewMounter(MounterOptions{StateDir: t.TempDir(), KubeletDir: kubelet, Binary: "/nonexistent/fencefs",
		Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "fencefs-mounter-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "mounter.sock")
	ln, err := ListenMounter(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return sock, log
}

func TestTheMounterRefusesMalformedRequestsWithOneLine(t *testing.T) {
	const secret = "wJalrXUtnFEMI-very-secret"
	sock, log := serveMounter(t, "/k")
	client := newMounterClient(sock)
	valid := func(edit func(r map[string]any)) string {
		r := map[string]any{"target": "/k/pods/p/mount", "bucket": "data", "options": map[string]string{"meta_ttl": "5s"},
			"credentials": map[string]string{SecretAccessKeyID: "AKIDEXAMPLE", SecretSecretAccessKey: secret}}
		edit(r)
		b, _ := json.Marshal(r)
		return string(b)
	}
	calls := 0
	for _, tc := range []struct {
		name, method, path, body string
		code                     codes.Code
		http                     int
		want                     string
	}{
		{"a body that is not JSON", "POST", pathMount, `{"target":`, codes.InvalidArgument, 400, "request body: unexpected EOF"},
		{"an unknown field", "POST", pathMount, valid(func(r map[string]any) { r["argv"] = []string{"sh"} }), codes.InvalidArgument, 400, `unknown field "argv"`},
		{"two objects", "POST", pathMount, valid(func(map[string]any) {}) + "{}", codes.InvalidArgument, 400, "more than one JSON object"},
		{"a body too large", "POST", pathMount, `{"bucket":"` + strings.Repeat("b", maxBody) + `"}`, codes.InvalidArgument, 400, "request body too large"},
		{"no target", "POST", pathMount, valid(func(r map[string]any) { delete(r, "target") }), codes.InvalidArgument, 400, "target is missing"},
		{"a relative target", "POST", pathMount, valid(func(r map[string]any) { r["target"] = "k/t" }), codes.InvalidArgument, 400, `target "k/t" is not a clean absolute path`},
		{"a target that climbs out", "POST", pathMount, valid(func(r map[string]any) { r["target"] = "/k/../etc" }), codes.InvalidArgument, 400, "not a clean absolute path"},
		{"a target outside the kubelet directory", "POST", pathMount, valid(func(r map[string]any) { r["target"] = "/etc/t" }), codes.InvalidArgument, 400, "target /etc/t is not below the kubelet directory /k"},
		{"the kubelet directory itself", "POST", pathMount, valid(func(r map[string]any) { r["target"] = "/k" }), codes.InvalidArgument, 400, "is not below the kubelet directory"},
		{"no bucket", "POST", pathMount, valid(func(r map[string]any) { delete(r, "bucket") }), codes.InvalidArgument, 400, "bucket is missing"},
		{"a bucket that reads as a flag", "POST", pathMount, valid(func(r map[string]any) { r["bucket"] = "--token=9" }), codes.InvalidArgument, 400, "is not a bucket name"},
		{"an option the driver owns", "POST", pathMount, valid(func(r map[string]any) { r["options"] = map[string]string{"token": "9"} }), codes.InvalidArgument, 400, "option token is not accepted"},
		{"an option list in a name", "POST", pathMount, valid(func(r map[string]any) { r["options"] = map[string]string{"a,config": "/x"} }), codes.InvalidArgument, 400, "is not an option"},
		{"a credential as an option", "POST", pathMount, valid(func(r map[string]any) { r["options"] = map[string]string{"secret_key": secret} }), codes.InvalidArgument, 400, "option secret_key is not accepted"},
		{"a variable that is not a credential", "POST", pathMount, valid(func(r map[string]any) { r["credentials"] = map[string]string{"LD_PRELOAD": "/tmp/x.so"} }), codes.InvalidArgument, 400, `secret key "LD_PRELOAD" is not accepted`},
		{"an access key alone", "POST", pathMount, valid(func(r map[string]any) { r["credentials"] = map[string]string{SecretAccessKeyID: "AKID"} }), codes.InvalidArgument, 400, "needs both"},
		{"web identity with keys as well", "POST", pathMount, valid(func(r map[string]any) { r["web_identity"] = true }), codes.InvalidArgument, 400, "a mount with web identity takes no credentials"},
		{"web identity without the driver's token file", "POST", pathMount, valid(func(r map[string]any) { r["web_identity"] = true; delete(r, "credentials") }), codes.FailedPrecondition, 400, "the pod's token file"},
		{"a token file as an option", "POST", pathMount, valid(func(r map[string]any) { r["options"] = map[string]string{"web_identity_token_file": "/etc/shadow"} }), codes.InvalidArgument, 400, "option web_identity_token_file is not accepted"},
		{"an unmount of a relative target", "POST", pathUnmount, `{"target":"t"}`, codes.InvalidArgument, 400, "not a clean absolute path"},
		{"an unmount outside the kubelet directory", "POST", pathUnmount, `{"target":"/proc"}`, codes.InvalidArgument, 400, "not below the kubelet directory"},
		{"a mount by GET", "GET", pathMount, "", codes.Unimplemented, 404, "no call GET /v1/mount (accepted: POST /v1/mount, POST /v1/unmount, GET /v1/probe)"},
		{"an unknown call", "POST", "/v1/exec", `{}`, codes.Unimplemented, 404, "no call POST /v1/exec"},
	} {
		calls++
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, "http://mounter"+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var e errorResponse
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("answer %q: %v", b, err)
			}
			if resp.StatusCode != tc.http || e.Code != tc.code || !strings.Contains(e.Error, tc.want) {
				t.Errorf("answer %s %v %q; want %d %v with %q", resp.Status, e.Code, e.Error, tc.http, tc.code, tc.want)
			}
			if strings.Count(string(b), "\n") != 1 || strings.Contains(e.Error, "\n") {
				t.Errorf("the answer is not one line: %q", b)
			}
			if strings.Contains(string(b), secret) {
				t.Errorf("the answer shows a secret: %q", b)
			}
		})
	}
	if strings.Contains(log.String(), secret) {
		t.Errorf("the mounter's log shows a secret:\n%s", log)
	}
	if n := strings.Count(log.String(), "call failed"); n != calls {
		t.Errorf("the mounter logged %d failed calls; want one per request (%d):\n%s", n, calls, log)
	}
}

// The driver's client turns the mounter's answers into the gRPC statuses
// the driver returns, and a mounter that does not answer into Unavailable.
func TestTheMounterClientReturnsTheMountersStatuses(t *testing.T) {
	sock, _ := serveMounter(t, "/k")
	client := newMounterClient(sock)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
		want string
	}{
		{"a target outside the kubelet directory", func() error {
			_, err := client.mount(ctx, volumeSpec{Target: "/elsewhere/t", Bucket: "b", Options: map[string]string{}})
			return err
		}, codes.InvalidArgument, "target /elsewhere/t is not below the kubelet directory /k"},
		{"a mount whose binary cannot run", func() error {
			_, err := client.mount(ctx, volumeSpec{Target: "/k/t", Bucket: "b", Options: map[string]string{"read_only": "true"}})
			return err
		}, codes.Internal, "fencefs mount of b at /k/t failed"},
		{"an unmount of nothing mounted", func() error {
			lazy, err := client.unmount(ctx, "/k/nothing-here")
			if err == nil && lazy {
				t.Error("an unmount of nothing was lazy")
			}
			return err
		}, codes.OK, ""},
		{"no mounter", func() error {
			_, err := newMounterClient(filepath.Join(t.TempDir(), "none.sock")).unmount(ctx, "/k/t")
			return err
		}, codes.Unavailable, "the mounter does not answer at "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := status.Convert(tc.call())
			if st.Code() != tc.code || !strings.Contains(st.Message(), tc.want) || strings.Contains(st.Message(), "\n") {
				t.Errorf("%v %q; want %v, one line with %q", st.Code(), st.Message(), tc.code, tc.want)
			}
		})
	}
}
