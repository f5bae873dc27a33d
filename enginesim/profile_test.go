package enginesim

import (
	"strings"
	"testing"
)

// Each name set's exposition has the shape of that engine's own: its
// names, its labels, its number formatting, and ranks summed or kept as
// that engine does.
func TestEachNameSetIsServedInItsEnginesShape(t *testing.T) {
	cases := []struct {
		set   string
		ranks int
		want  []string
		never []string
	}{
		{MetricsSGLang, 1, []string{
			`sglang:num_queue_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 0.0`,
			`sglang:num_running_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 0.0`,
			`sglang:prompt_tokens_total{model_name="m"} 1.65e+06`,
			`sglang:prompt_tokens_created{model_name="m"} 1.7e+09`,
			`sglang:num_requests_total{model_name="m"} 0.0`,
			`sglang:e2e_request_latency_seconds_count{model_name="m"} 0.0`,
		}, []string{"vllm:", "dp_rank"}},
		{MetricsSGLang, 2, []string{
			`sglang:num_queue_reqs{dp_rank="1",engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 0.0`,
			// The tokenizer's counters are one series over every rank.
			`sglang:prompt_tokens_total{model_name="m"} 3.3e+06`,
		}, []string{"vllm:"}},
		{MetricsLlamaCpp, 2, []string{
			"# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 0\n",
			"llamacpp:requests_processing 0\n",
			"# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 3.3e+06\n",
			"llamacpp:tokens_predicted_total 0\n",
			"# TYPE llamacpp:n_decode_total counter\nllamacpp:n_decode_total 0\n",
		}, []string{"vllm:", "{", "_created"}},
	}
	for _, tc := range cases {
		t.Run(tc.set, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Model, cfg.Metrics, cfg.DataParallel = "m", tc.set, tc.ranks
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			ms := newRankMetrics(cfg, tc.ranks)
			for _, m := range ms {
				m.promptTokens.Add(1650000)
			}
			var sb strings.Builder
			if err := ms[0].writeAs(&sb, tc.set, 1.7e9, tc.ranks); err != nil {
				t.Fatal(err)
			}
			text := sb.String()
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("exposition lacks %q:\n%s", w, text)
				}
			}
			for _, n := range tc.never {
				if strings.Contains(text, n) {
					t.Errorf("exposition has %q:\n%s", n, text)
				}
			}
		})
	}
}

func TestAnUnknownNameSetIsRefused(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Metrics = "tgi"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `Metrics "tgi"`) {
		t.Fatalf("Validate = %v", err)
	}
}
