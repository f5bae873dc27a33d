package enginesim

import (
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// metricValue reads one sample from the engine's registry: a counter or
// gauge value, or a histogram's count. Labels beyond engine and model_name
// select the series.
func metricValue(t *testing.T, m *metrics, name string, labels ...string) float64 {
	t.Helper()
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, s := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(s, labels[i], labels[i+1]) {
					continue next
				}
			}
			switch {
			case s.Counter != nil:
				return s.Counter.GetValue()
			case s.Gauge != nil:
				return s.Gauge.GetValue()
			case s.Histogram != nil:
				return float64(s.Histogram.GetSampleCount())
			}
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

func hasLabel(s *dto.Metric, k, v string) bool {
	for _, l := range s.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

// harness drives the pure scheduler by hand with a virtual engine clock.
type harness struct {
	t   *testing.T
	s   *sched
	now time.Duration
	n   int
}

func newHarness(t *testing.T, mod func(*Config)) *harness {
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	return &harness{t: t, s: newSched(cfg, newMetrics(cfg))}
}

func (h *harness) add(prompt, prefix int, prefixID string, out int) *request {
	h.n++
	r := newRequest(fmt.Sprintf("r%d", h.n), prompt, prefix, prefixID, out, reasonStop)
	r.arrival = h.now
	h.s.add(r)
	return r
}

// step runs one engine step and returns what it scheduled.
func (h *harness) step() batch {
	b := h.s.schedule(h.now)
	if len(b.entries) == 0 {
		return b
	}
	if b.scheduledTotal > h.s.cfg.StepTokens {
		h.t.Fatalf("step scheduled %d tokens, budget %d", b.scheduledTotal, h.s.cfg.StepTokens)
	}
	if len(h.s.running) > h.s.cfg.MaxNumSeqs {
		h.t.Fatalf("%d running > max_num_seqs %d", len(h.s.running), h.s.cfg.MaxNumSeqs)
	}
	h.now += h.s.cost(b)
	h.s.complete(b, h.now)
	return b
}

func (h *harness) metric(name string, labels ...string) float64 {
	return metricValue(h.t, h.s.m, name, labels...)
}

func TestSchedulerFCFSAndMaxNumSeqs(t *testing.T) {
	tests := []struct {
		name    string
		maxSeqs int
		n       int
	}{
		{"one seat", 1, 4},
		{"three seats", 3, 10},
		{"more seats than requests", 16, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.MaxNumSeqs = tc.maxSeqs })
			var reqs []*request
			for range tc.n {
				reqs = append(reqs, h.add(100, 0, "", 5))
			}
			var order []*request
			seen := map[*request]bool{}
			for steps := 0; !h.s.idle(); steps++ {
				if steps > 10000 {
					t.Fatal("scheduler does not drain")
				}
				h.step()
				for _, r := range h.s.running {
					if !seen[r] {
						seen[r] = true
						order = append(order, r)
					}
				}
				// completed requests may have left running within the step
				for _, r := range reqs {
					if r.state == stateDone && !seen[r] {
						seen[r] = true
						order = append(order, r)
					}
				}
			}
			for i := range reqs {
				if order[i] != reqs[i] {
					t.Fatalf("admission order %d is %s, want %s (FCFS)", i, order[i].id, reqs[i].id)
				}
			}
			if got, want := h.s.c.maxRunning, min(tc.maxSeqs, tc.n); got != want {
				t.Fatalf("max running %d, want %d", got, want)
			}
			if h.s.c.completed != uint64(tc.n) {
				t.Fatalf("completed %d, want %d", h.s.c.completed, tc.n)
			}
		})
	}
}

func TestSchedulerChunkedPrefillAndBudget(t *testing.T) {
	tests := []struct {
		name       string
		budget     int
		prompt     int
		wantChunks []int // prefill tokens per step until the first token
	}{
		{"fits in one step", 8192, 5000, []int{5000}},
		{"exactly the budget", 8192, 8192, []int{8192}},
		{"three chunks", 8192, 20000, []int{8192, 8192, 3616}},
		{"small budget", 1000, 2500, []int{1000, 1000, 500}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.StepTokens = tc.budget })
			r := h.add(tc.prompt, 0, "", 3)
			for i, want := range tc.wantChunks {
				b := h.step()
				if len(b.entries) != 1 || b.prefillTokens != want {
					t.Fatalf("step %d: prefill %d tokens, want %d", i, b.prefillTokens, want)
				}
				// Recording rule: prompt tokens appear only with the first
				// output token, while the per-step heartbeat advances.
				wantPrompt := 0.0
				if i == len(tc.wantChunks)-1 {
					wantPrompt = float64(tc.prompt)
				}
				if got := h.metric("vllm:prompt_tokens_total"); got != wantPrompt {
					t.Fatalf("step %d: prompt_tokens_total %v, want %v", i, got, wantPrompt)
				}
				if got := h.metric("vllm:iteration_tokens_total"); got != float64(i+1) {
					t.Fatalf("step %d: iteration count %v, want %v", i, got, i+1)
				}
			}
			if r.generated != 1 || h.metric("vllm:generation_tokens_total") != 1 {
				t.Fatalf("after prefill: generated %d, want 1", r.generated)
			}
			if h.metric("vllm:time_to_first_token_seconds") != 1 {
				t.Fatal("want one TTFT observation")
			}
			h.step()
			h.step()
			if r.state != stateDone || h.metric("vllm:request_success_total", "finished_reason", "stop") != 1 {
				t.Fatalf("request not finished with stop after 3 tokens")
			}
		})
	}
}

