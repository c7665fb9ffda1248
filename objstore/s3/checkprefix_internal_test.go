package s3

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// New's check of the bucket lists the caller's prefix when it names one:
// credentials whose policy allows listing only that prefix pass it.
func TestNewChecksTheBucketByListingTheCallersPrefix(t *testing.T) {
	for _, tc := range []struct{ prefix, want string }{{"", ""}, {"workloads/app-a/pvc-1/", "workloads/app-a/pvc-1/"}} {
		var mu sync.Mutex
		var lists []string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "2" {
				mu.Lock()
				lists = append(lists, r.URL.Query().Get("prefix"))
				mu.Unlock()
			}
			w.Header().Set("Content-Type", "application/xml")
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>b</Name><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>`))
		}))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := New(ctx, Config{Endpoint: srv.URL, Bucket: "b", AccessKey: "a", SecretKey: "s", PathStyle: true, CheckPrefix: tc.prefix})
		cancel()
		if err != nil {
			t.Fatalf("New with check prefix %q: %v", tc.prefix, err)
		}
		s.Close()
		srv.Close()
		if len(lists) != 1 || lists[0] != tc.want {
			t.Errorf("check prefix %q: New listed prefixes %q; want one listing of %q", tc.prefix, lists, tc.want)
		}
	}
}
