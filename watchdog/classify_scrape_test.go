package watchdog

import (
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/probes"
)

// Bad scrapes, one case per row of issue #27's first table: /metrics damaged
// the way proxies, timeouts and caches damage it, then (where the row says
// so) a hang under load. Every hang must be HUNG within hang_after plus a
// few intervals of its start; no damage may turn a healthy engine into a
// restart or a flapping verdict.

// everyNth applies fault on every nth tick (counting from 1) and restores a
// good scrape on the others.
func everyNth(n int, fault func(*sim)) func(*sim) {
	i := 0
	return func(s *sim) {
		i++
		s.scrape = nil
		if i%n == 0 {
			fault(s)
		}
	}
}

// cutMidLine is a body cut inside a line: the parser rejects it.
func cutMidLine(s *sim) {
	unreadable("metrics: parse: text format parsing error in line 212: unexpected end of input")(s)
}

// answer500 is /metrics answering 500.
func answer500(s *sim) {
	s.scrape = &probes.MetricsObservation{Observation: failed(probes.EndpointMetrics, probes.ClassHTTPStatus, 500)}
}

// cutAtLineBoundary is a body cut between two lines: it parses, the
// families after the cut are missing, and the histogram cut before its
// _count line read as 0 (what the parser did before it read it as missing).
func cutAtLineBoundary(s *sim) {
	m := s.m
	m.Progress = clone(s.m.Progress)
	m.Heartbeats = clone(s.m.Heartbeats)
	m.Heartbeats["vllm:iteration_tokens_total_count"] = 0
	delete(m.Heartbeats, "vllm:prefix_cache_queries_total")
	delete(m.Heartbeats, "vllm:request_success_total")
	m.Extra = map[string]float64{}
	m.Decode = nil
	s.scrape = &probes.MetricsObservation{Observation: ok(probes.EndpointMetrics), Metrics: &m,
		Missing: []string{"vllm:prefix_cache_queries_total", "vllm:request_success_total"}}
}

// staleFrom freezes the scrape at the engine's current values: a caching
// layer serving the same old body from now on.
func staleFrom(s *sim) {
	m := s.m
	m.Progress, m.Heartbeats, m.Extra = clone(s.m.Progress), clone(s.m.Heartbeats), clone(s.m.Extra)
	s.scrape = &probes.MetricsObservation{Observation: ok(probes.EndpointMetrics), Metrics: &m}
}

// skewedDecode gives first tokens and no decode, the two counters read a
// moment apart: every third scrape sees one first token whose generation
// token the scrape read just before it.
func skewedDecode() func(*sim) {
	i := 0
	return func(s *sim) {
		i++
		s.firstTokens(3)
		if i%3 == 0 {
			s.m.Decode.Generation--
			defer func() { s.m.Decode.Generation++ }()
		}
		staleOnce(s)
	}
}

// staleOnce records this tick's metrics as the scrape, so a later change
// of s.m (the deferred undo above) does not reach it.
func staleOnce(s *sim) {
	m := s.m
	m.Progress, m.Heartbeats, m.Extra = clone(s.m.Progress), clone(s.m.Heartbeats), clone(s.m.Extra)
	d := *s.m.Decode
	m.Decode = &d
	s.scrape = &probes.MetricsObservation{Observation: ok(probes.EndpointMetrics), Metrics: &m}
}

// verdicts classifies the history as the loop would, one verdict per sample.
func verdicts(s *sim, p Params) []Verdict {
	out := make([]Verdict, 0, len(s.samples))
	for i := 1; i <= len(s.samples); i++ {
		out = append(out, Classify(s.samples[:i], p, s.samples[i-1].At))
	}
	return out
}

// firstAt is the first verdict in vs at or after from with state want.
func firstAt(vs []Verdict, from time.Time, want State) (Verdict, bool) {
	for _, v := range vs {
		if !v.At.Before(from) && v.State == want {
			return v, true
		}
	}
	return Verdict{}, false
}

