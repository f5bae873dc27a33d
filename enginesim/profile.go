package enginesim

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// Metric name sets the simulated engine can serve (Config.Metrics). The
// engine underneath is the same; only the exposition differs, so one
// fault (a hang, a stalled decode) reads the same under every name set.
const (
	MetricsVLLM     = "vllm"
	MetricsSGLang   = "sglang"
	MetricsLlamaCpp = "llamacpp"
)

// served is one family of another engine's exposition, made from one of
// the vLLM families the engine keeps.
type served struct {
	from, to string
	help     string
	// countAs reads a histogram's count as a plain counter (llama.cpp's
	// n_decode_total is the count of engine steps).
	countAs bool
	// perRank keeps the rank apart in the rank label of the name set
	// (SGLang's scheduler gauges); otherwise ranks are summed (SGLang's
	// tokenizer counters, every llama.cpp series).
	perRank bool
}

// Written from SGLang's python/sglang/srt/metrics/collector.py: scheduler
// gauges carry engine_type, tp_rank, pp_rank (and dp_rank under data
// parallelism); the tokenizer's counters and histograms carry model_name
// only.
var sglangFamilies = []served{
	{from: "vllm:num_requests_running", to: "sglang:num_running_reqs", help: "The number of running requests.", perRank: true},
	{from: "vllm:kv_cache_usage_perc", to: "sglang:token_usage", help: "The token usage.", perRank: true},
	{from: "vllm:num_requests_waiting", to: "sglang:num_queue_reqs", help: "The number of requests in the waiting queue.", perRank: true},
	{from: "vllm:request_queue_time_seconds", to: "sglang:queue_time_seconds", help: "Histogram of queueing time in seconds.", perRank: true},
	{from: "vllm:prompt_tokens_total", to: "sglang:prompt_tokens_total", help: "Number of prefill tokens processed."},
	{from: "vllm:generation_tokens_total", to: "sglang:generation_tokens_total", help: "Number of generation tokens processed."},
	{from: "vllm:prefix_cache_hits_total", to: "sglang:cached_tokens_total", help: "Number of cached prompt tokens."},
	{from: "vllm:request_success_total", to: "sglang:num_requests_total", help: "Number of requests processed."},
	{from: "vllm:time_to_first_token_seconds", to: "sglang:time_to_first_token_seconds", help: "Histogram of time to first token in seconds."},
	{from: "vllm:e2e_request_latency_seconds", to: "sglang:e2e_request_latency_seconds", help: "Histogram of End-to-end request latency in seconds"},
}

// Written from llama.cpp's tools/server /metrics handler: no labels, a
// HELP and TYPE line per series.
var llamacppFamilies = []served{
	{from: "vllm:prompt_tokens_total", to: "llamacpp:prompt_tokens_total", help: "Number of prompt tokens processed."},
	{from: "vllm:generation_tokens_total", to: "llamacpp:tokens_predicted_total", help: "Number of generation tokens processed."},
	{from: "vllm:iteration_tokens_total", to: "llamacpp:n_decode_total", help: "Total number of llama_decode() calls", countAs: true},
	{from: "vllm:kv_cache_usage_perc", to: "llamacpp:kv_cache_usage_ratio", help: "KV-cache usage. 1 means 100 percent usage."},
	{from: "vllm:num_requests_running", to: "llamacpp:requests_processing", help: "Number of requests processing."},
	{from: "vllm:num_requests_waiting", to: "llamacpp:requests_deferred", help: "Number of requests deferred."},
}

func validMetrics(set string) error {
	switch set {
	case "", MetricsVLLM, MetricsSGLang, MetricsLlamaCpp:
		return nil
	}
	return fmt.Errorf("enginesim: Metrics %q: want %s, %s or %s", set, MetricsVLLM, MetricsSGLang, MetricsLlamaCpp)
}

// writeAs writes the exposition of the name set (vLLM's by default).
func (m *metrics) writeAs(out io.Writer, set string, created float64, ranks int) error {
	switch set {
	case MetricsSGLang:
		return m.writeServed(out, sglangFamilies, created, ranks, false)
	case MetricsLlamaCpp:
		return m.writeServed(out, llamacppFamilies, created, ranks, true)
	}
	return m.writeText(out, created)
}

