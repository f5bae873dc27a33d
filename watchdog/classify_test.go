package watchdog

import (
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/probes"
)

var t0 = time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)

const iv = 15 * time.Second

// defaultParams are the defaults with the window fixed at hang_after_max,
// as the loop puts a window in force before every Classify.
func defaultParams() Params {
	p := ParamsFrom(configs.Default().Watchdog)
	p.HangAfter = p.HangAfterMax
	return p
}

// sim writes a history the way the loop would record it, one sample per
// tick, from an engine state the test mutates.
type sim struct {
	at      time.Time
	m       probes.Metrics
	models  probes.ModelsObservation
	health  probes.Observation
	scrape  *probes.MetricsObservation // overrides the scrape when set
	probe   probes.CompletionStatus
	lim     *LimiterLoad // the limiter's counts, when set
	samples []Sample
}

func newSim() *sim {
	return &sim{
		at: t0,
		m: probes.Metrics{
			Progress: map[string]float64{"vllm:prompt_tokens_total": 2_424_921, "vllm:generation_tokens_total": 60_300},
			Heartbeats: map[string]float64{
				"vllm:iteration_tokens_total_count": 3196, "vllm:prefix_cache_queries_total": 2_424_921, "vllm:request_success_total": 201,
			},
			Extra: map[string]float64{probes.MetricRequestSuccess: 201},
		},
		models: probes.ModelsObservation{Observation: ok(probes.EndpointModels), Models: []string{"llama"}},
		health: ok(probes.EndpointHealth),
		probe:  probes.CompletionStatus{State: probes.ProbeIdle},
	}
}

func ok(endpoint string) probes.Observation {
	return probes.Observation{Endpoint: endpoint, Code: 200, Latency: 3 * time.Millisecond}
}

func failed(endpoint string, class probes.ErrorClass, code int) probes.Observation {
	return probes.Observation{Endpoint: endpoint, Class: class, Code: code, Error: string(class)}
}

// work sets the gauges.
func (s *sim) work(waiting, running float64) *sim {
	s.m.Waiting, s.m.Running = waiting, running
	return s
}

// serve advances the counters as a working engine would in one tick.
func (s *sim) serve(tokens, done float64) *sim {
	s.m.Progress["vllm:generation_tokens_total"] += tokens
	s.m.Heartbeats["vllm:iteration_tokens_total_count"] += 50
	s.m.Heartbeats["vllm:request_success_total"] += done
	s.m.Extra[probes.MetricRequestSuccess] += done
	return s
}

// probeOK, probeOut and probeTimeout set the completion probe as polled.
func (s *sim) probeOK(lat time.Duration) *sim {
	s.probe = probes.CompletionStatus{State: probes.ProbeOK, Started: s.at.Add(-lat),
		Observation: probes.Observation{Endpoint: probes.EndpointCompletions, Code: 200, Latency: lat}}
	return s
}

// probeOut marks a probe outstanding since started (absolute).
func (s *sim) probeOut(started time.Time) *sim {
	s.probe = probes.CompletionStatus{State: probes.ProbeOutstanding, Started: started}
	return s
}

func (s *sim) probeTimeout(after time.Duration) *sim {
	s.probe = probes.CompletionStatus{State: probes.ProbeTimedOut, Started: s.at.Add(-after),
		Observation: probes.Observation{Endpoint: probes.EndpointCompletions, Class: probes.ClassTimeout, Latency: after}}
	return s
}

