package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// requestCounts is a snapshot of a fencefs mount's S3 request counter
// (fencefs_s3_requests_total), summed over outcomes: request kind → count.
type requestCounts map[string]float64

// scrapeRequests reads the request counters from a fencefs metrics
// endpoint (http://addr/metrics).
func scrapeRequests(ctx context.Context, addr string) (requestCounts, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseRequestCounts(resp.Body)
}

// parseRequestCounts extracts fencefs_s3_requests_total{op="…",…} N lines
// from the Prometheus text format.
func parseRequestCounts(r io.Reader) (requestCounts, error) {
	const name = "fencefs_s3_requests_total{"
	out := requestCounts{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			return nil, fmt.Errorf("malformed metric line %q", line)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %w", line, err)
		}
		op := ""
		for _, l := range strings.Split(labels, ",") {
			if val, ok := strings.CutPrefix(l, `op="`); ok {
				op = strings.TrimSuffix(val, `"`)
			}
		}
		out[op] += v
	}
	return out, sc.Err()
}

// perOp returns (after - before) / ops for every request kind that
// changed.
func perOp(before, after requestCounts, ops int) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d / float64(ops)
		}
	}
	return out
}