func TestBadScrapesNeverHideAHang(t *testing.T) {
	t.Parallel()
	const hangAfter = time.Minute
	slack := 3 * iv // a few intervals
	cases := []struct {
		name string
		// run writes the history and returns when the engine hung.
		run func(s *sim) time.Time
		// reason: what the HUNG line says.
		reason []string
	}{
		{
			name: "every other scrape cut mid-line, then a hang under load",
			run: func(s *sim) time.Time {
				s.work(40, 8).tick(8, everyNth(2, cutMidLine), func(s *sim) { s.serve(30000, 20) })
				hung := s.at
				s.tick(16, everyNth(2, cutMidLine), keepProbeOutstanding(90*time.Second))
				return hung
			},
			reason: []string{"HUNG: no progress for 1m00s with 40 waiting, 8 running"},
		},
		{
			name: "every other scrape answered 500, then a hang under load",
			run: func(s *sim) time.Time {
				s.work(40, 8).tick(8, everyNth(2, answer500), func(s *sim) { s.serve(30000, 20) })
				hung := s.at
				s.tick(16, everyNth(2, answer500), keepProbeOutstanding(90*time.Second))
				return hung
			},
			reason: []string{"HUNG: no progress for 1m00s"},
		},
		{
			name: "a body cut at a line boundary every third scrape, then a hang under load",
			run: func(s *sim) time.Time {
				s.work(40, 8).tick(9, func(s *sim) { s.serve(30000, 20) }, everyNth(3, cutAtLineBoundary))
				hung := s.at
				s.tick(16, everyNth(3, cutAtLineBoundary), keepProbeOutstanding(90*time.Second))
				return hung
			},
			reason: []string{"HUNG: no progress for 1m00s"},
		},
		{
			name: "/metrics served from a cache, probes completing, then the engine hangs",
			run: func(s *sim) time.Time {
				s.work(40, 8).tick(4, func(s *sim) { s.serve(30000, 20) })
				staleFrom(s)
				s.tick(12, func(s *sim) { s.serve(30000, 20); s.probeOK(2 * time.Second) })
				hung := s.at
				s.tick(16, keepProbeOutstanding(90*time.Second))
				return hung
			},
			reason: []string{"HUNG: no probe has completed for 1m", "/metrics stayed unchanged for", "stale"},
		},
		{
			name: "decode stalls, first tokens and generation tokens read a moment apart",
			run: func(s *sim) time.Time {
				s.withDecode().work(30, 40).tick(4, func(s *sim) { s.firstTokens(3); s.decode(400); s.finished(3) })
				hung := s.at
				s.tick(24, skewedDecode())
				return hung
			},
			reason: []string{"HUNG (decode stalled): no decode token for"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := defaultParams()
			p.HangAfter = hangAfter
			s := newSim().probeOK(2 * time.Second)
			hungAt := c.run(s)
			vs := verdicts(s, p)
			v, ok := firstAt(vs, hungAt, StateHung)
			if !ok {
				t.Fatalf("never HUNG after the hang at +%s; last verdict: %s", hungAt.Sub(t0), vs[len(vs)-1].Reason)
			}
			if took := v.At.Sub(hungAt); took > hangAfter+slack {
				t.Errorf("HUNG %s after the hang; want within hang_after (%s) + %s", took, hangAfter, slack)
			}
			for _, want := range c.reason {
				if !strings.Contains(v.Reason, want) {
					t.Errorf("HUNG reason %q does not say %q", v.Reason, want)
				}
			}
			// Once hung, it stays hung while the fault lasts: no scrape
			// turns it back into serving.
			for _, later := range vs {
				if later.At.After(v.At) && later.State != StateHung {
					t.Fatalf("at +%s, after HUNG at +%s: %s (%s)", later.At.Sub(t0), v.At.Sub(t0), later.State, later.Reason)
				}
			}
		})
	}
}