// writeServed renames and regroups families. llama.cpp's server prints
// its values through a C++ stream (six significant digits: 1650000 reads
// 1.65e+06) and has neither labels nor _created series.
func (m *metrics) writeServed(out io.Writer, fams []served, created float64, ranks int, cpp bool) error {
	gathered, err := m.reg.Gather()
	if err != nil {
		return err
	}
	byName := make(map[string]*dto.MetricFamily, len(gathered))
	for _, f := range gathered {
		byName[f.GetName()] = f
	}
	format := pyFloat
	if cpp {
		format = func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	}
	w := bufio.NewWriter(out)
	for _, s := range fams {
		f := byName[s.from]
		if f == nil {
			continue
		}
		typ := f.GetType()
		if s.countAs {
			typ = dto.MetricType_COUNTER
		}
		header(w, s.to, s.help, strings.ToLower(typ.String()))
		series := regroup(f, s, ranks, cpp)
		for _, g := range series {
			switch {
			case typ == dto.MetricType_HISTOGRAM:
				for i, b := range g.bounds {
					lineF(w, s.to+"_bucket", g.labels, "le", pyFloat(b), g.buckets[i], format)
				}
				lineF(w, s.to+"_bucket", g.labels, "le", "+Inf", g.count, format)
				lineF(w, s.to+"_count", g.labels, "", "", g.count, format)
				lineF(w, s.to+"_sum", g.labels, "", "", g.sum, format)
			default:
				lineF(w, s.to, g.labels, "", "", g.value, format)
			}
		}
		if typ == dto.MetricType_COUNTER && !cpp {
			cname := strings.TrimSuffix(s.to, "_total") + "_created"
			header(w, cname, s.help, "gauge")
			for _, g := range series {
				lineF(w, cname, g.labels, "", "", created, format)
			}
		}
	}
	return w.Flush()
}

type group struct {
	key     string
	labels  []*dto.LabelPair
	value   float64
	bounds  []float64
	buckets []float64
	count   float64
	sum     float64
}

// regroup maps each vLLM series to the other engine's labels and sums the
// series that land on the same labels.
func regroup(f *dto.MetricFamily, s served, ranks int, cpp bool) []*group {
	var order []*group
	groups := map[string]*group{}
	for _, mt := range f.GetMetric() {
		labels := servedLabels(mt, s, ranks, cpp)
		var key strings.Builder
		for _, l := range labels {
			key.WriteString(l.GetName() + "=" + l.GetValue() + ",")
		}
		g := groups[key.String()]
		if g == nil {
			g = &group{key: key.String(), labels: labels}
			groups[g.key] = g
			order = append(order, g)
		}
		switch {
		case mt.Histogram != nil && s.countAs:
			g.value += float64(mt.GetHistogram().GetSampleCount())
		case mt.Histogram != nil:
			h := mt.GetHistogram()
			if g.bounds == nil {
				for _, b := range h.GetBucket() {
					g.bounds = append(g.bounds, b.GetUpperBound())
				}
				g.buckets = make([]float64, len(g.bounds))
			}
			for i, b := range h.GetBucket() {
				if i < len(g.buckets) {
					g.buckets[i] += float64(b.GetCumulativeCount())
				}
			}
			g.count += float64(h.GetSampleCount())
			g.sum += h.GetSampleSum()
		case mt.Counter != nil:
			g.value += mt.GetCounter().GetValue()
		case mt.Gauge != nil:
			g.value += mt.GetGauge().GetValue()
		}
	}
	slices.SortStableFunc(order, func(a, b *group) int { return strings.Compare(a.key, b.key) })
	return order
}

func servedLabels(mt *dto.Metric, s served, ranks int, cpp bool) []*dto.LabelPair {
	if cpp {
		return nil
	}
	pair := func(k, v string) *dto.LabelPair { return &dto.LabelPair{Name: &k, Value: &v} }
	var out []*dto.LabelPair
	for _, l := range mt.GetLabel() {
		switch l.GetName() {
		case "model_name":
			out = append(out, pair("model_name", l.GetValue()))
		case "engine":
			if s.perRank && ranks > 1 {
				out = append(out, pair("dp_rank", l.GetValue()))
			}
		}
	}
	if s.perRank {
		out = append(out, pair("engine_type", "unified"), pair("pp_rank", "0"), pair("tp_rank", "0"))
	}
	return out
}

// lineF is line with the value formatted by the engine's own rules.
func lineF(w *bufio.Writer, name string, labels []*dto.LabelPair, extraName, extraValue string, v float64, format func(float64) string) {
	lineText(w, name, labels, extraName, extraValue, format(v))
}
