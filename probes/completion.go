package probes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// EndpointCompletions is where the two-token completion probe (a prefill and one decode step) goes.
const EndpointCompletions = "/v1/completions"

// ProbeState is where the asynchronous completion probe stands.
type ProbeState string

// The completion probe's states.
const (
	// ProbeIdle: no probe started yet.
	ProbeIdle ProbeState = "idle"
	// ProbeOutstanding: started and not answered yet.
	ProbeOutstanding ProbeState = "outstanding"
	// ProbeOK: the last probe completed.
	ProbeOK ProbeState = "ok"
	// ProbeTimedOut: the last probe got no answer within its timeout.
	ProbeTimedOut ProbeState = "timed_out"
	// ProbeFailed: the last probe got an error or an unexpected answer.
	ProbeFailed ProbeState = "failed"
)

// CompletionStatus is what Poll reports: the probe in flight, or the last
// one's outcome.
type CompletionStatus struct {
	State ProbeState `json:"state"`
	Model string     `json:"model,omitempty"`
	// Started is when the probe reported on was sent.
	Started time.Time `json:"started,omitzero"`
	// Age is how long an outstanding probe has waited so far.
	Age time.Duration `json:"age,omitempty"`
	// Observation is the finished probe's outcome (latency, class, code).
	Observation
}

// Outstanding reports a probe in flight.
func (s CompletionStatus) Outstanding() bool { return s.State == ProbeOutstanding }

// Pending reports that our own request is (or was left) unanswered in the
// engine: in flight, or timed out. That alone is work pending, which is
// what turns an idle engine with frozen counters into a hung one.
func (s CompletionStatus) Pending() bool {
	return s.State == ProbeOutstanding || s.State == ProbeTimedOut
}

// Elapsed is how long the probe has taken: its age while outstanding, its
// latency once finished.
func (s CompletionStatus) Elapsed() time.Duration {
	if s.State == ProbeOutstanding {
		return s.Age
	}
	return s.Latency
}

// String is the one-line outcome: "ok in 120ms", "outstanding for 40s",
// "timeout after 1m30s", "failed: 404 in 3ms", "not started".
func (s CompletionStatus) String() string {
	switch s.State {
	case ProbeOutstanding:
		return fmt.Sprintf("outstanding for %s", roundLatency(s.Age))
	case ProbeOK:
		return fmt.Sprintf("ok in %s", roundLatency(s.Latency))
	case ProbeTimedOut:
		return fmt.Sprintf("timeout after %s", roundLatency(s.Latency))
	case ProbeFailed:
		return "failed: " + s.Observation.String()
	}
	return "not started"
}

// CompletionProber runs the two-token completion probe (a prefill and one decode step) in the background,
// one at a time, so a probe that takes 90 s never stalls the sampling
// cycle: each cycle Polls the last outcome and Starts the next. It is safe
// for concurrent use.
type CompletionProber struct {
	target  Target
	timeout time.Duration
	now     func() time.Time

	base   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	running bool
	cur     CompletionStatus // the probe in flight, when running
	last    CompletionStatus // the last finished probe
}

// NewCompletionProber returns a prober for t. timeout bounds each probe
// (it replaces t.Timeout); now is the clock for ages (nil: time.Now).
func NewCompletionProber(t Target, timeout time.Duration, now func() time.Time) *CompletionProber {
	if now == nil {
		now = time.Now
	}
	t.Timeout = 0
	base, cancel := context.WithCancel(context.Background())
	return &CompletionProber{
		target: t, timeout: timeout, now: now,
		base: base, cancel: cancel,
		last: CompletionStatus{State: ProbeIdle},
	}
}

// Start sends a probe for model unless one is outstanding; it reports
// whether it started one. An empty model sends no "model" field, which
// engines serving a single model accept.
func (p *CompletionProber) Start(model string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running || p.base.Err() != nil {
		return false
	}
	p.running = true
	p.cur = CompletionStatus{State: ProbeOutstanding, Model: model, Started: p.now()}
	p.wg.Add(1)
	go func(cur CompletionStatus) {
		defer p.wg.Done()
		obs := p.probe(model)
		cur.Observation = obs
		switch {
		case obs.OK():
			cur.State = ProbeOK
		case obs.Class == ClassTimeout:
			cur.State = ProbeTimedOut
		default:
			cur.State = ProbeFailed
		}
		p.mu.Lock()
		p.running = false
		p.last = cur
		p.mu.Unlock()
	}(p.cur)
	return true
}

// Poll reports the probe in flight (with its age) or, if none, the last
// finished one. It never blocks.
func (p *CompletionProber) Poll() CompletionStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		s := p.cur
		s.Age = p.now().Sub(s.Started)
		return s
	}
	return p.last
}

// Close cancels a probe in flight and waits for it to end.
func (p *CompletionProber) Close() {
	p.cancel()
	p.wg.Wait()
}

// probeTokens is how many tokens the probe asks for. Two, not one: the
// first token comes out of the prefill step, the second needs a decode
// step, so a decode stall (a stuck pipeline stage or KV transfer, where
// new requests still get their first token) leaves the probe outstanding
// instead of letting it pass. ignore_eos (vLLM and SGLang accept it; other
// servers ignore an unknown field) keeps a model whose first token is EOS
// from ending the probe before its decode step.
const probeTokens = 2

func (p *CompletionProber) probe(model string) Observation {
	body := map[string]any{"prompt": "ping", "max_tokens": probeTokens, "ignore_eos": true, "temperature": 0, "stream": false}
	if model != "" {
		body["model"] = model
	}
	raw, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(p.base, p.timeout)
	defer cancel()
	req, err := http.NewRequest(http.MethodPost, p.target.url(EndpointCompletions), bytes.NewReader(raw))
	if err != nil {
		return fail(Observation{Endpoint: EndpointCompletions}, err)
	}
	req.Header.Set("Content-Type", "application/json")
	obs, _, resp := do(ctx, p.target, req, EndpointCompletions)
	if !obs.OK() {
		return obs
	}
	var out struct {
		Choices []json.RawMessage `json:"choices"`
	}
	if err := json.Unmarshal(resp, &out); err != nil || len(out.Choices) == 0 {
		obs.Class, obs.Error = ClassOther, "not a completion: "+snippet(resp)
	}
	return obs
}
