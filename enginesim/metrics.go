package enginesim

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Bucket bounds copied from vLLM v1 so that histograms look like a real scrape.
var (
	iterationBuckets = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
	ttftBuckets      = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	latencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
		50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// finish reasons, as vLLM labels request_success_total.
const (
	reasonStop   = "stop"
	reasonLength = "length"
	reasonAbort  = "abort"
	reasonError  = "error"
)

// metrics holds one engine rank's vLLM v1 series. Only that rank's core
// writes them, so a hung core freezes every one of them. All ranks of an
// engine register into one registry, so the exposition shows each family
// once with one series per engine="<rank>", as vLLM data parallel does.
type metrics struct {
	reg   *prometheus.Registry
	order []string // family names in vLLM's exposition order

	running, waiting, kvUsage prometheus.Gauge
	waitingCapacity           prometheus.Gauge
	prefixQueries, prefixHits prometheus.Counter
	preemptions               prometheus.Counter
	promptTokens, genTokens   prometheus.Counter
	success                   *prometheus.CounterVec
	iterTokens, ttft          prometheus.Histogram
	e2e, queue, prefill       prometheus.Histogram
}

// newMetrics builds the series of a one-rank engine (engine="0").
func newMetrics(cfg Config) *metrics { return newRankMetrics(cfg, 1)[0] }

// newRankMetrics builds the series of n ranks in one shared registry.
func newRankMetrics(cfg Config, n int) []*metrics {
	reg := prometheus.NewRegistry()
	var order []string
	ms := make([]*metrics, n)
	for rank := range n {
		ms[rank] = rankSeries(cfg, reg, rank, &order)
	}
	// cache_config_info carries engine as a plain label: one family, one
	// series per rank.
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig",
	}, []string{"block_size", "cache_dtype", "enable_prefix_caching", "engine", "gpu_memory_utilization", "num_gpu_blocks"})
	reg.MustRegister(info)
	order = append(order, "vllm:cache_config_info")
	for rank := range n {
		info.WithLabelValues("16", "auto", "True", strconv.Itoa(rank), "0.9", strconv.Itoa(cfg.KVCacheTokens/16)).Set(1)
	}
	for _, m := range ms {
		m.reg, m.order = reg, order
	}
	return ms
}

// rankSeries registers one rank's series; the first rank also records the
// family order (every rank registers the same families in the same order).
func rankSeries(cfg Config, reg *prometheus.Registry, rank int, order *[]string) *metrics {
	cl := prometheus.Labels{"engine": strconv.Itoa(rank), "model_name": cfg.Model}
	m := &metrics{}
	register := func(name string, c prometheus.Collector) {
		reg.MustRegister(c)
		if rank == 0 {
			*order = append(*order, name)
		}
	}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: cl})
		register(name, g)
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: cl})
		register(name, c)
		return c
	}
	hist := func(name, help string, b []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: cl, Buckets: b})
		register(name, h)
		return h
	}
	m.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
	m.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
	byReason := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "vllm:num_requests_waiting_by_reason", Help: "Number of requests waiting, by the reason they wait.",
		ConstLabels: cl}, []string{"reason"})
	register("vllm:num_requests_waiting_by_reason", byReason)
	m.waitingCapacity = byReason.WithLabelValues("capacity")
	byReason.WithLabelValues("deferred").Set(0)
	m.kvUsage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
	m.prefixQueries = counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.")
	m.prefixHits = counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.")
	m.preemptions = counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.")
	m.promptTokens = counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.")
	m.genTokens = counter("vllm:generation_tokens_total", "Number of generation tokens processed.")
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: cl,
	}, []string{"finished_reason"})
	register("vllm:request_success_total", m.success)
	for _, r := range []string{reasonStop, reasonLength, reasonAbort, reasonError} {
		m.success.WithLabelValues(r) // present at 0, as vLLM shows them
	}
	m.iterTokens = hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", iterationBuckets)
	m.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
	m.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", latencyBuckets)
	m.queue = hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", latencyBuckets)
	m.prefill = hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", latencyBuckets)

	return m
}
