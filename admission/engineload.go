package admission

import (
	dto "github.com/prometheus/client_model/go"

	"github.com/vigil-dev/vigil/admission/core"
)

// The series besides the queue gauges that tell an engine busy prefilling
// long prompts from one that cannot take more (see core's prefillMeter). vLLM
// v1 names first, then the older name of the same series; a missing series
// reads as unknown and the rule falls back to the queue gauges alone.
var (
	kvUsageMetrics      = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}
	promptTokensMetrics = []string{"vllm:prompt_tokens_total"}
	// Prompt tokens found in the prefix cache (vLLM v1, in tokens), which
	// the engine does not prefill.
	cachedTokensMetrics = []string{"vllm:prefix_cache_hits_total"}
	// One observation per request at its first output token, i.e. when
	// its prefill completed; vLLM counts its whole prompt in
	// prompt_tokens_total at the same moment.
	firstTokensMetrics = []string{"vllm:time_to_first_token_seconds"}
)

// loadExtras fills the series beyond the queue gauges from a parsed scrape,
// each summed over its label sets (one per data-parallel engine).
func loadExtras(g *core.EngineLoad, fams map[string]*dto.MetricFamily) {
	g.KVUsage, g.PromptTokens, g.FirstTokens, g.CachedTokens = -1, -1, -1, -1
	if v, n, ok := sumFamily(fams, kvUsageMetrics); ok && n > 0 {
		// Each rank reports its own cache's share: the engine's is the mean.
		g.KVUsage = v / float64(n)
	}
	if v, _, ok := sumFamily(fams, promptTokensMetrics); ok {
		g.PromptTokens = v
	}
	if v, _, ok := sumFamily(fams, firstTokensMetrics); ok {
		g.FirstTokens = v
	}
	if v, _, ok := sumFamily(fams, cachedTokensMetrics); ok {
		g.CachedTokens = v
	}
}

// sumFamily sums the first of names present: gauges, counters, untyped
// samples, and a histogram's count. It reports the number of series.
func sumFamily(fams map[string]*dto.MetricFamily, names []string) (sum float64, n int, ok bool) {
	for _, name := range names {
		f, found := fams[name]
		if !found {
			continue
		}
		for _, m := range f.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetUntyped() != nil:
				sum += m.GetUntyped().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			default:
				continue
			}
			n++
		}
		return sum, n, true
	}
	return 0, 0, false
}
