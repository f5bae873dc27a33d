package admission

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// The proxy's cost: the same tiny request against a fast upstream, direct
// and through the limiter (fixed cap, no contention). Compare ns/op:
//
//	go test -run '^$' -bench Proxy ./admission/
func benchUpstream(b *testing.B) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","choices":[{"text":"ok"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	b.Cleanup(srv.Close)
	return srv
}

func benchCalls(b *testing.B, base string) {
	c := newClient(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, base+"/v1/completions",
			strings.NewReader(completionBody))
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

func BenchmarkProxyDirect(b *testing.B) {
	benchCalls(b, benchUpstream(b).URL)
}

func BenchmarkProxyLimiter(b *testing.B) {
	cfg := testConfig()
	cfg.MaxInFlight = 64
	p := startProxy(b, cfg, benchUpstream(b).URL)
	benchCalls(b, p.url)
}

// BenchmarkProxyLimiterKeyed pays for coalescing too: every call carries a
// fresh idempotency key, so it runs as an execution with a replay buffer.
func BenchmarkProxyLimiterKeyed(b *testing.B) {
	cfg := testConfig()
	cfg.MaxInFlight = 64
	p := startProxy(b, cfg, benchUpstream(b).URL)
	c := newClient(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, p.url+"/v1/completions",
			strings.NewReader(completionBody))
		req.Header.Set("Idempotency-Key", "bench-"+strconv.Itoa(i))
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
