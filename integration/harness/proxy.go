package harness

import (
	"context"
	"fmt"
	"strings"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Proxy is a TCP fault proxy on loopback (Shopify's toxiproxy, in process)
// between a mount and the gateway, for partition tests.
type Proxy struct {
	p *toxiproxy.Proxy
}

// NewProxy starts a proxy on a free 127.0.0.1 port forwarding to upstream
// (host:port), stopped in t.Cleanup.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "s3", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	t.Cleanup(p.Stop)
	return &Proxy{p: p}
}

// Endpoint is the proxy's http:// URL.
func (x *Proxy) Endpoint() string { return "http://" + x.p.Listen }

// Cut partitions the link: every byte in either direction, on existing and
// new connections, is dropped (connections stay open, as across a real
// partition), until Heal.
func (x *Proxy) Cut(t testing.TB) {
	t.Helper()
	for _, dir := range []string{"upstream", "downstream"} {
		js := `{"name":"cut-` + dir + `","type":"timeout","stream":"` + dir + `","attributes":{"timeout":0}}`
		if _, err := x.p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
			t.Fatalf("cut %s: %v", dir, err)
		}
	}
}

// Heal removes the partition.
func (x *Proxy) Heal(t testing.TB) {
	t.Helper()
	for _, dir := range []string{"upstream", "downstream"} {
		if err := x.p.Toxics.RemoveToxic(context.Background(), "cut-"+dir); err != nil {
			t.Fatalf("heal %s: %v", dir, err)
		}
	}
}

// Slow limits the bandwidth of the link from the client to the server
// (uploads) to kbps KiB/s per connection, until Unslow: bytes keep moving,
// slowly.
func (x *Proxy) Slow(t testing.TB, kbps int) {
	t.Helper()
	x.add(t, fmt.Sprintf(`{"name":"slow","type":"bandwidth","stream":"upstream","attributes":{"rate":%d}}`, kbps))
}

// Unslow removes Slow's limit.
func (x *Proxy) Unslow(t testing.TB) { t.Helper(); x.remove(t, "slow") }

// Reset makes the proxy reset every connection (TCP RST) as soon as data
// arrives from the client, until Unreset.
func (x *Proxy) Reset(t testing.TB) {
	t.Helper()
	x.add(t, `{"name":"reset","type":"reset_peer","stream":"upstream","attributes":{"timeout":0}}`)
}

// Unreset removes Reset's toxic.
func (x *Proxy) Unreset(t testing.TB) { t.Helper(); x.remove(t, "reset") }

func (x *Proxy) add(t testing.TB, js string) {
	t.Helper()
	if _, err := x.p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		t.Fatalf("add toxic %s: %v", js, err)
	}
}

func (x *Proxy) remove(t testing.TB, name string) {
	t.Helper()
	if err := x.p.Toxics.RemoveToxic(context.Background(), name); err != nil {
		t.Fatalf("remove toxic %s: %v", name, err)
	}
}

// LoseResponses drops every byte from the server to the client, on existing
// and new connections, until KeepResponses: requests reach the server and
// are carried out, but the client never learns their outcome.
func (x *Proxy) LoseResponses(t testing.TB) {
	t.Helper()
	x.add(t, `{"name":"lose-responses","type":"timeout","stream":"downstream","attributes":{"timeout":0}}`)
}

// KeepResponses removes LoseResponses' toxic.
func (x *Proxy) KeepResponses(t testing.TB) { t.Helper(); x.remove(t, "lose-responses") }
