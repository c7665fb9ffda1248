package s3

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// TestASilentRequestOutlastsTheIdleTimeoutWhileTheServerAnswersOthers: a
// request the server keeps silent for several idle timeouts (as MinIO keeps
// a request waiting for a key's lock) succeeds while the server answers the
// probe, up to the server wait; it fails after one idle timeout when the
// probe gets no answer (a black hole) or after the server wait when the
// silence lasts longer.
func TestASilentRequestOutlastsTheIdleTimeoutWhileTheServerAnswersOthers(t *testing.T) {
	const idle = 100 * time.Millisecond
	mux := http.NewServeMux()
	mux.HandleFunc("/locked", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * idle) // waiting for a lock: no byte moves
		_, _ = w.Write([]byte("done"))
	})
	mux.HandleFunc("/probe", func(http.ResponseWriter, *http.Request) {})
	srv := &http.Server{Handler: mux}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	base := "http://" + ln.Addr().String()

	for _, tc := range []struct {
		name    string
		answers bool
		max     time.Duration
		timeout bool
	}{
		{"the server answers others", true, 50 * idle, false},
		{"the server answers nothing else", false, 50 * idle, true},
		{"silent for longer than the server wait", true, 2 * idle, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &serverWait{max: tc.max, quick: 10 * idle, log: slog.New(slog.DiscardHandler)}
			var probes atomic.Int32
			var client *http.Client
			w.probe = func(ctx context.Context) error {
				probes.Add(1)
				if !tc.answers {
					return errors.New("no answer")
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodHead, base+"/probe", nil)
				resp, err := client.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				return err
			}
			client = &http.Client{Transport: tracking{base: &http.Transport{DialContext: dialer(time.Second, idle, w)}}}
			start := time.Now()
			resp, err := client.Get(base + "/locked")
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if got := err != nil && errors.Is(err, os.ErrDeadlineExceeded); got != tc.timeout {
				t.Fatalf("after %v and %d probes: err = %v, want a timeout: %v", time.Since(start), probes.Load(), err, tc.timeout)
			}
			if probes.Load() == 0 {
				t.Errorf("the silent request never asked whether the server answers others")
			}
		})
	}
}
