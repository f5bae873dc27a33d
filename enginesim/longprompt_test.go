package enginesim

import "testing"

// TestLongPromptsWaitForPrefillAsInVLLM pins what the admission limiter
// reads to tell a prefill backlog from a full engine: with 12,000-token
// prompts sharing a 2,000-token prefix and vLLM's 8,192-token step budget,
// a prompt takes two steps of prefill before its first token and counts as
// running from its first chunk on (vLLM's waiting gauge counts requests
// not yet scheduled); the prompts behind it wait for the budget although
// seats and KV cache are free; prefix-cache queries and hits move when a
// prompt is scheduled, the prompt tokens and the TTFT count at its first
// token; KV usage counts the tokens held.
func TestLongPromptsWaitForPrefillAsInVLLM(t *testing.T) {
	h := newHarness(t, nil)
	for range 3 {
		h.add(12000, 2000, "system", 300)
	}
	type want struct {
		running, waiting         float64
		queries, hits            float64
		promptTokens, firstToken float64
		kvTokens                 int
	}
	for i, w := range []want{
		// Step 1: the first prompt's first chunk fills the budget.
		{running: 1, waiting: 2, queries: 12000, hits: 0, promptTokens: 0, firstToken: 0, kvTokens: 8192},
		// Step 2: its last 3,808 tokens and its first token; the second
		// prompt is scheduled with the prefix cached (2,000 hits) and
		// prefills 4,384 of its other 10,000 tokens.
		{running: 2, waiting: 1, queries: 24000, hits: 2000, promptTokens: 12000, firstToken: 1, kvTokens: 12000 + 1 + 2000 + 4384},
	} {
		h.step()
		got := want{
			running:      h.metric("vllm:num_requests_running"),
			waiting:      h.metric("vllm:num_requests_waiting"),
			queries:      h.metric("vllm:prefix_cache_queries_total"),
			hits:         h.metric("vllm:prefix_cache_hits_total"),
			promptTokens: h.metric("vllm:prompt_tokens_total"),
			firstToken:   h.metric("vllm:time_to_first_token_seconds"),
		}
		kv := h.metric("vllm:kv_cache_usage_perc")
		got.kvTokens = int(kv*float64(h.s.cfg.KVCacheTokens) + 0.5)
		if got != w {
			t.Errorf("after step %d: %+v, want %+v", i+1, got, w)
		}
	}
}
