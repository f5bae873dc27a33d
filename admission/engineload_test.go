package admission

import (
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/vigil-dev/vigil/admission/core"
)

// The series beyond the queue gauges, summed over the data-parallel ranks;
// a series the scrape lacks reads as unknown (-1).
func TestLoadExtrasReadsThePrefillSeries(t *testing.T) {
	const twoRanks = `# TYPE vllm:kv_cache_usage_perc gauge
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
	const gaugesOnly = `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting 3
`
	for _, tc := range []struct {
		name, text string
		want       core.EngineLoad
	}{
		{"two ranks", twoRanks, core.EngineLoad{KVUsage: 0.3, PromptTokens: 36000, FirstTokens: 3, CachedTokens: 30000}},
		{"the queue gauges alone", gaugesOnly, core.EngineLoad{KVUsage: -1, PromptTokens: -1, FirstTokens: -1, CachedTokens: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := p.TextToMetricFamilies(strings.NewReader(tc.text))
			if err != nil {
				t.Fatal(err)
			}
			var g core.EngineLoad
			loadExtras(&g, fams)
			if d := g.KVUsage - tc.want.KVUsage; d > 1e-9 || d < -1e-9 || g.PromptTokens != tc.want.PromptTokens ||
				g.FirstTokens != tc.want.FirstTokens || g.CachedTokens != tc.want.CachedTokens {
				t.Errorf("read %+v, want %+v", g, tc.want)
			}
		})
	}
}