// A mixed load: every step respects the budget and the seat limit (checked
// in harness.step), decodes take one token per sequence, and prefills share
// what is left.
func TestSchedulerMixedLoadRespectsLimits(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxNumSeqs = 8; c.StepTokens = 3000 })
	for i := range 40 {
		h.add(500+i*137, 0, "", 3+i%7)
	}
	for steps := 0; !h.s.idle(); steps++ {
		if steps > 10000 {
			t.Fatal("does not drain")
		}
		b := h.step()
		for _, e := range b.entries {
			if !e.prefill && e.n != 1 {
				t.Fatalf("decode of %d tokens", e.n)
			}
		}
	}
	if h.s.c.completed != 40 || h.s.kvUsed != 0 {
		t.Fatalf("completed %d, kvUsed %d", h.s.c.completed, h.s.kvUsed)
	}
	if got := h.metric("vllm:iteration_tokens_total"); got != float64(h.s.c.steps) {
		t.Fatalf("iteration observations %v, steps %d: want one per step", got, h.s.c.steps)
	}
	if h.metric("vllm:num_requests_running") != 0 || h.metric("vllm:num_requests_waiting") != 0 {
		t.Fatal("gauges not back to 0")
	}
}

func TestSchedulerPrefixCacheAtAdmission(t *testing.T) {
	tests := []struct {
		name              string
		second            string // prefix id of the second request
		wantQ, wantSecond float64
	}{
		{"same prefix hits", "p1", 24000, 2000},
		{"other prefix misses", "p2", 24000, 0},
		{"no prefix misses", "", 24000, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.add(12000, 2000, "p1", 2)
			h.step() // admits the first and prefills 8192 tokens (prefix included)
			if q, hit := h.metric("vllm:prefix_cache_queries_total"), h.metric("vllm:prefix_cache_hits_total"); q != 12000 || hit != 0 {
				t.Fatalf("after first admission: queries %v hits %v, want 12000 0", q, hit)
			}
			if h.metric("vllm:prompt_tokens_total") != 0 {
				t.Fatal("prompt tokens counted before the first token")
			}
			prefix := 0
			if tc.second != "" {
				prefix = 2000
			}
			r2 := h.add(12000, prefix, tc.second, 2)
			h.step() // admits the second: queries/hits now, prompt tokens later
			if q := h.metric("vllm:prefix_cache_queries_total"); q != tc.wantQ {
				t.Fatalf("queries %v, want %v", q, tc.wantQ)
			}
			if hit := h.metric("vllm:prefix_cache_hits_total"); hit != tc.wantSecond {
				t.Fatalf("hits %v, want %v", hit, tc.wantSecond)
			}
			if r2.computed < int(tc.wantSecond) {
				t.Fatalf("cached tokens not skipped: computed %d", r2.computed)
			}
		})
	}
}

func TestSchedulerPrefixLRUBound(t *testing.T) {
	l := newLRU(2)
	l.touch("a", true)
	l.touch("b", true)
	l.touch("a", false) // a is now the most recent
	l.touch("c", true)  // evicts b
	if !l.touch("a", false) || l.touch("b", false) || !l.touch("c", false) {
		t.Fatal("LRU kept the wrong ids")
	}
}

func TestSchedulerFinishedReasons(t *testing.T) {
	h := newHarness(t, nil)
	h.add(10, 0, "", 2)
	r := newRequest("len", 10, 0, "", 3, reasonLength)
	h.s.add(r)
	for !h.s.idle() {
		h.step()
	}
	for reason, want := range map[string]float64{"stop": 1, "length": 1, "abort": 0, "error": 0} {
		if got := h.metric("vllm:request_success_total", "finished_reason", reason); got != want {
			t.Errorf("success{%s} = %v, want %v", reason, got, want)
		}
	}
	if got := h.metric("vllm:generation_tokens_total"); got != 5 {
		t.Errorf("generation tokens %v, want 5", got)
	}
	if h.metric("vllm:e2e_request_latency_seconds") != 2 || h.metric("vllm:request_queue_time_seconds") != 2 {
		t.Error("want two e2e and queue observations")
	}
}

