package probes

import (
	"math"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/configs"
)

// The limiter's load, read by each engine's profile: the queue gauges and
// the prefill series summed over the data-parallel ranks, the KV share
// their mean; a series the engine does not have reads as unknown (-1).
func TestReaderLoadByProfile(t *testing.T) {
	const vllmTwoRanks = `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0"} 2
vllm:num_requests_waiting{engine="1"} 3
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0"} 4
vllm:num_requests_running{engine="1"} 4
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
	const vllmOld = `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting 3
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc 0.5
`
	const sglang = `# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0"} 5
sglang:num_queue_reqs{dp_rank="1"} 1
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0"} 8
sglang:num_running_reqs{dp_rank="1"} 8
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0"} 0.9
sglang:token_usage{dp_rank="1"} 0.7
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total 5000
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="+Inf"} 7
sglang:time_to_first_token_seconds_sum 1.5
sglang:time_to_first_token_seconds_count 7
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting 99
`
	// llama.cpp's own /metrics (tools/server), as llama-server writes it.
	const llamacpp = `# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 3163
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 900
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 9151
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 5243
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 22
`
	vllm, _ := configs.ProfileFor(configs.KindVLLM)
	sg, _ := configs.ProfileFor(configs.KindSGLang)
	lc, _ := configs.ProfileFor(configs.KindLlamaCpp)
	for _, tc := range []struct {
		name  string
		names configs.MetricNames
		kind  string
		text  string
		want  Load
	}{
		{"vLLM, two ranks", vllm.Metrics, configs.KindVLLM, vllmTwoRanks,
			Load{Waiting: 5, Running: 8, KVUsage: 0.3, PromptTokens: 36000, FirstTokens: 3, CachedTokens: 30000}},
		{"vLLM before v1: the older KV name", vllm.Metrics, configs.KindVLLM, vllmOld,
			Load{Waiting: 3, KVUsage: 0.5, PromptTokens: -1, FirstTokens: -1, CachedTokens: -1}},
		{"SGLang by its own names", sg.Metrics, configs.KindSGLang, sglang,
			Load{Waiting: 6, Running: 16, KVUsage: 0.8, PromptTokens: 5000, FirstTokens: 7, CachedTokens: -1}},
		// No first-token count and no prefix-cache hits the meter could
		// subtract: unknown, never zero.
		{"llama.cpp by its own names", lc.Metrics, configs.KindLlamaCpp, llamacpp,
			Load{Waiting: 22, Running: 2, KVUsage: -1, PromptTokens: 3163, FirstTokens: -1, CachedTokens: -1}},
		{"auto finds llama.cpp", vllm.Metrics, configs.KindAuto, llamacpp,
			Load{Waiting: 22, Running: 2, KVUsage: -1, PromptTokens: 3163, FirstTokens: -1, CachedTokens: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var resolve func(string) configs.MetricNames
			if tc.kind == configs.KindAuto {
				resolve = configs.Engine{Metrics: tc.names}.MetricsFor
			}
			r := NewReader(tc.names, tc.kind, resolve)
			got, err := r.Load(strings.NewReader(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got.KVUsage-tc.want.KVUsage) > 1e-9 {
				t.Errorf("KV usage %v, want %v", got.KVUsage, tc.want.KVUsage)
			}
			got.KVUsage = tc.want.KVUsage
			if got != tc.want {
				t.Errorf("read %+v, want %+v", got, tc.want)
			}
			if tc.kind == configs.KindAuto && r.Kind() != configs.KindLlamaCpp {
				t.Errorf("auto reads the scrape as %q, want %q", r.Kind(), configs.KindLlamaCpp)
			}
		})
	}
}

// Without the waiting gauge there is no queue to read: an error naming the
// series, never a zero queue.
func TestReaderLoadNeedsTheWaitingGauge(t *testing.T) {
	lc, _ := configs.ProfileFor(configs.KindLlamaCpp)
	r := NewReader(lc.Metrics, configs.KindLlamaCpp, nil)
	_, err := r.Load(strings.NewReader("# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n"))
	if err == nil || !strings.Contains(err.Error(), "llamacpp:requests_deferred") {
		t.Fatalf("error %v, want one naming llamacpp:requests_deferred", err)
	}
	if _, err := r.Load(strings.NewReader("<html>oops</html>")); err == nil {
		t.Fatal("an HTML body read as a scrape")
	}
}