func TestBadScrapesOnAHealthyEngineAreQuiet(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		fault func(*sim)
		every int
	}{
		{"a body cut at a line boundary every third scrape, 1x load", cutAtLineBoundary, 3},
		{"/metrics answering 500 every other scrape", answer500, 2},
		{"a body cut mid-line every other scrape", cutMidLine, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newSim().work(2, 8).probeOK(200*time.Millisecond).
				tick(40, func(s *sim) { s.serve(3000, 10) }, everyNth(c.every, c.fault))
			vs := verdicts(s, defaultParams())
			changes := 0
			for i, v := range vs {
				if i > 0 && v.State != vs[i-1].State {
					changes++
				}
				if i >= 2 && v.State != StateHealthy {
					t.Errorf("at +%s: %s (%s); want HEALTHY throughout", v.At.Sub(t0), v.State, v.Reason)
				}
				if strings.Contains(v.Reason, "counters reset") {
					t.Errorf("at +%s: %q says the counters reset on an engine that never restarted", v.At.Sub(t0), v.Reason)
				}
			}
			if changes > 1 {
				t.Errorf("the verdict changed %d times in %d cycles on a healthy engine", changes, len(vs))
			}
		})
	}
}

// A scrape whose counters went down only in part is no engine restart; an
// engine restart is believed when its counters reset together, or when its
// start time changed.
func TestOnlyAWholeResetIsARestart(t *testing.T) {
	t.Parallel()
	zero := func(s *sim) {
		for _, c := range []map[string]float64{s.m.Progress, s.m.Heartbeats, s.m.Extra} {
			for k := range c {
				c[k] = 0
			}
		}
	}
	cases := []struct {
		name  string
		hist  func() *sim
		reset bool
	}{
		{"every counter back to zero: a restart", func() *sim {
			return newSim().work(2, 8).tick(3, func(s *sim) { s.serve(3000, 10) }).tick(1, zero)
		}, true},
		{"one counter down, the others not: not a restart", func() *sim {
			return newSim().work(2, 8).tick(3, func(s *sim) { s.serve(3000, 10) }).
				tick(1, func(s *sim) { s.serve(3000, 10); s.m.Heartbeats["vllm:iteration_tokens_total_count"] = 0 })
		}, false},
		{"a counter down with the start time unchanged: not a restart", func() *sim {
			s := newSim().work(2, 8)
			s.m.Extra[probes.MetricProcessStart] = 1.7e9
			return s.tick(3, func(s *sim) { s.serve(3000, 10) }).tick(1, zero, func(s *sim) { s.m.Extra[probes.MetricProcessStart] = 1.7e9 })
		}, false},
		{"a counter down in part with the start time changed: a restart", func() *sim {
			s := newSim().work(2, 8)
			s.m.Extra[probes.MetricProcessStart] = 1.7e9
			return s.tick(3, func(s *sim) { s.serve(3000, 10) }).
				tick(1, func(s *sim) {
					s.m.Progress["vllm:prompt_tokens_total"] = 0
					s.m.Extra[probes.MetricProcessStart] = 1.8e9
				})
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := c.hist()
			v := Classify(s.samples, defaultParams(), s.at)
			if v.Evidence.CounterReset != c.reset {
				t.Errorf("counter reset = %v, want %v (%s: %s)", v.Evidence.CounterReset, c.reset, v.State, v.Reason)
			}
		})
	}
}

