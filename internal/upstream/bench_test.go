package upstream

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"testing"
	"time"
)

// The figures in doc.go come from these benchmarks: vigil's Transport
// against net/http's, configured as the limiter configures it for an
// https engine, in the same run, on a loopback engine stand-in that reads
// a completion request and answers a small JSON body.
//
//	go test -run '^$' -bench . -benchtime 20000x -count 3 ./internal/upstream/

const (
	benchPrompt = `{"model":"m","prompt":"Say hello in five words.","max_tokens":16,"stream":false}`
	benchAnswer = `{"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"index":0,"text":" Hello there, how are you?","finish_reason":"length"}],"usage":{"prompt_tokens":8,"completion_tokens":16,"total_tokens":24}}`
)

func benchEngine(b *testing.B) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, benchAnswer)
	}))
	b.Cleanup(s.Close)
	return s
}

// netHTTP is net/http's Transport as admission.newTransport builds it.
func netHTTP() *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     4 * time.Second,
		DisableCompression:  true,
	}
}

type closer interface {
	http.RoundTripper
	CloseIdleConnections()
}

func transports() []struct {
	name string
	rt   func() closer
} {
	return []struct {
		name string
		rt   func() closer
	}{
		{"upstream", func() closer { return &Transport{} }},
		{"net-http", func() closer { return netHTTP() }},
	}
}

func post(b *testing.B, rt http.RoundTripper, target string) {
	req, err := http.NewRequest(http.MethodPost, target, bytes.NewReader([]byte(benchPrompt)))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
}

// BenchmarkRoundTrip: one client, one request at a time, straight to the
// engine: the client's own cost per request (latency, allocations).
func BenchmarkRoundTrip(b *testing.B) {
	eng := benchEngine(b)
	for _, tr := range transports() {
		b.Run(tr.name, func(b *testing.B) {
			rt := tr.rt()
			defer rt.CloseIdleConnections()
			post(b, rt, eng.URL) // warm the pool
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				post(b, rt, eng.URL)
			}
		})
	}
}

// BenchmarkProxied: the proxy path, a client through a reverse proxy
// whose Transport is the one measured, to the engine: what the choice
// changes in the latency a client sees.
func BenchmarkProxied(b *testing.B) {
	eng := benchEngine(b)
	target, _ := url.Parse(eng.URL)
	client := netHTTP()
	defer client.CloseIdleConnections()
	for _, tr := range transports() {
		b.Run(tr.name, func(b *testing.B) {
			rt := tr.rt()
			defer rt.CloseIdleConnections()
			rp := httputil.NewSingleHostReverseProxy(target)
			rp.Transport = rt
			front := httptest.NewServer(rp)
			defer front.Close()
			post(b, client, front.URL)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				post(b, client, front.URL)
			}
		})
	}
}

// BenchmarkInterleaved alternates the two transports request by request,
// so both see the same machine load, and reports each one's latency and
// their ratios (upstream / net/http): straight to the engine, and on the
// proxy path (a client through a reverse proxy using the transport).
func BenchmarkInterleaved(b *testing.B) {
	eng := benchEngine(b)
	target, _ := url.Parse(eng.URL)
	for _, path := range []string{"direct", "proxied"} {
		b.Run(path, func(b *testing.B) {
			client := netHTTP()
			defer client.CloseIdleConnections()
			var sends []func()
			for _, tr := range transports() {
				rt := tr.rt()
				defer rt.CloseIdleConnections()
				send := func() { post(b, rt, eng.URL) }
				if path == "proxied" {
					rp := httputil.NewSingleHostReverseProxy(target)
					rp.Transport = rt
					front := httptest.NewServer(rp)
					defer front.Close()
					send = func() { post(b, client, front.URL) }
				}
				send()
				sends = append(sends, send)
			}
			lat := make([][]time.Duration, len(sends))
			b.ResetTimer()
			for b.Loop() {
				for i, send := range sends {
					start := time.Now()
					send()
					lat[i] = append(lat[i], time.Since(start))
				}
			}
			b.StopTimer()
			report(b, lat[0], lat[1])
		})
	}
}

// report gives the latencies of upstream (up) and net/http (nh) in µs,
// and their ratios.
func report(b *testing.B, up, nh []time.Duration) {
	mean := func(d []time.Duration) float64 {
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		return float64(sum.Nanoseconds()) / float64(len(d)) / 1e3
	}
	if u, n := mean(up), mean(nh); n > 0 {
		b.ReportMetric(u/n, "ratio-mean")
	}
	quantile := func(d []time.Duration, q float64) float64 {
		slices.Sort(d)
		return float64(d[int(q*float64(len(d)-1))].Nanoseconds()) / 1e3
	}
	for _, q := range []struct {
		name string
		q    float64
	}{{"p50", 0.5}, {"p90", 0.9}} {
		u, n := quantile(up, q.q), quantile(nh, q.q)
		b.ReportMetric(u, "upstream-"+q.name+"-µs")
		b.ReportMetric(n, "net-http-"+q.name+"-µs")
		if n > 0 {
			b.ReportMetric(u/n, "ratio-"+q.name)
		}
	}
}
