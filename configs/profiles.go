package configs

import (
	"slices"
	"strings"
)

// Engine kinds (engine.kind). KindAuto picks one of the others from the
// metric families of the first readable scrape.
const (
	KindAuto     = "auto"
	KindVLLM     = "vllm"
	KindSGLang   = "sglang"
	KindLlamaCpp = "llamacpp"
)

// Kinds are the engine kinds with a profile, in the order auto tries them.
var Kinds = []string{KindVLLM, KindSGLang, KindLlamaCpp}

// Canonical names of the metrics the watchdog reads beside the configured
// ones (the retry-storm alarm, the drain estimate, Little's law). They are
// vLLM's names; a profile maps each to its engine's own name in
// MetricNames.Extras, or leaves it out when the engine has no such series.
const (
	ExtraPromptTokens       = "vllm:prompt_tokens_total"
	ExtraPrefixCacheQueries = "vllm:prefix_cache_queries_total"
	ExtraRequestSuccess     = "vllm:request_success_total"
	ExtraE2ELatencySum      = "vllm:e2e_request_latency_seconds_sum"
	ExtraE2ELatencyCount    = "vllm:e2e_request_latency_seconds_count"
	ExtraQueueTimeSum       = "vllm:request_queue_time_seconds_sum"
	ExtraQueueTimeCount     = "vllm:request_queue_time_seconds_count"
	// The admission limiter's prefill meter (admission/core's EngineLoad):
	// the KV cache's used share, prompt tokens found in the prefix cache
	// (not prefilled), and first tokens (one per prefill completed). The
	// cache hits serve the hang window too, with the seconds spent
	// prefilling: the engine's own pace.
	ExtraKVUsage         = "vllm:kv_cache_usage_perc"
	ExtraPrefixCacheHits = "vllm:prefix_cache_hits_total"
	ExtraFirstTokens     = "vllm:time_to_first_token_seconds_count"
	ExtraPrefillTimeSum  = "vllm:request_prefill_time_seconds_sum"
	// ExtraPrefillTimeCount counts the prefills that sum covers: a
	// stretch of vigil's own one-token probes alone is overhead, not rate.
	ExtraPrefillTimeCount = "vllm:request_prefill_time_seconds_count"
	// ExtraProcessStart is no engine's own: Python's Prometheus client
	// (vLLM, SGLang) exports it by default, llama.cpp's C++ server does not.
	ExtraProcessStart = "process_start_time_seconds"
)

// legacyExtras are older names of a canonical series that vLLM itself
// exported before v1, read when the canonical name is missing (only for
// vLLM's own names: a profile's Extras say exactly what its engine has).
var legacyExtras = map[string][]string{
	ExtraKVUsage: {"vllm:gpu_cache_usage_perc"},
}

// Profile is one engine's preset of engine.metrics.
type Profile struct {
	Kind string
	// Prefix starts every metric family the engine exports ("vllm:"); a
	// scrape that has none of the preset's required names is still told
	// apart by it in messages.
	Prefix  string
	Metrics MetricNames
}

// profiles are written from each engine's own metric definitions:
// vLLM v1 vllm/v1/metrics/loggers.py, SGLang
// python/sglang/srt/metrics/collector.py (and
// docs/references/production_metrics.md), llama.cpp tools/server (the
// /metrics handler).
var profiles = map[string]Profile{
	KindVLLM: {Kind: KindVLLM, Prefix: "vllm:", Metrics: MetricNames{
		Waiting:  "vllm:num_requests_waiting",
		Running:  "vllm:num_requests_running",
		Progress: []string{"vllm:prompt_tokens_total", "vllm:generation_tokens_total"},
		Heartbeats: []string{
			"vllm:iteration_tokens_total_count",
			"vllm:prefix_cache_queries_total",
			"vllm:request_success_total",
		},
		Decode: DecodeMetrics{
			FirstTokens:      "vllm:time_to_first_token_seconds_count",
			GenerationTokens: "vllm:generation_tokens_total",
			Finished:         "vllm:request_success_total",
		},
		RankLabel: "engine",
		// nil Extras: the canonical names are vLLM's own.
	}},
	// SGLang counts tokens in its tokenizer process when a request
	// finishes, not per step, and labels only its scheduler gauges with
	// dp_rank. So: no decode rule (generation tokens would stand still
	// through every long decode while first tokens came, a false stall),
	// and no per-rank judgement (a rank's counters would be missing, so
	// every rank with work would look frozen). Progress on a long request
	// shows through the completion probe and the finished-requests
	// heartbeat.
	KindSGLang: {Kind: KindSGLang, Prefix: "sglang:", Metrics: MetricNames{
		Waiting:    "sglang:num_queue_reqs",
		Running:    "sglang:num_running_reqs",
		Progress:   []string{"sglang:prompt_tokens_total", "sglang:generation_tokens_total"},
		Heartbeats: []string{"sglang:num_requests_total"},
		Extras: map[string]string{
			ExtraPromptTokens:    "sglang:prompt_tokens_total",
			ExtraRequestSuccess:  "sglang:num_requests_total",
			ExtraE2ELatencySum:   "sglang:e2e_request_latency_seconds_sum",
			ExtraE2ELatencyCount: "sglang:e2e_request_latency_seconds_count",
			ExtraQueueTimeSum:    "sglang:queue_time_seconds_sum",
			ExtraQueueTimeCount:  "sglang:queue_time_seconds_count",
			ExtraProcessStart:    ExtraProcessStart,
			// The scheduler's token usage is the KV pool's used share.
			ExtraKVUsage:     "sglang:token_usage",
			ExtraFirstTokens: "sglang:time_to_first_token_seconds_count",
		},
	}},
	// llama.cpp's server has no labels, no per-request histograms and no
	// first-token count: no decode rule, no ranks, no Little's law. Its
	// token counters move when a prompt is evaluated and when a request
	// finishes; n_decode_total moves on every llama_decode() call, so it is
	// the heartbeat that shows a long generation is alive. It counts no
	// finished requests (no completion rate from /metrics) and no first
	// tokens; its prompt_tokens_total already leaves out cached tokens, so
	// prompt_tokens_cached_total is not the prefix-cache hits the limiter
	// subtracts.
	KindLlamaCpp: {Kind: KindLlamaCpp, Prefix: "llamacpp:", Metrics: MetricNames{
		Waiting:    "llamacpp:requests_deferred",
		Running:    "llamacpp:requests_processing",
		Progress:   []string{"llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total"},
		Heartbeats: []string{"llamacpp:n_decode_total"},
		Extras: map[string]string{
			ExtraPromptTokens:   "llamacpp:prompt_tokens_total",
			ExtraPrefillTimeSum: "llamacpp:prompt_seconds_total",
		},
	}},
}