func TestSchedulerAbort(t *testing.T) {
	tests := []struct {
		name       string
		stepsFirst int // steps run before the client leaves
	}{
		{"waiting", 0},
		{"mid prefill", 1},
		{"decoding", 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			var r *request
			if tc.stepsFirst == 0 {
				blocker := newHarness(t, func(c *Config) { c.MaxNumSeqs = 1 })
				h = blocker
				h.add(10, 0, "", 1000)
				h.step()
			}
			r = h.add(20000, 0, "", 1000)
			for range tc.stepsFirst {
				h.step()
			}
			before := r.steps
			// The core sees the abort at its next scheduling: the request
			// rides in that step (the second paid step, with the one in
			// flight when the client left), then is gone.
			h.s.abort(r, h.now)
			for range 5 {
				h.step()
			}
			if extra := r.steps - before; extra > 1 {
				t.Fatalf("aborted request paid for %d more steps after the core saw the abort, want ≤ 1", extra)
			}
			if r.state != stateDone || h.metric("vllm:request_success_total", "finished_reason", "abort") != 1 {
				t.Fatal("request not finished with abort")
			}
			if tc.name == "mid prefill" && h.metric("vllm:prompt_tokens_total") != 0 {
				t.Fatal("an aborted prefill must not count prompt tokens")
			}
			for _, x := range h.s.running {
				if x == r {
					t.Fatal("aborted request still running")
				}
			}
		})
	}
}

func TestSchedulerKVCapacityMakesNewerWait(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.KVCacheTokens = 1500 })
	a := h.add(1000, 0, "", 10)
	b := h.add(1000, 0, "", 10)
	h.step()
	if a.state != stateRunning || b.state != stateWaiting {
		t.Fatalf("states %v %v: the second must wait for KV room", a.state, b.state)
	}
	if u := h.metric("vllm:kv_cache_usage_perc"); u <= 0.5 || u > 1 {
		t.Fatalf("kv usage %v", u)
	}
	for a.state != stateDone {
		h.step()
	}
	h.step()
	if b.state == stateWaiting {
		t.Fatal("second request never admitted after KV freed")
	}
}

// With Preempt, KV cache is taken as tokens are computed: both prompts
// fit at admission, their answers do not, so the newest is preempted,
// waits at the head of the queue, and recomputes its prompt and what it
// had generated once the oldest is done. Each answer still gets every
// token once, and one first token.
func TestSchedulerPreemptsTheNewestWhenAnswersOutgrowTheCache(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.KVCacheTokens = 1100; c.Preempt = true })
	a := h.add(500, 0, "", 60)
	b := h.add(500, 0, "", 60)
	c := h.add(500, 0, "", 5)
	h.step()
	if a.state != stateRunning || b.state != stateRunning || c.state != stateWaiting {
		t.Fatalf("states %v %v %v: two prompts fit the cache at admission, the third waits", a.state, b.state, c.state)
	}
	for b.state == stateRunning {
		h.step()
	}
	if got := h.metric("vllm:num_preemptions_total"); got != 1 {
		t.Fatalf("preemptions %v, want 1", got)
	}
	if h.s.waiting[0] != b || b.resumed == 0 || b.computed != 0 {
		t.Fatalf("the preempted request must wait at the head with its KV freed (resumed %d, computed %d)", b.resumed, b.computed)
	}
	if h.s.kvUsed != a.reserved || a.reserved != a.prompt+a.generated {
		t.Fatalf("KV used %d, the running request holds %d (prompt %d + %d generated)", h.s.kvUsed, a.reserved, a.prompt, a.generated)
	}
	for i := 0; i < 1000 && !(a.state == stateDone && b.state == stateDone && c.state == stateDone); i++ {
		h.step()
	}
	for _, r := range []*request{a, b, c} {
		if r.state != stateDone || r.generated != r.target {
			t.Errorf("%s: state %v, %d of %d tokens", r.id, r.state, r.generated, r.target)
		}
	}
	if got := h.metric("vllm:time_to_first_token_seconds"); got != 3 {
		t.Errorf("%v first tokens observed, want 3: a recompute is no first token", got)
	}
	if h.s.kvUsed != 0 {
		t.Errorf("KV used %d after every request finished", h.s.kvUsed)
	}
}

// ContextTokenCost prices each decode by the context it reads: a step of
// long streams costs more than one of short ones with the same sequences.
func TestSchedulerContextTokenCostPricesDecodesByTheirContext(t *testing.T) {
	cost := func(prompt int) time.Duration {
		h := newHarness(t, func(c *Config) { c.ContextTokenCost = 10 * time.Nanosecond })
		var last *request
		for range 4 {
			last = h.add(prompt, 0, "", 10)
		}
		for last.generated == 0 {
			h.step()
		}
		b := h.s.schedule(h.now)
		if b.decodeSeqs != 4 || b.prefillTokens != 0 {
			t.Fatalf("%d-token prompts: step of %d decodes and %d prefill tokens, want 4 and 0", prompt, b.decodeSeqs, b.prefillTokens)
		}
		return h.s.cost(b)
	}
	short, long := cost(100), cost(1100)
	if want := 4 * 1000 * 10 * time.Nanosecond; long-short != want {
		t.Errorf("four decodes of 1,000 more context tokens cost %v more, want %v", long-short, want)
	}
}