// tick records n samples, one interval apart, calling each (if any) before
// every sample.
func (s *sim) tick(n int, each ...func(*sim)) *sim {
	for range n {
		s.at = s.at.Add(iv)
		for _, f := range each {
			f(s)
		}
		sm := Sample{At: s.at, Models: s.models, Health: s.health, Probe: s.probe, Limiter: s.lim}
		if s.probe.State == probes.ProbeOutstanding {
			sm.Probe.Age = s.at.Sub(s.probe.Started)
		}
		if s.scrape != nil {
			sm.Metrics = *s.scrape
		} else {
			m := s.m
			m.Progress, m.Heartbeats, m.Extra = clone(s.m.Progress), clone(s.m.Heartbeats), clone(s.m.Extra)
			if s.m.Decode != nil {
				d := *s.m.Decode
				m.Decode = &d
			}
			if s.m.Ranks != nil {
				m.Ranks = map[string]*probes.Rank{}
				for id, r := range s.m.Ranks {
					c := *r
					c.Counters = clone(r.Counters)
					m.Ranks[id] = &c
				}
			}
			sm.Metrics = probes.MetricsObservation{Observation: ok(probes.EndpointMetrics), Metrics: &m}
		}
		s.samples = append(s.samples, sm)
	}
	return s
}