// ProfileFor returns the preset of kind; ok is false for an unknown kind
// (auto included: it has no preset of its own).
func ProfileFor(kind string) (Profile, bool) {
	p, ok := profiles[kind]
	if !ok {
		return Profile{}, false
	}
	p.Metrics = p.Metrics.clone()
	return p, true
}

// DetectKind picks the engine kind from the metric family names of one
// scrape: the first profile whose waiting, running and progress names are
// all present. ok is false when none fits (another engine, or names
// renamed beyond every preset).
func DetectKind(families []string) (kind string, ok bool) {
	have := make(map[string]bool, len(families))
	for _, f := range families {
		have[f] = true
	}
	for _, k := range Kinds {
		m := profiles[k].Metrics
		need := append([]string{m.Waiting, m.Running}, m.Progress...)
		if !slices.ContainsFunc(need, func(n string) bool { return !have[n] && !have[histogramBase(n)] }) {
			return k, true
		}
	}
	return "", false
}

// histogramBase is the family a "_count" or "_sum" series belongs to.
func histogramBase(name string) string {
	for _, s := range []string{"_count", "_sum"} {
		if b, ok := strings.CutSuffix(name, s); ok {
			return b
		}
	}
	return name
}

// metricKeys are the keys under engine.metrics an explicit block can set,
// as they appear in key paths.
var metricKeys = []string{
	"waiting", "running", "progress", "heartbeats",
	"decode.first_tokens", "decode.generation_tokens", "decode.finished", "rank_label",
}

// MetricsFor is the preset of kind with every key the config file set
// under engine.metrics laid over it: an explicit block always wins. For an
// unknown kind it returns the configured names as they are.
func (e Engine) MetricsFor(kind string) MetricNames {
	p, ok := ProfileFor(kind)
	if !ok {
		return e.Metrics.clone()
	}
	out, in := p.Metrics, e.Metrics
	for _, k := range e.MetricsSet {
		switch k {
		case "waiting":
			out.Waiting = in.Waiting
		case "running":
			out.Running = in.Running
		case "progress":
			out.Progress = slices.Clone(in.Progress)
		case "heartbeats":
			out.Heartbeats = slices.Clone(in.Heartbeats)
		case "decode.first_tokens":
			out.Decode.FirstTokens = in.Decode.FirstTokens
		case "decode.generation_tokens":
			out.Decode.GenerationTokens = in.Decode.GenerationTokens
		case "decode.finished":
			out.Decode.Finished = in.Decode.Finished
		case "rank_label":
			out.RankLabel = in.RankLabel
		}
	}
	return out
}

func (m MetricNames) clone() MetricNames {
	m.Progress = slices.Clone(m.Progress)
	m.Heartbeats = slices.Clone(m.Heartbeats)
	if m.Extras != nil {
		extras := make(map[string]string, len(m.Extras))
		for k, v := range m.Extras {
			extras[k] = v
		}
		m.Extras = extras
	}
	return m
}

// ExtraName is the name this engine exports the canonical extra metric
// under; "" when it has none.
func (m MetricNames) ExtraName(canonical string) string {
	if m.Extras == nil {
		return canonical
	}
	return m.Extras[canonical]
}

// ExtraNames are the names to try for the canonical extra metric, in
// order: ExtraName, then (for vLLM's own names) the older names of the
// same series. Empty when the engine has none.
func (m MetricNames) ExtraNames(canonical string) []string {
	if m.Extras != nil {
		if n := m.Extras[canonical]; n != "" {
			return []string{n}
		}
		return nil
	}
	return append([]string{canonical}, legacyExtras[canonical]...)
}

// explicitMetrics lists the engine.metrics keys the file set, from the key
// lines the validator recorded.
func explicitMetrics(lines map[string]int) []string {
	var set []string
	for _, k := range metricKeys {
		if _, ok := lines["engine.metrics."+k]; ok {
			set = append(set, k)
		}
	}
	return set
}
