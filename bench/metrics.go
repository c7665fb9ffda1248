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

// requestCounts is a snapshot of a fencefs mount's S3 request metrics, by
// request kind: the number of requests (fencefs_s3_requests_total, summed
// over outcomes) and the seconds spent in them
// (fencefs_s3_request_duration_seconds_sum).
type requestCounts struct {
	n    map[string]float64
	secs map[string]float64
}

// reqStat is what a phase did of one request kind: requests per operation
// of the phase, and their mean latency in seconds.
type reqStat struct {
	PerOp       float64
	MeanSeconds float64
}

// scrapeRequests reads the request counters from a fencefs metrics
// endpoint (http://addr/metrics).
func scrapeRequests(ctx context.Context, addr string) (requestCounts, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return requestCounts{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return requestCounts{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return requestCounts{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseRequestCounts(resp.Body)
}

// parseRequestCounts extracts the request counters and latency sums from
// the Prometheus text format.
func parseRequestCounts(r io.Reader) (requestCounts, error) {
	out := requestCounts{n: map[string]float64{}, secs: map[string]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var dst map[string]float64
		var rest string
		if r, ok := strings.CutPrefix(line, "fencefs_s3_requests_total{"); ok {
			dst, rest = out.n, r
		} else if r, ok := strings.CutPrefix(line, "fencefs_s3_request_duration_seconds_sum{"); ok {
			dst, rest = out.secs, r
		} else {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			return out, fmt.Errorf("malformed metric line %q", line)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return out, fmt.Errorf("metric line %q: %w", line, err)
		}
		op := ""
		for _, l := range strings.Split(labels, ",") {
			if val, ok := strings.CutPrefix(l, `op="`); ok {
				op = strings.TrimSuffix(val, `"`)
			}
		}
		dst[op] += v
	}
	return out, sc.Err()
}

// perOp returns, for every request kind made between the snapshots, the
// requests per operation (ops operations) and their mean latency.
func perOp(before, after requestCounts, ops int) map[string]reqStat {
	out := map[string]reqStat{}
	for k, v := range after.n {
		d := v - before.n[k]
		if d <= 0 {
			continue
		}
		out[k] = reqStat{PerOp: d / float64(ops), MeanSeconds: (after.secs[k] - before.secs[k]) / d}
	}
	return out
}