// Reasons that say what vigil saw: issue #27's "also confusing" list.
func TestReasonsSayWhatTheySaw(t *testing.T) {
	t.Parallel()
	loading503 := func(endpoint string) probes.Observation {
		return probes.Observation{Endpoint: endpoint, Class: probes.ClassHTTPStatus, Code: 503, Error: `503 Service Unavailable: {"error":"model is loading"}`}
	}
	cases := []struct {
		name    string
		hist    func() *sim
		params  func(*Params)
		want    State
		says    []string
		notSays []string
	}{
		{
			name: "an engine answering 503 model is loading everywhere reads as loading, not as a probe misconfiguration",
			hist: func() *sim {
				return newSim().work(0, 0).tick(3).tick(3, func(s *sim) {
					s.models = probes.ModelsObservation{Observation: loading503(probes.EndpointModels)}
					s.health = loading503(probes.EndpointHealth)
					s.scrape = &probes.MetricsObservation{Observation: loading503(probes.EndpointMetrics)}
					s.probe = probes.CompletionStatus{State: probes.ProbeFailed, Started: s.at.Add(-time.Second), Observation: loading503(probes.EndpointCompletions)}
				})
			},
			want:    StateDown,
			says:    []string{"the engine says it is loading the model"},
			notSays: []string{"check engine.model", "probe failing"},
		},
		{
			name: "an idle engine whose probe fails is not said to be moving",
			hist: func() *sim {
				return newSim().work(0, 0).tick(4, func(s *sim) {
					s.probe = probes.CompletionStatus{State: probes.ProbeFailed, Started: s.at.Add(-time.Second),
						Observation: probes.Observation{Endpoint: probes.EndpointCompletions, Class: probes.ClassHTTPStatus, Code: 404, Error: "404 Not Found: model nope"}}
				})
			},
			want:    StateUnknown,
			says:    []string{"counters unchanged"},
			notSays: []string{"moving"},
		},
		{
			name: "the HUNG line's duration is the stall's, unreadable scrapes in it included",
			hist: func() *sim {
				return newSim().work(40, 8).tick(4, func(s *sim) { s.serve(30000, 20) }).
					tick(4, everyNth(2, answer500), keepProbeOutstanding(90*time.Second)).tick(1, func(s *sim) { s.scrape = nil })
			},
			params: func(p *Params) { p.HangAfter = time.Minute },
			want:   StateHung,
			says:   []string{"HUNG: no progress for 1m15s"},
		},
		{
			name: "the pending work is named as vigil's own probe when it is the only work",
			hist: func() *sim {
				s := newSim().work(0, 0).tick(4)
				return s.probeOut(s.at.Add(time.Millisecond)).tick(13)
			},
			want: StateHung,
			says: []string{"only vigil's probe pending"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := defaultParams()
			if c.params != nil {
				c.params(&p)
			}
			s := c.hist()
			v := Classify(s.samples, p, s.at)
			if v.State != c.want {
				t.Fatalf("got %s (%s), want %s", v.State, v.Reason, c.want)
			}
			for _, w := range c.says {
				if !strings.Contains(v.Reason, w) {
					t.Errorf("reason %q does not say %q", v.Reason, w)
				}
			}
			for _, w := range c.notSays {
				if strings.Contains(v.Reason, w) {
					t.Errorf("reason %q says %q", v.Reason, w)
				}
			}
		})
	}
}

// With the limiter in front, a 3x overload shows at the limiter, not in
// the engine's queue: the node is saturated where it lives.
func TestSaturationHeldOffByTheLimiterIsSaturated(t *testing.T) {
	t.Parallel()
	limiter := func(calls, shed uint64, queued int) func(*sim) {
		var c, sh uint64
		return func(s *sim) {
			c, sh = c+calls, sh+shed
			s.lim = &LimiterLoad{Calls: c, Shed: sh, Queued: queued}
		}
	}
	cases := []struct {
		name        string
		lim         func(*sim)
		want        State
		says        string
		limiterOnly bool
	}{
		{"the limiter sheds 63% of calls, the engine shallow", limiter(100, 63, 2), StateSaturated, "SATURATED at the limiter: shedding 63% of 400 calls", true},
		{"the limiter queues past saturated_waiting, sheds nothing", limiter(100, 0, 12), StateSaturated, "12 calls queued in vigil", true},
		{"the limiter sheds 2% of calls", limiter(100, 2, 1), StateHealthy, "HEALTHY", false},
		{"too few calls to judge", limiter(3, 2, 0), StateHealthy, "HEALTHY", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newSim().work(3, 8).probeOK(200*time.Millisecond).tick(6, func(s *sim) { s.serve(3000, 10) }, c.lim)
			v := Classify(s.samples, defaultParams(), s.at)
			if v.State != c.want || !strings.Contains(v.Reason, c.says) {
				t.Fatalf("got %s (%s), want %s saying %q", v.State, v.Reason, c.want, c.says)
			}
			if v.Evidence.LimiterOnly != c.limiterOnly {
				t.Errorf("limiter only = %v, want %v", v.Evidence.LimiterOnly, c.limiterOnly)
			}
			// The limiter is never told to cut its cap for its own shedding.
			if got := saturatedForLimiter(v, &Incident{Peak: v.State}); got == c.limiterOnly && c.want == StateSaturated {
				t.Errorf("limiter told saturated = %v for %s", got, v.Reason)
			}
		})
	}
}