func clone(m map[string]float64) map[string]float64 {
	c := make(map[string]float64, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// keepProbeOutstanding restarts the probe each time it would time out,
// as the loop does, leaving one timed-out sample between probes.
func keepProbeOutstanding(timeout time.Duration) func(*sim) {
	return func(s *sim) {
		switch {
		case s.probe.State == probes.ProbeOutstanding && s.at.Sub(s.probe.Started) >= timeout:
			s.probeTimeout(timeout)
		case s.probe.State != probes.ProbeOutstanding:
			s.probeOut(s.at.Add(-time.Millisecond))
		}
	}
}

func unreadable(why string) func(*sim) {
	return func(s *sim) {
		s.scrape = &probes.MetricsObservation{Observation: probes.Observation{
			Endpoint: probes.EndpointMetrics, Class: probes.ClassOther, Code: 200, Error: why}}
	}
}

// classifyEach classifies every prefix of the history from two samples on
// (one alone cannot show progress), failing on any state in never, and
// returns the verdict on the whole history.
func classifyEach(t *testing.T, s *sim, p Params, never []State) Verdict {
	t.Helper()
	for i := 2; i < len(s.samples); i++ {
		prefix := s.samples[:i]
		v := Classify(prefix, p, prefix[i-1].At)
		for _, bad := range never {
			if v.State == bad {
				t.Fatalf("after %d samples: %s (%s)", i, v.State, v.Reason)
			}
		}
	}
	return Classify(s.samples, p, s.at)
}

func TestClassify(t *testing.T) {
	t.Parallel()
	type tc struct {
		name   string
		hist   func() *sim
		params func(*Params, *sim)
		want   State
		// never: no prefix of the history may classify as these.
		never  []State
		reason string
	}
	cases := []tc{
		{
			name: "no sample yet is unknown",
			hist: func() *sim { return newSim() },
			want: StateUnknown, reason: "no sample yet",
		},
		{
			name: "a busy engine with moving counters and a short queue is healthy",
			hist: func() *sim {
				return newSim().work(2, 8).probeOK(200*time.Millisecond).tick(6, func(s *sim) { s.serve(3000, 10) })
			},
			want: StateHealthy, never: []State{StateHung, StateSaturated, StateDown},
			reason: "HEALTHY: 2 waiting, 8 running, 200 tok/s; probe ok in 200ms",
		},
		{
			name: "idle engine with frozen counters is healthy",
			hist: func() *sim { return newSim().work(0, 0).probeOK(40 * time.Millisecond).tick(40) },
			want: StateHealthy, never: []State{StateHung, StateUnknown},
			reason: "HEALTHY: idle",
		},
		{
			name: "idle engine with our probe outstanding past hang_after is hung",
			hist: func() *sim {
				s := newSim().work(0, 0).probeOK(40 * time.Millisecond).tick(40)
				return s.probeOut(s.at.Add(time.Millisecond)).tick(13)
			},
			want:   StateHung,
			reason: "HUNG: no progress for 3m15s with only vigil's probe pending (0 waiting, 0 running); /v1/models 200 in 3ms (llama); probe outstanding for 3m15s",
		},
		{
			name: "idle engine whose probes keep timing out is hung",
			hist: func() *sim {
				return newSim().work(0, 0).tick(4).tick(14, keepProbeOutstanding(90*time.Second))
			},
			want: StateHung,
		},
		{
			name: "idle engine with our probe outstanding under hang_after is not yet hung",
			hist: func() *sim {
				s := newSim().work(0, 0).tick(40)
				return s.probeOut(s.at.Add(time.Millisecond)).tick(11)
			},
			want: StateUnknown, never: []State{StateHung},
			reason: "UNKNOWN: no progress for 2m45s with only vigil's probe pending (0 waiting, 0 running) (hung at 3m00s)",
		},
		{
			name: "hang under load is hung after hang_after",
			hist: func() *sim {
				return newSim().work(40, 8).probeOK(2*time.Second).
					tick(8, func(s *sim) { s.serve(30000, 20) }).
					tick(13, keepProbeOutstanding(90*time.Second))
			},
			want:   StateHung,
			reason: "HUNG: no progress for 3m15s with 40 waiting, 8 running; /v1/models 200 in 3ms (llama); probe outstanding for 1m15s",
		},
		{
			name: "hang under load is not hung before hang_after",
			hist: func() *sim {
				return newSim().work(40, 8).probeOK(2*time.Second).
					tick(8, func(s *sim) { s.serve(30000, 20) }).
					tick(11, keepProbeOutstanding(90*time.Second))
			},
			want: StateUnknown, never: []State{StateHung, StateHealthy},
			reason: "UNKNOWN: no progress for 2m45s with 40 waiting, 8 running (hung at 3m00s)",
		},
		{
			name: "a /v1/models timeout with frozen counters under load is still hung",
			hist: func() *sim {
				return newSim().work(40, 8).tick(2, func(s *sim) { s.serve(1000, 1) }).
					tick(14, func(s *sim) {
						s.models = probes.ModelsObservation{Observation: probes.Observation{Endpoint: probes.EndpointModels, Class: probes.ClassTimeout, Latency: 10 * time.Second}}
					})
			},
			want: StateHung,
		},
		{
			name: "saturated for ten minutes never becomes hung",
			hist: func() *sim {
				return newSim().work(99, 8).tick(40, func(s *sim) { s.serve(41200, 4) }, keepProbeOutstanding(90*time.Second))
			},
			want: StateSaturated, never: []State{StateHung, StateDown},
			reason: "SATURATED: 99 waiting, 8 running, 2,747 tok/s, counters +41,200 in 15s; est. drain 6m; probe",
		},
		{
			name: "a probe timeout while counters move is saturated even with a short queue",
			hist: func() *sim {
				return newSim().work(2, 64).tick(3, func(s *sim) { s.serve(5000, 5) }).probeTimeout(90*time.Second).tick(1, func(s *sim) { s.serve(5000, 5) })
			},
			want: StateSaturated, reason: "probe timeout after 1m30s (SLO 30s)",
		},
		{
			name: "a probe outstanding within its SLO after a timeout stays saturated",
			hist: func() *sim {
				s := newSim().work(2, 64).tick(3, func(s *sim) { s.serve(5000, 5) }).probeTimeout(90*time.Second).tick(1, func(s *sim) { s.serve(5000, 5) })
				return s.probeOut(s.at.Add(time.Millisecond)).tick(1, func(s *sim) { s.serve(5000, 5) })
			},
			want: StateSaturated,
		},
		{
			name: "long prefill moves only the iteration heartbeat: not hung",
			hist: func() *sim {
				return newSim().work(0, 1).probeOK(time.Second).tick(2, func(s *sim) { s.serve(100, 1) }).
					tick(30, func(s *sim) { s.m.Heartbeats["vllm:iteration_tokens_total_count"] += 20 })
			},
			want: StateHealthy, never: []State{StateHung, StateUnknown},
		},
		{
			name: "counter reset after engine restart re-baselines",
			hist: func() *sim {
				return newSim().work(5, 8).probeOK(time.Second).tick(5, func(s *sim) { s.serve(10000, 10) }).
					tick(1, func(s *sim) {
						for k := range s.m.Progress {
							s.m.Progress[k] = 50
						}
						for k := range s.m.Heartbeats {
							s.m.Heartbeats[k] = 2
						}
						s.m.Extra[probes.MetricRequestSuccess] = 2
					})
			},
			want: StateHealthy, never: []State{StateHung, StateUnknown},
			reason: "counters reset (engine restarted), re-baselined",
		},
		{
			name: "a counter reset restarts the frozen clock",
			hist: func() *sim {
				return newSim().work(5, 8).tick(11).
					tick(1, func(s *sim) {
						// An engine restart takes every counter back at once.
						for _, c := range []map[string]float64{s.m.Progress, s.m.Heartbeats, s.m.Extra} {
							for k := range c {
								c[k] = 0
							}
						}
					}).
					tick(2)
			},
			want: StateUnknown, never: []State{StateHung},
			reason: "no progress for 30s",
		},
		{
			name: "unreadable metrics are unknown, never frozen",
			hist: func() *sim {
				return newSim().work(40, 8).tick(2, func(s *sim) { s.serve(1000, 1) }).tick(4).
					tick(30, unreadable("metrics: parse: text format parsing error in line 3"))
			},
			want: StateUnknown, never: []State{StateHung},
			reason: "UNKNOWN: /metrics unreadable (metrics: parse: text format parsing error in line 3)",
		},
		{
			name: "unreadable scrapes bracketed by equal readings count toward hang_after",
			hist: func() *sim {
				s := newSim().work(40, 8).tick(2, func(s *sim) { s.serve(1000, 1) }).tick(6).
					tick(20, unreadable("metrics: empty body"))
				s.scrape = nil
				return s.tick(1)
			},
			want:   StateHung,
			reason: "HUNG: no progress for 6m45s with 40 waiting, 8 running",
		},
		{
			name: "unreadable scrapes at the end of the history do not count toward hang_after",
			hist: func() *sim {
				return newSim().work(40, 8).tick(2, func(s *sim) { s.serve(1000, 1) }).tick(6).
					tick(20, unreadable("metrics: empty body"))
			},
			want: StateUnknown, never: []State{StateHung},
			reason: "UNKNOWN: /metrics unreadable (metrics: empty body)",
		},
		{
			name: "401 is misconfigured",
			hist: func() *sim {
				return newSim().work(0, 0).tick(2, func(s *sim) {
					s.models = probes.ModelsObservation{Observation: failed(probes.EndpointModels, probes.ClassHTTPStatus, 401)}
				})
			},
			want: StateMisconfigured, never: []State{StateDown, StateHung},
			reason: "MISCONFIGURED: /v1/models answered 401",
		},
		{
			name: "a 403 on the probe is misconfigured",
			hist: func() *sim {
				return newSim().work(0, 0).tick(1, func(s *sim) {
					s.probe = probes.CompletionStatus{State: probes.ProbeFailed, Observation: failed(probes.EndpointCompletions, probes.ClassHTTPStatus, 403)}
				})
			},
			want: StateMisconfigured,
		},
		{
			name: "a probe refused while the restarted engine loaded does not taint the first verdict after it serves",
			hist: func() *sim {
				return newSim().work(2, 8).tick(3, func(s *sim) { s.serve(3000, 10) }).tick(1, func(s *sim) {
					s.serve(3000, 10)
					s.probe = probes.CompletionStatus{State: probes.ProbeFailed, Observation: failed(probes.EndpointCompletions, probes.ClassRefused, 0)}
				})
			},
			want: StateHealthy,
		},
		{
			name: "refused on one sample is not yet down",
			hist: func() *sim {
				return newSim().work(0, 0).tick(3).tick(1, func(s *sim) {
					s.models = probes.ModelsObservation{Observation: failed(probes.EndpointModels, probes.ClassRefused, 0)}
					s.health = failed(probes.EndpointHealth, probes.ClassRefused, 0)
					unreadable("refused")(s)
				})
			},
			want: StateUnknown, never: []State{StateDown},
		},
		{
			name: "refused on two samples is down",
			hist: func() *sim {
				return newSim().work(0, 0).tick(3).tick(2, func(s *sim) {
					s.models = probes.ModelsObservation{Observation: failed(probes.EndpointModels, probes.ClassRefused, 0)}
					s.health = failed(probes.EndpointHealth, probes.ClassRefused, 0)
					unreadable("refused")(s)
				})
			},
			want: StateDown, reason: "DOWN: /health refused, /v1/models refused on 2 consecutive samples",
		},
		{
			name: "503 from /health on two samples is down",
			hist: func() *sim {
				return newSim().work(3, 3).tick(3, func(s *sim) { s.serve(10, 1) }).tick(2, func(s *sim) {
					s.health = failed(probes.EndpointHealth, probes.ClassHTTPStatus, 503)
				})
			},
			want: StateDown,
		},
		{
			name: "an empty reply from /health on two samples is down",
			hist: func() *sim {
				return newSim().tick(2).tick(2, func(s *sim) {
					s.health = failed(probes.EndpointHealth, probes.ClassReset, 0)
				})
			},
			want: StateDown,
		},
		{
			name: "an empty reply from /v1/models alone, /health and /metrics fine, is odd, not down",
			hist: func() *sim {
				return newSim().tick(2).tick(2, func(s *sim) {
					s.models = probes.ModelsObservation{Observation: failed(probes.EndpointModels, probes.ClassReset, 0)}
				})
			},
			want: StateHealthy, reason: "odd: /v1/models answers reset (empty reply) while the engine is not down",
		},
		{
			name: "within startup grace is loading",
			hist: func() *sim {
				return newSim().tick(8, func(s *sim) {
					s.models = probes.ModelsObservation{Observation: failed(probes.EndpointModels, probes.ClassRefused, 0)}
					s.health = failed(probes.EndpointHealth, probes.ClassRefused, 0)
					unreadable("refused")(s)
				})
			},
			params: func(p *Params, s *sim) { p.LastStart = t0 },
			want:   StateLoading, never: []State{StateDown},
			reason: "LOADING: engine (re)started 2m00s ago",
		},
		{
			name: "still refusing after the startup grace is down",
			hist: func() *sim {
				return newSim().tick(8, func(s *sim) {
					s.models = probes.ModelsObservation{Observation: failed(probes.EndpointModels, probes.ClassRefused, 0)}
					s.health = failed(probes.EndpointHealth, probes.ClassRefused, 0)
				})
			},
			params: func(p *Params, s *sim) { p.LastStart = t0; p.StartupGrace = time.Minute },
			want:   StateDown,
		},
		{
			name: "ready once after a restart, refusing again is down, not loading",
			hist: func() *sim {
				return newSim().tick(2).tick(2, func(s *sim) {
					s.models = probes.ModelsObservation{Observation: failed(probes.EndpointModels, probes.ClassRefused, 0)}
					s.health = failed(probes.EndpointHealth, probes.ClassRefused, 0)
				})
			},
			params: func(p *Params, s *sim) { p.LastStart = t0 },
			want:   StateDown,
		},
		{
			name: "samples refused while loading do not count toward down once it serves",
			hist: func() *sim {
				return newSim().tick(8, func(s *sim) {
					s.models = probes.ModelsObservation{Observation: failed(probes.EndpointModels, probes.ClassRefused, 0)}
					s.health = failed(probes.EndpointHealth, probes.ClassRefused, 0)
				}).tick(1, func(s *sim) {
					s.models = probes.ModelsObservation{Observation: ok(probes.EndpointModels), Models: []string{"llama"}}
				})
			},
			params: func(p *Params, s *sim) { p.LastStart = t0 },
			want:   StateHealthy, never: []State{StateDown},
		},
		{
			name: "a 401 during the startup grace is misconfigured, not loading",
			hist: func() *sim {
				return newSim().tick(3, func(s *sim) {
					s.models = probes.ModelsObservation{Observation: failed(probes.EndpointModels, probes.ClassHTTPStatus, 401)}
				})
			},
			params: func(p *Params, s *sim) { p.LastStart = t0 },
			want:   StateMisconfigured, never: []State{StateLoading},
		},
		{
			name: "ready before the history began ends the grace too",
			hist: func() *sim {
				return newSim().tick(2, func(s *sim) {
					s.models = probes.ModelsObservation{Observation: failed(probes.EndpointModels, probes.ClassRefused, 0)}
					s.health = failed(probes.EndpointHealth, probes.ClassRefused, 0)
				})
			},
			params: func(p *Params, s *sim) { p.LastStart = t0; p.LastReady = t0.Add(time.Second) },
			want:   StateDown,
		},
		{
			name: "a probe that fails with 404 while counters move is unknown, not healthy",
			hist: func() *sim {
				return newSim().work(1, 4).tick(3, func(s *sim) {
					s.serve(500, 2)
					s.probe = probes.CompletionStatus{State: probes.ProbeFailed, Observation: failed(probes.EndpointCompletions, probes.ClassHTTPStatus, 404)}
				})
			},
			want: StateUnknown, reason: "check engine.model",
		},
		{
			name: "the first readable scrape with work pending cannot be judged yet",
			hist: func() *sim { return newSim().work(3, 3).tick(1) },
			want: StateUnknown, reason: "first readable scrape",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := c.hist()
			p := defaultParams()
			if c.params != nil {
				c.params(&p, s)
			}
			v := classifyEach(t, s, p, c.never)
			if v.State != c.want {
				t.Fatalf("got %s (%s), want %s", v.State, v.Reason, c.want)
			}
			if !strings.Contains(v.Reason, c.reason) {
				t.Fatalf("reason %q does not say %q", v.Reason, c.reason)
			}
			if v.At != s.at || v.Reason == "" {
				t.Fatalf("verdict not stamped or without reason: %+v", v)
			}
			for _, bad := range c.never {
				if v.State == bad {
					t.Fatalf("final verdict %s", v.State)
				}
			}
		})
	}
}

func TestEvidenceSaysWhatVigilSaw(t *testing.T) {
	t.Parallel()
	s := newSim().work(99, 8).probeOK(2*time.Second).tick(5, func(s *sim) { s.serve(41200, 4) })
	// One 45 s stall while work was pending, then back to work.
	s.tick(3).tick(2, func(s *sim) { s.serve(41200, 4) })
	p := defaultParams()
	p.RateWindow = 30 * time.Second
	v := Classify(s.samples, p, s.at)
	ev := v.Evidence
	checks := []struct {
		name      string
		got, want any
	}{
		{"waiting", ev.Waiting, 99.0},
		{"running", ev.Running, 8.0},
		{"window", ev.Window, 30 * time.Second},
		{"samples", ev.Samples, 3},
		{"progress delta", ev.ProgressDelta, 82400.0},
		{"tokens/s", ev.TokensPerSec, 82400.0 / 30},
		{"iteration heartbeat delta", ev.HeartbeatDeltas["vllm:iteration_tokens_total_count"], 100.0},
		{"completions/s", ev.CompletionsPerSec, 8.0 / 30},
		{"drain estimate", ev.DrainEstimate, time.Duration(99 / (8.0 / 30) * float64(time.Second))},
		{"since progress", ev.SinceProgress, time.Duration(0)},
		{"longest gap", ev.LongestGap, 45 * time.Second},
		{"stalled", ev.Stalled, time.Duration(0)},
		{"probe", ev.Probe, "ok in 2s"},
		{"probe latency", ev.ProbeLatency, 2 * time.Second},
		{"models", ev.Models, "200 in 3ms (llama)"},
		{"health", ev.Health, "200 in 3ms"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if v.State != StateSaturated {
		t.Errorf("state %s (%s)", v.State, v.Reason)
	}
}

// The completion rate is the engine's own finished-request counter where
// it has one; where it has none (llama.cpp) and vigil's limiter is in
// front, it is the calls the limiter saw answered, said to be that; with
// neither it is unknown, never 0.
func TestTheCompletionRateComesFromWhatCountsFinishedCalls(t *testing.T) {
	t.Parallel()
	noCounter := func(s *sim) *sim {
		delete(s.m.Extra, probes.MetricRequestSuccess)
		delete(s.m.Heartbeats, "vllm:request_success_total")
		return s
	}
	// tokens moves the token counters alone, as llama.cpp's do.
	tokens := func(s *sim) {
		s.m.Progress["vllm:generation_tokens_total"] += 4000
		s.m.Heartbeats["vllm:iteration_tokens_total_count"] += 50
	}
	// answers has the limiter count n more answered calls each tick.
	answers := func(n uint64) func(*sim) {
		return limiterCounts(func(l *LimiterLoad) {
			l.Answered += n
			l.Calls += n
		})
	}
	for _, tc := range []struct {
		name         string
		hist         func() *sim
		known, vigil bool
		rate         float64
	}{
		{"the engine's counter", func() *sim {
			return newSim().work(30, 8).tick(5, func(s *sim) { s.serve(4000, 6) })
		}, true, false, 6.0 / 15},
		{"the engine's counter, the limiter beside it: the engine's", func() *sim {
			return newSim().work(30, 8).tick(5, func(s *sim) { s.serve(4000, 6) }, answers(3))
		}, true, false, 6.0 / 15},
		{"no counter, no limiter: unknown", func() *sim {
			return noCounter(newSim()).work(30, 8).tick(5, tokens)
		}, false, false, 0},
		{"no counter, the limiter in front: the calls it saw answered", func() *sim {
			return noCounter(newSim()).work(0, 2).tick(5, tokens, answers(135))
		}, true, true, 135.0 / 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.hist()
			p := defaultParams()
			p.RateWindow = time.Minute
			ev := Classify(s.samples, p, s.at).Evidence
			if ev.CompletionsKnown != tc.known || ev.CompletionsThroughVigil != tc.vigil || ev.CompletionsPerSec != tc.rate {
				t.Errorf("completions known %v, through vigil %v, %v/s; want %v, %v, %v/s",
					ev.CompletionsKnown, ev.CompletionsThroughVigil, ev.CompletionsPerSec, tc.known, tc.vigil, tc.rate)
			}
			if ev.CompletionsThroughVigil && ev.DrainEstimate != 0 {
				t.Errorf("a drain estimate (%s) from the limiter's answers", ev.DrainEstimate)
			}
		})
	}
}

// With /metrics unreadable from the start (llama-server without
// --metrics answers 501), the queue and the rates are unknown, not 0;
// one readable scrape gives the queue, two the rates.
func TestEvidenceKnowsWhenTheScrapesSaidNothing(t *testing.T) {
	t.Parallel()
	unreadable := &probes.MetricsObservation{Observation: failed(probes.EndpointMetrics, probes.ClassOther, 501)}
	for _, tc := range []struct {
		name         string
		hist         func() *sim
		queue, rates bool
	}{
		{"never readable", func() *sim { s := newSim(); s.scrape = unreadable; return s.tick(4) }, false, false},
		{"readable once, at the end", func() *sim {
			s := newSim()
			s.scrape = unreadable
			s.tick(3)
			s.scrape = nil
			return s.tick(1)
		}, true, false},
		{"readable", func() *sim { return newSim().tick(4) }, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.hist()
			ev := Classify(s.samples, defaultParams(), s.at).Evidence
			if ev.QueueKnown() != tc.queue || ev.RatesKnown() != tc.rates {
				t.Errorf("queue known %v, rates known %v; want %v, %v (%+v)", ev.QueueKnown(), ev.RatesKnown(), tc.queue, tc.rates, ev)
			}
		})
	}
}
