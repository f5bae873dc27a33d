package configs

import (
	"slices"
	"testing"
)

func TestEngineKindPresetsAndExplicitKeys(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		// want: the names the watchdog reads once the kind is known.
		kind    string
		waiting string
		running string
		heart   []string
		first   string
		rank    string
	}{
		{
			name: "no kind and no block: auto, vLLM's names until a scrape decides",
			yaml: "engine:\n  url: http://127.0.0.1:8000\n",
			kind: KindAuto, waiting: "vllm:num_requests_waiting", running: "vllm:num_requests_running",
			heart: []string{"vllm:iteration_tokens_total_count", "vllm:prefix_cache_queries_total", "vllm:request_success_total"},
			first: "vllm:time_to_first_token_seconds_count", rank: "engine",
		},
		{
			name: "sglang takes its preset whole",
			yaml: "engine:\n  url: http://127.0.0.1:30000\n  kind: sglang\n",
			kind: KindSGLang, waiting: "sglang:num_queue_reqs", running: "sglang:num_running_reqs",
			heart: []string{"sglang:num_requests_total"},
		},
		{
			name: "llamacpp with one key of its own keeps the rest of the preset",
			yaml: "engine:\n  url: http://127.0.0.1:8080\n  kind: llamacpp\n  metrics:\n    running: \"my:busy_slots\"\n",
			kind: KindLlamaCpp, waiting: "llamacpp:requests_deferred", running: "my:busy_slots",
			heart: []string{"llamacpp:n_decode_total"},
		},
		{
			name: "an explicit empty heartbeats list stays empty under a preset",
			yaml: "engine:\n  url: http://127.0.0.1:30000\n  kind: sglang\n  metrics:\n    heartbeats: []\n    decode:\n      first_tokens: \"sglang:time_to_first_token_seconds_count\"\n",
			kind: KindSGLang, waiting: "sglang:num_queue_reqs", running: "sglang:num_running_reqs",
			heart: []string{}, first: "sglang:time_to_first_token_seconds_count",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte(tc.yaml), now)
			if err != nil {
				t.Fatal(err)
			}
			e := cfg.Engine
			if e.Kind != tc.kind {
				t.Fatalf("kind = %q, want %q", e.Kind, tc.kind)
			}
			m := e.Metrics
			if m.Waiting != tc.waiting || m.Running != tc.running || m.Decode.FirstTokens != tc.first || m.RankLabel != tc.rank {
				t.Errorf("metrics = %+v", m)
			}
			if !slices.Equal(m.Heartbeats, tc.heart) && !(len(m.Heartbeats) == 0 && len(tc.heart) == 0) {
				t.Errorf("heartbeats = %q, want %q", m.Heartbeats, tc.heart)
			}
		})
	}
}

func TestAutoResolvesLaterWithTheFileKeysKept(t *testing.T) {
	cfg, err := Parse([]byte("engine:\n  url: http://127.0.0.1:8000\n  metrics:\n    waiting: \"custom:queue\"\n"), now)
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Engine.MetricsFor(KindSGLang)
	if m.Waiting != "custom:queue" || m.Running != "sglang:num_running_reqs" || m.Extras[ExtraPromptTokens] != "sglang:prompt_tokens_total" {
		t.Errorf("sglang resolved with the file's waiting key: %+v", m)
	}
	if got := cfg.Engine.Metrics.Waiting; got != "custom:queue" {
		t.Errorf("provisional waiting = %q", got)
	}
	// The preset is not shared: changing one resolution leaves the next alone.
	m.Progress[0] = "changed"
	if again := cfg.Engine.MetricsFor(KindSGLang); again.Progress[0] != "sglang:prompt_tokens_total" {
		t.Errorf("preset was mutated: %q", again.Progress)
	}
}

func TestDetectKind(t *testing.T) {
	cases := []struct {
		name     string
		families []string
		want     string
	}{
		{"vLLM v1", []string{"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:prompt_tokens_total",
			"vllm:generation_tokens_total", "vllm:iteration_tokens_total"}, KindVLLM},
		{"SGLang", []string{"sglang:num_queue_reqs", "sglang:num_running_reqs", "sglang:prompt_tokens_total",
			"sglang:generation_tokens_total", "sglang:token_usage"}, KindSGLang},
		{"llama.cpp server", []string{"llamacpp:requests_deferred", "llamacpp:requests_processing",
			"llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total", "llamacpp:n_decode_total"}, KindLlamaCpp},
		{"SGLang without its token counters is no engine we know", []string{"sglang:num_queue_reqs", "sglang:num_running_reqs"}, ""},
		{"a TGI scrape", []string{"tgi_queue_size", "tgi_batch_current_size", "tgi_request_count"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := DetectKind(tc.families)
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("DetectKind = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}
