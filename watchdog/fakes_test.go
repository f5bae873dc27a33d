package watchdog

import (
	"context"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/probes"
)

// fakeEngine answers the Probes interface from a scripted engine whose
// counters advance with the (synctest) clock while it serves.
type fakeEngine struct {
	mu   sync.Mutex
	mode string // serving, hung, down, unauthorized, garbage, wedged (every endpoint times out)
	last time.Time

	waiting, running float64
	tokensPerSec     float64
	tokens, steps    float64
	done             float64

	// stormFactor multiplies prefix-cache queries against prompt tokens
	// (1: every admitted prompt is prefilled; 10: retry storm).
	stormFactor float64

	probeLatency time.Duration // a probe's answer time while serving
	probeTimeout time.Duration
	probe        probes.CompletionStatus
	probeRunning bool
	probes       int // probes started
	// healthRefused: /health refuses while the rest serves (an odd
	// endpoint, as while vigil's own restart kills the old process).
	healthRefused bool
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{mode: "serving", last: time.Now(), probeLatency: 50 * time.Millisecond,
		probeTimeout: 90 * time.Second, probe: probes.CompletionStatus{State: probes.ProbeIdle}, tokens: 1000, stormFactor: 1}
}

// set changes the engine under the lock, after bringing its counters up
// to now.
func (f *fakeEngine) set(fn func(f *fakeEngine)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance(time.Now())
	fn(f)
}

func (f *fakeEngine) advance(now time.Time) {
	dt := now.Sub(f.last).Seconds()
	f.last = now
	if f.mode != "serving" || f.waiting+f.running == 0 {
		return
	}
	f.tokens += f.tokensPerSec * dt
	f.steps += 20 * dt
	f.done += dt
}

func (f *fakeEngine) Models(context.Context) probes.ModelsObservation {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch f.mode {
	case "down":
		return probes.ModelsObservation{Observation: probes.Observation{Endpoint: probes.EndpointModels, Class: probes.ClassRefused, Error: "connection refused"}}
	case "unauthorized":
		return probes.ModelsObservation{Observation: probes.Observation{Endpoint: probes.EndpointModels, Class: probes.ClassHTTPStatus, Code: 401}}
	case "wedged":
		return probes.ModelsObservation{Observation: timedOut(probes.EndpointModels)}
	}
	return probes.ModelsObservation{Observation: probes.Observation{Endpoint: probes.EndpointModels, Code: 200, Latency: 2 * time.Millisecond}, Models: []string{"llama"}}
}

func (f *fakeEngine) Health(context.Context) probes.Observation {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mode == "wedged" {
		return timedOut(probes.EndpointHealth)
	}
	if f.mode == "down" || f.healthRefused {
		return probes.Observation{Endpoint: probes.EndpointHealth, Class: probes.ClassRefused, Error: "connection refused"}
	}
	return probes.Observation{Endpoint: probes.EndpointHealth, Code: 200, Latency: time.Millisecond}
}

func (f *fakeEngine) Metrics(context.Context) probes.MetricsObservation {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance(time.Now())
	switch f.mode {
	case "down":
		return probes.MetricsObservation{Observation: probes.Observation{Endpoint: probes.EndpointMetrics, Class: probes.ClassRefused, Error: "connection refused"}}
	case "garbage":
		return probes.MetricsObservation{Observation: probes.Observation{Endpoint: probes.EndpointMetrics, Code: 200, Class: probes.ClassOther, Error: "metrics: parse: garbage"}}
	case "wedged":
		return probes.MetricsObservation{Observation: timedOut(probes.EndpointMetrics)}
	}
	return probes.MetricsObservation{
		Observation: probes.Observation{Endpoint: probes.EndpointMetrics, Code: 200, Latency: 3 * time.Millisecond},
		Metrics: &probes.Metrics{
			Waiting: f.waiting, Running: f.running,
			Progress:   map[string]float64{"vllm:generation_tokens_total": float64(int(f.tokens))},
			Heartbeats: map[string]float64{"vllm:iteration_tokens_total_count": float64(int(f.steps))},
			Extra: map[string]float64{
				probes.MetricRequestSuccess:     float64(int(f.done)),
				probes.MetricPromptTokens:       float64(int(f.tokens)),
				probes.MetricPrefixCacheQueries: float64(int(f.tokens * f.stormFactor)),
				probes.MetricE2ELatencyCount:    float64(int(f.done)),
				probes.MetricE2ELatencySum:      float64(int(f.done)) * 12,
			},
		},
		Missing: []string{"vllm:prefix_cache_queries_total"},
	}
}

func (f *fakeEngine) StartCompletion(model string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pollLocked()
	if f.probeRunning {
		return false
	}
	f.probeRunning = true
	f.probes++
	f.probe = probes.CompletionStatus{State: probes.ProbeOutstanding, Model: model, Started: time.Now()}
	return true
}

func (f *fakeEngine) PollCompletion() probes.CompletionStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pollLocked()
	return f.probe
}

func (f *fakeEngine) pollLocked() {
	if !f.probeRunning {
		return
	}
	age := time.Since(f.probe.Started)
	switch {
	case f.mode == "down":
		f.probeRunning = false
		f.probe.State = probes.ProbeFailed
		f.probe.Observation = probes.Observation{Endpoint: probes.EndpointCompletions, Class: probes.ClassRefused}
	case f.mode == "serving" && age >= f.probeLatency:
		f.probeRunning = false
		f.probe.State = probes.ProbeOK
		f.probe.Observation = probes.Observation{Endpoint: probes.EndpointCompletions, Code: 200, Latency: f.probeLatency}
		f.tokens += 2 // the probe's own prompt and token
		f.done++
	case age >= f.probeTimeout:
		f.probeRunning = false
		f.probe.State = probes.ProbeTimedOut
		f.probe.Observation = probes.Observation{Endpoint: probes.EndpointCompletions, Class: probes.ClassTimeout, Latency: f.probeTimeout}
	default:
		f.probe.Age = age
	}
}

// fakePager records what it was told.
type fakePager struct {
	mu   sync.Mutex
	seen []paged
}

type paged struct {
	v   Verdict
	inc *Incident
}

func (p *fakePager) Observe(v Verdict, inc *Incident) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = append(p.seen, paged{v, inc})
}

func (p *fakePager) all() []paged {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]paged(nil), p.seen...)
}

// fakeRecoverer records recoveries; busy holds for busyFor after each.
type fakeRecoverer struct {
	mu          sync.Mutex
	calls       []Incident
	busyUntil   time.Time
	busyFor     time.Duration
	lastRestart time.Time
}

func (r *fakeRecoverer) Recover(_ context.Context, inc Incident, _ Verdict) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, inc)
	r.busyUntil = time.Now().Add(r.busyFor)
}

func (r *fakeRecoverer) Busy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Now().Before(r.busyUntil)
}

func (r *fakeRecoverer) LastRestart() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastRestart
}

func (r *fakeRecoverer) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// fakeLimiter records the last SetSaturated and whether it was ever true.
type fakeLimiter struct {
	mu             sync.Mutex
	saturated, any bool
}

func (l *fakeLimiter) SetSaturated(b bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.saturated = b
	l.any = l.any || b
}

func (l *fakeLimiter) get() (now, ever bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.saturated, l.any
}
