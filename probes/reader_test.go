package probes

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/configs"
)

// The limiter's load is read by the engine's profile, whichever engine it
// is: before one reader, it read vLLM's names alone and saw nothing of
// SGLang's or llama.cpp's prefill series.
func TestReaderLoadByProfile(t *testing.T) {
	const twoRanks = `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0"} 1
vllm:num_requests_waiting{engine="1"} 2
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0"} 4
vllm:num_requests_running{engine="1"} 5
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0"} 0.2
vllm:kv_cache_usage_perc{engine="1"} 0.4
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0"} 12000
vllm:prompt_tokens_total{engine="1"} 24000
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0"} 10000
vllm:prefix_cache_hits_total{engine="1"} 20000
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf"} 1
vllm:time_to_first_token_seconds_sum{engine="0"} 0.3
vllm:time_to_first_token_seconds_count{engine="0"} 1
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf"} 2
vllm:time_to_first_token_seconds_sum{engine="1"} 0.6
vllm:time_to_first_token_seconds_count{engine="1"} 2
`
	const legacyKV = `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting 3
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc 0.5
`
	file := func(name string) string {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	vllm, _ := configs.ProfileFor(configs.KindVLLM)
	auto := func() *Reader {
		return NewReader(vllm.Metrics, configs.KindAuto, (configs.Engine{}).MetricsFor)
	}
	for _, tc := range []struct {
		name, text string
		reader     *Reader
		kind       string
		want       Load
	}{
		{"vLLM, two ranks", twoRanks, NewReader(vllm.Metrics, configs.KindVLLM, nil), configs.KindVLLM,
			Load{Waiting: 3, Running: 9, KVUsage: 0.3, PromptTokens: 36000, FirstTokens: 3, CachedTokens: 30000}},
		{"vLLM before v1: the older KV cache name", legacyKV, NewReader(vllm.Metrics, configs.KindVLLM, nil), configs.KindVLLM,
			Load{Waiting: 3, KVUsage: 0.5, PromptTokens: -1, FirstTokens: -1, CachedTokens: -1}},
		{"SGLang", file("profile-sglang.txt"), auto(), configs.KindSGLang,
			Load{Waiting: 12, Running: 16, KVUsage: 0.28, PromptTokens: 1.65e6, FirstTokens: 217, CachedTokens: -1}},
		// llama.cpp has no KV share, first-token count or prefix-cache
		// hits (its prompt tokens already leave cached ones out).
		{"llama.cpp", file("profile-llamacpp.txt"), auto(), configs.KindLlamaCpp,
			Load{Waiting: 12, Running: 16, KVUsage: -1, PromptTokens: 1.65e6, FirstTokens: -1, CachedTokens: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.reader.Load(strings.NewReader(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			if tc.reader.Kind() != tc.kind {
				t.Errorf("kind %q, want %q", tc.reader.Kind(), tc.kind)
			}
			if math.Abs(got.KVUsage-tc.want.KVUsage) > 1e-9 {
				t.Errorf("KV usage %v, want %v", got.KVUsage, tc.want.KVUsage)
			}
			got.KVUsage = tc.want.KVUsage
			if got != tc.want {
				t.Errorf("read %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Without the waiting gauge there is no queue to read: an error naming it,
// never zeros.
func TestReaderLoadNeedsTheWaitingGauge(t *testing.T) {
	p, _ := configs.ProfileFor(configs.KindLlamaCpp)
	r := NewReader(p.Metrics, p.Kind, nil)
	_, err := r.Load(strings.NewReader("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 3\n"))
	if err == nil || !strings.Contains(err.Error(), "llamacpp:requests_deferred") {
		t.Fatalf("err %v, want one naming llamacpp:requests_deferred", err)
	}
}

// The limiter's read goes over HTTP as the watchdog's scrape does: the
// engine's key sent and never told, every failure naming the endpoint.
func TestReaderReadsOverHTTP(t *testing.T) {
	const key = "sk-engine-secret"
	vllm, _ := configs.ProfileFor(configs.KindVLLM)
	for _, tc := range []struct {
		name    string
		status  int
		ctype   string
		body    string
		want    float64
		wantErr string
	}{
		{"a scrape", 200, "text/plain; version=0.0.4", "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 7\n", 7, ""},
		{"an engine error", 500, "text/plain", "boom", 0, "/metrics: 500"},
		{"not a text scrape", 200, "application/json", `{"x":1}`, 0, "/metrics: metrics: unexpected content type"},
		{"no waiting gauge", 200, "text/plain", "# TYPE other gauge\nother 1\n", 0, "/metrics: metrics: missing vllm:num_requests_waiting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != EndpointMetrics || r.Header.Get("Authorization") != "Bearer "+key {
					http.Error(w, "wrong request "+r.URL.Path, http.StatusBadRequest)
					return
				}
				w.Header().Set("Content-Type", tc.ctype)
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			r := NewReader(vllm.Metrics, configs.KindVLLM, nil)
			ld, err := r.Read(context.Background(), Target{URL: srv.URL + "/", APIKey: key})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want %q...", err, tc.wantErr)
			case err != nil && strings.Contains(err.Error(), key):
				t.Fatalf("the error tells the key: %v", err)
			case err == nil && ld.Waiting != tc.want:
				t.Errorf("waiting %v, want %v", ld.Waiting, tc.want)
			}
		})
	}
}
