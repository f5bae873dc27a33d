package configs

import (
	"net/url"
	"strings"
	"time"
)

// Engine says where the inference engine is and how to talk to it.
type Engine struct {
	// URL is the engine's OpenAI-compatible base URL (no /v1 suffix).
	URL string `yaml:"url"`
	// Model is the model the completion probe asks for. Empty: the first
	// model /v1/models lists.
	Model string `yaml:"model"`
	// APIKeySource names where the engine's API key comes from; the key is
	// sent by the probes and injected upstream by the admission proxy.
	APIKeySource SecretSource `yaml:"api_key"`
	// APIKey is resolved from APIKeySource at load time.
	APIKey Secret `yaml:"-"`
	// RequestTimeout bounds /v1/models, /health and /metrics calls.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// Kind is vllm, sglang, llamacpp or auto (the default): which engine's
	// preset of Metrics to use. Auto picks one from the metric families of
	// the first readable scrape.
	Kind string `yaml:"kind"`
	// Metrics names the engine's metrics. Each key set in the file
	// overrides the kind's preset; with kind auto the names here are
	// vLLM's until a scrape shows which engine it is.
	Metrics MetricNames `yaml:"metrics"`
	// MetricsSet lists the keys under engine.metrics the file set
	// ("waiting", "decode.finished"): the ones a preset must not replace.
	MetricsSet []string `yaml:"-"`
}

// MetricNames are the exact metric names the watchdog reads. They are
// configurable for other engines or renamed metrics. Exact names, never
// prefixes: vllm:num_requests_waiting_by_reason is not waiting.
type MetricNames struct {
	Waiting string `yaml:"waiting"`
	Running string `yaml:"running"`
	// Progress counters are summed: prompt + generation tokens.
	Progress []string `yaml:"progress"`
	// Heartbeats are counters that move per engine step or per admission;
	// any of them moving is progress too (a long prefill moves no token
	// counter for a while, but steps still happen).
	Heartbeats []string `yaml:"heartbeats"`
	// Decode tells first tokens from decode tokens, so that a decode stall
	// (first tokens keep coming, nobody gets a second) is seen although the
	// token counters move. Empty names switch the decode rule off.
	Decode DecodeMetrics `yaml:"decode"`
	// RankLabel is the label that names a data-parallel rank ("engine" in
	// vLLM). A scrape with several values of it is judged per rank as well
	// as in sum. Empty: ranks are not told apart.
	RankLabel string `yaml:"rank_label"`
	// Extras maps each canonical extra metric (configs.Extra*, vLLM's
	// names) to this engine's name for it; a canonical name missing from
	// a non-nil map is not read. nil: the engine uses vLLM's names. Set by
	// the engine profile, not by the file.
	Extras map[string]string `yaml:"-"`
}

// DecodeMetrics are the counters the decode-stall rule reads.
type DecodeMetrics struct {
	// FirstTokens counts first tokens: one per request that finished its
	// prefill (vLLM: the count of its time-to-first-token histogram).
	FirstTokens string `yaml:"first_tokens"`
	// GenerationTokens counts every output token, first tokens included;
	// less FirstTokens it is the decode tokens.
	GenerationTokens string `yaml:"generation_tokens"`
	// Finished counts requests that finished; series labelled
	// finished_reason="abort" are left out (a client that left needs no
	// decode).
	Finished string `yaml:"finished"`
}

func defaultEngine() Engine {
	return Engine{
		URL:            "http://127.0.0.1:8000",
		RequestTimeout: 10 * time.Second,
		Kind:           KindAuto,
		Metrics:        profiles[KindVLLM].Metrics.clone(),
	}
}

// resolveKind lays the kind's preset under the keys the file set. With
// kind auto the vLLM preset stands in until the first scrape decides.
func (e *Engine) resolveKind(lines map[string]int) {
	e.MetricsSet = explicitMetrics(lines)
	kind := e.Kind
	if kind == KindAuto {
		kind = KindVLLM
	}
	if _, ok := profiles[kind]; ok {
		e.Metrics = e.MetricsFor(kind)
	}
}

func (e *Engine) validate(v *validator) {
	if v.nonEmpty("engine.url", e.URL) {
		u, err := url.Parse(e.URL)
		switch {
		case err != nil:
			v.errorf("engine.url", "not a URL: %v", err)
		case u.Scheme != "http" && u.Scheme != "https":
			v.errorf("engine.url", "scheme must be http or https, got %q", u.Scheme)
		case u.Host == "":
			v.errorf("engine.url", "missing host")
		}
	}
	v.positive("engine.request_timeout", e.RequestTimeout)
	if _, ok := profiles[e.Kind]; !ok && e.Kind != KindAuto {
		v.errorf("engine.kind", "must be one of auto, %s; got %q", strings.Join(Kinds, ", "), e.Kind)
	}
	v.nonEmpty("engine.metrics.waiting", e.Metrics.Waiting)
	v.nonEmpty("engine.metrics.running", e.Metrics.Running)
	if len(e.Metrics.Progress) == 0 {
		v.errorf("engine.metrics.progress", "at least one progress counter is required")
	}
	v.secretSource("engine.api_key", e.APIKeySource)
}

// ValidateEngine checks an engine section built outside a config file
// (e.g. from `vigil diagnose --engine URL`).
func ValidateEngine(e Engine) error {
	v := &validator{lines: map[string]int{}}
	e.validate(v)
	if len(v.errs) > 0 {
		return v.errs
	}
	return nil
}
