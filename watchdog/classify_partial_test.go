package watchdog

import (
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/probes"
)

// The partial failures operators report, where /health stays 200 and the
// summed counters hide the fault, and the serving engines that must never
// be called down or hung. One case per row of issue #12's table, plus the
// edges of every new rule.

// ranks splits the engine into n data-parallel ranks sharing the load.
func (s *sim) ranks(n int, waiting, running float64) *sim {
	s.m.Ranks = map[string]*probes.Rank{}
	for i := range n {
		s.m.Ranks[string(rune('0'+i))] = &probes.Rank{Waiting: waiting, Running: running, Counters: map[string]float64{
			"vllm:prompt_tokens_total": 1000, "vllm:generation_tokens_total": 100, "vllm:iteration_tokens_total_count": 10,
		}}
	}
	s.m.Waiting, s.m.Running = waiting*float64(n), running*float64(n)
	return s
}

// serveRank moves one rank's counters, and the sums with them.
func (s *sim) serveRank(id string, tokens float64) {
	r := s.m.Ranks[id]
	r.Counters["vllm:generation_tokens_total"] += tokens
	r.Counters["vllm:iteration_tokens_total_count"] += 5
	s.serve(tokens, 1)
}

// withDecode gives the scrape decode counters.
func (s *sim) withDecode() *sim {
	s.m.Decode = &probes.DecodeCounters{FirstTokens: 201, Generation: 60_300, Finished: 201, AbortsKnown: true}
	return s
}

// aborts: n requests' clients went away (vLLM counts them under
// finished_reason="abort", in the summed heartbeat too).
func (s *sim) aborts(n float64) {
	s.m.Decode.Aborted += n
	s.m.Heartbeats["vllm:request_success_total"] += n
}

// firstTokens: n requests finish their prefill and get a first token.
func (s *sim) firstTokens(n float64) {
	s.m.Decode.FirstTokens += n
	s.m.Decode.Generation += n
	s.m.Progress["vllm:prompt_tokens_total"] += 1000 * n
	s.m.Progress["vllm:generation_tokens_total"] += n
	s.m.Heartbeats["vllm:iteration_tokens_total_count"] += 3
}

func (s *sim) decode(n float64) {
	s.m.Decode.Generation += n
	s.m.Progress["vllm:generation_tokens_total"] += n
	s.m.Heartbeats["vllm:iteration_tokens_total_count"] += 10
}

func (s *sim) finished(n float64) {
	s.m.Decode.Finished += n
	s.m.Heartbeats["vllm:request_success_total"] += n
	s.m.Extra[probes.MetricRequestSuccess] += n
}

func timedOut(endpoint string) probes.Observation {
	return probes.Observation{Endpoint: endpoint, Class: probes.ClassTimeout, Latency: 10 * time.Second, Error: "context deadline exceeded"}
}

// wedged: the API server accepts and never answers.
func wedged(s *sim) {
	s.models = probes.ModelsObservation{Observation: timedOut(probes.EndpointModels)}
	s.health = timedOut(probes.EndpointHealth)
	s.scrape = &probes.MetricsObservation{Observation: timedOut(probes.EndpointMetrics)}
}

// throughVigil: the limiter in front reads reads bytes of the engine's
// answers and sees answered calls end each tick.
func throughVigil(reads, answered uint64) func(*sim) {
	return limiterCounts(func(l *LimiterLoad) {
		l.EngineReads += reads
		l.Answered += answered
	})
}

// limiterCounts has the limiter in front count more each tick, as add
// says: a fresh LimiterLoad each time, as the loop records one a cycle
// (samples keep their own).
func limiterCounts(add func(*LimiterLoad)) func(*sim) {
	return func(s *sim) {
		l := LimiterLoad{}
		if s.lim != nil {
			l = *s.lim
		}
		add(&l)
		s.lim = &l
	}
}

func TestClassifyPartialFailures(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		hist   func() *sim
		params func(*Params, *sim)
		want   State
		hang   HangKind
		reason []string
		never  []State // at no prefix of the history
	}{
		// Row 1: one data-parallel rank hangs under load.
		{
			name: "one rank of two frozen with work for hang_after is hung, naming the rank",
			hist: func() *sim {
				return newSim().ranks(2, 20, 20).tick(14, func(s *sim) { s.serveRank("0", 800) })
			},
			want: StateHung, hang: HangRank,
			reason: []string{"HUNG (data-parallel rank): rank 1 of 2: no progress for 3m15s with 40 pending", "other ranks serve (1 moving"},
		},
		{
			name: "a rank frozen for less than hang_after is not hung yet",
			hist: func() *sim {
				return newSim().ranks(2, 20, 20).tick(8, func(s *sim) { s.serveRank("0", 800) })
			},
			want: StateSaturated, never: []State{StateHung, StateDown},
		},
		{
			name: "an idle rank beside a busy one is never hung",
			hist: func() *sim {
				s := newSim().ranks(2, 0, 0)
				s.m.Ranks["0"].Running, s.m.Ranks["0"].Waiting = 4, 0
				s.m.Running = 4
				return s.tick(20, func(s *sim) { s.serveRank("0", 800); s.probeOK(time.Second) })
			},
			want: StateHealthy, never: []State{StateHung, StateDown},
		},
		{
			name: "every rank moving is no rank hang",
			hist: func() *sim {
				return newSim().ranks(2, 20, 20).tick(20, func(s *sim) { s.serveRank("0", 800); s.serveRank("1", 800) })
			},
			want: StateSaturated, never: []State{StateHung, StateDown},
		},
		// Row 2: decode stalls while prefill goes on.
		{
			name: "first tokens keep coming, no decode token for hang_after: hung (decode stalled)",
			hist: func() *sim {
				return newSim().withDecode().work(30, 40).tick(2, func(s *sim) { s.firstTokens(3); s.decode(400); s.finished(3) }).
					tick(14, func(s *sim) { s.firstTokens(2); keepProbeOutstanding(90 * time.Second)(s) })
			},
			want: StateHung, hang: HangDecode,
			reason: []string{"HUNG (decode stalled): no decode token for 3m15s", "prefill goes on"},
		},
		{
			name: "a decode stall whose clients give up after a minute (aborts are not finishes) is still hung",
			hist: func() *sim {
				gave := 0
				return newSim().withDecode().work(30, 40).tick(2, func(s *sim) { s.firstTokens(3); s.decode(400); s.finished(3) }).
					tick(14, func(s *sim) {
						s.firstTokens(4)
						// Each tick's four wait a minute (4 ticks) for a
						// second token, then their clients leave.
						if gave++; gave > 4 {
							s.aborts(4)
						}
					})
			},
			want: StateHung, hang: HangDecode,
			reason: []string{"at least 16 of them still waiting"},
		},
		// The demo's false HUNG (cmd/vigil-demo, the overload straight at
		// the engine): 2.5x capacity of 12k-token prompts from callers
		// with a 50 s timeout. The queue grew to 400, every call reached
		// the head just as its caller gave up, and the one or two a cycle
		// that got a first token were aborted before their second: decode
		// frozen, first tokens trickling, 1-4 running, hundreds of aborts.
		// The engine stepped all along (heartbeat, prefix-cache queries).
		{
			name: "an overload whose callers leave before their second token (401 waiting, 1 running, aborts) is saturated, never a decode stall",
			hist: func() *sim {
				n := 0
				return newSim().withDecode().work(56, 90).tick(2, func(s *sim) { s.firstTokens(3); s.decode(400); s.finished(3) }).
					work(401, 1).tick(16, func(s *sim) {
					s.m.Heartbeats["vllm:iteration_tokens_total_count"] += 40
					s.m.Heartbeats["vllm:prefix_cache_queries_total"] += 120_000
					if n++; n%3 == 1 {
						s.firstTokens(1)
					}
					s.aborts(35) // the waiting callers' timeouts, and the one that got its first token
					s.probeOut(s.at.Add(-600 * time.Millisecond))
				})
			},
			want: StateSaturated, never: []State{StateHung},
		},
		{
			name: "after an overload's callers have all left, an engine serving vigil's two-token probe owes no decode",
			hist: func() *sim {
				return newSim().withDecode().work(56, 90).tick(2, func(s *sim) { s.firstTokens(3); s.decode(400); s.finished(3) }).
					work(300, 2).tick(3, func(s *sim) { s.firstTokens(2); s.aborts(150) }).
					work(0, 1).tick(14, func(s *sim) { s.m.Heartbeats["vllm:iteration_tokens_total_count"]++ }).
					tick(1, func(s *sim) { s.firstTokens(1); s.decode(1); s.finished(1); s.probeOK(40 * time.Millisecond) })
			},
			want: StateHealthy, never: []State{StateHung},
		},
		{
			name: "without an abort count, vigil's two-token probe completing proves decode moves",
			hist: func() *sim {
				s := newSim().withDecode()
				s.m.Decode.AbortsKnown = false
				return s.work(56, 90).tick(2, func(s *sim) { s.firstTokens(3); s.decode(400); s.finished(3) }).
					work(300, 2).tick(3, func(s *sim) { s.firstTokens(2); s.m.Heartbeats["vllm:request_success_total"] += 150 }).
					work(0, 1).tick(14, func(s *sim) {
					s.m.Heartbeats["vllm:iteration_tokens_total_count"]++
					if s.at.Sub(t0)%(4*iv) == 0 {
						s.firstTokens(1)
						s.decode(1)
						s.finished(1)
						s.probeOK(40 * time.Millisecond)
					}
				})
			},
			want: StateHealthy, never: []State{StateHung},
		},
		{
			name: "a decode stall on an engine that does not count aborts is judged as before: hung",
			hist: func() *sim {
				s := newSim().withDecode()
				s.m.Decode.AbortsKnown = false
				return s.work(30, 40).tick(2, func(s *sim) { s.firstTokens(3); s.decode(400); s.finished(3) }).
					tick(14, func(s *sim) { s.firstTokens(2) })
			},
			want: StateHung, hang: HangDecode,
		},
		{
			name: "decode frozen for less than hang_after is not hung yet",
			hist: func() *sim {
				return newSim().withDecode().work(30, 40).tick(2, func(s *sim) { s.firstTokens(3); s.decode(400); s.finished(3) }).
					tick(6, func(s *sim) { s.firstTokens(2) })
			},
			want: StateSaturated, never: []State{StateHung},
		},
		{
			name: "a max_tokens=1 workload (first token, then finished, no decode ever) is never a decode stall",
			hist: func() *sim {
				return newSim().withDecode().work(2, 6).tick(30, func(s *sim) { s.firstTokens(5); s.finished(5); s.probeOK(time.Second) })
			},
			want: StateHealthy, never: []State{StateHung, StateDown},
		},
		{
			name: "a long chunked prefill (running, no first token yet, steps moving) is never a decode stall",
			hist: func() *sim {
				return newSim().withDecode().work(0, 1).tick(30, func(s *sim) { s.m.Heartbeats["vllm:iteration_tokens_total_count"]++ })
			},
			want: StateHealthy, never: []State{StateHung, StateDown},
		},
		{
			name: "an idle engine after a burst owes no decode",
			hist: func() *sim {
				return newSim().withDecode().work(0, 2).tick(1, func(s *sim) { s.firstTokens(2) }).
					work(0, 0).tick(20)
			},
			want: StateHealthy, never: []State{StateHung, StateDown},
		},
		// Row 3: the API server is wedged.
		{
			name: "no endpoint answers at all for hang_after: hung (wedged)",
			hist: func() *sim {
				return newSim().work(3, 3).tick(2, func(s *sim) { s.serve(100, 1) }).
					tick(14, wedged, keepProbeOutstanding(90*time.Second))
			},
			want: StateHung, hang: HangWedged,
			reason: []string{"HUNG (wedged API server): no answer at all from /v1/models, /health or /metrics for 3m15s"},
		},
		{
			name: "nothing answering for less than hang_after is unknown",
			hist: func() *sim {
				return newSim().work(3, 3).tick(2, func(s *sim) { s.serve(100, 1) }).tick(8, wedged)
			},
			want: StateUnknown, never: []State{StateHung, StateDown},
		},
		{
			name: "a starved server whose probe answers late is not wedged",
			hist: func() *sim {
				return newSim().work(3, 3).tick(2, func(s *sim) { s.serve(100, 1) }).
					tick(14, wedged, func(s *sim) { s.probeOK(80 * time.Second) })
			},
			want: StateUnknown, never: []State{StateHung, StateDown},
		},
		{
			name: "one endpoint answering slowly now and then keeps it unknown",
			hist: func() *sim {
				n := 0
				return newSim().work(3, 3).tick(2, func(s *sim) { s.serve(100, 1) }).
					tick(16, wedged, func(s *sim) {
						n++
						if n%4 == 0 {
							s.health = probes.Observation{Endpoint: probes.EndpointHealth, Code: 200, Latency: 9 * time.Second}
						}
					})
			},
			want: StateUnknown, never: []State{StateHung, StateDown},
		},
		// The false wedge of the scale-25 rig at 2x load (bench/README.md):
		// the API server misses every probe's timeout while the engine
		// still answers the calls vigil's limiter proxies.
		{
			name: "every endpoint timing out while the engine answers vigil's calls is saturated, never hung",
			hist: func() *sim {
				return newSim().work(3, 3).tick(2, func(s *sim) { s.serve(100, 1) }, throughVigil(40, 3)).
					tick(14, wedged, keepProbeOutstanding(90*time.Second), throughVigil(40, 3))
			},
			want: StateSaturated, never: []State{StateHung, StateDown},
			reason: []string{"SATURATED: API server timing out (no answer from /v1/models, /health or /metrics for 3m15s) but 42 calls answered through vigil in the last 3m15s", "not hung"},
		},
		{
			name: "long streams still sending through vigil, none ended, keep a wedge from hung",
			hist: func() *sim {
				return newSim().work(3, 3).tick(2, func(s *sim) { s.serve(100, 1) }, throughVigil(40, 0)).
					tick(14, wedged, keepProbeOutstanding(90*time.Second), throughVigil(40, 0))
			},
			want: StateSaturated, never: []State{StateHung, StateDown},
			reason: []string{"but 0 calls answered through vigil", "bytes flowing at the last sample: not hung"},
		},
		{
			name: "a wedge with the limiter in front and no byte through it is hung",
			hist: func() *sim {
				return newSim().work(3, 3).tick(2, func(s *sim) { s.serve(100, 1) }, throughVigil(40, 3)).
					tick(14, wedged, keepProbeOutstanding(90*time.Second), throughVigil(0, 0))
			},
			want: StateHung, hang: HangWedged,
			reason: []string{"HUNG (wedged API server): no answer at all from /v1/models, /health or /metrics for 3m15s (timeouts, not refusals); no byte through vigil's limiter for 3m15s either"},
		},
		{
			name: "bytes through vigil that stop: a wedge is hung once nothing came for hang_after",
			hist: func() *sim {
				return newSim().work(3, 3).tick(2, func(s *sim) { s.serve(100, 1) }, throughVigil(40, 3)).
					tick(4, wedged, keepProbeOutstanding(90*time.Second), throughVigil(40, 3)).
					tick(14, wedged, keepProbeOutstanding(90*time.Second), throughVigil(0, 0))
			},
			want: StateHung, hang: HangWedged,
			reason: []string{"for 4m15s (timeouts, not refusals); no byte through vigil's limiter for 3m30s either"},
		},
		{
			name: "vigil restarted under a wedge (its limiter's counts start over) is no evidence: hung as before",
			hist: func() *sim {
				return newSim().work(3, 3).tick(2, func(s *sim) { s.serve(100, 1) }, throughVigil(40, 3)).
					tick(6, wedged, keepProbeOutstanding(90*time.Second), throughVigil(0, 0)).
					tick(1, wedged, func(s *sim) { s.lim = &LimiterLoad{} }).
					tick(7, wedged, throughVigil(0, 0))
			},
			want: StateHung, hang: HangWedged,
		},
		// Row 4: /v1/models 503 on an engine that serves.
		{
			name: "/v1/models 503 while /health is 200, counters move and the probe completes is never down",
			hist: func() *sim {
				return newSim().work(1, 4).tick(10, func(s *sim) {
					s.models = probes.ModelsObservation{Observation: failed(probes.EndpointModels, probes.ClassHTTPStatus, 503)}
					s.serve(500, 2)
					s.probeOK(time.Second)
				})
			},
			want: StateHealthy, never: []State{StateDown, StateHung},
			reason: []string{"odd: /v1/models answers 503"},
		},
		{
			name: "/v1/models and /metrics 503 while a probe completes is not down",
			hist: func() *sim {
				return newSim().work(1, 4).tick(2, func(s *sim) { s.serve(500, 2) }).tick(4, func(s *sim) {
					s.models = probes.ModelsObservation{Observation: failed(probes.EndpointModels, probes.ClassHTTPStatus, 503)}
					s.scrape = &probes.MetricsObservation{Observation: failed(probes.EndpointMetrics, probes.ClassHTTPStatus, 503)}
					s.probeOK(time.Second)
				})
			},
			want: StateUnknown, never: []State{StateDown, StateHung},
			reason: []string{"probes complete", "not down"},
		},
		{
			name: "/health 503 while counters rise is odd, not down",
			hist: func() *sim {
				return newSim().work(1, 4).tick(6, func(s *sim) {
					s.health = failed(probes.EndpointHealth, probes.ClassHTTPStatus, 503)
					s.serve(500, 2)
					s.probeOK(time.Second)
				})
			},
			want: StateHealthy, never: []State{StateDown, StateHung},
			reason: []string{"counters rise", "not down"},
		},
		{
			name: "counters frozen with work pending but probes completing through the stall: stale /metrics, judged by the probe",
			hist: func() *sim {
				return newSim().work(5, 5).tick(16, func(s *sim) { s.probeOK(2 * time.Second) })
			},
			want: StateHealthy, never: []State{StateHung, StateDown},
			reason: []string{"/metrics unchanged for 3m45s while probes complete (stale", "judged by the probe"},
		},
		// Row 5: the probe fails while the engine is saturated.
		{
			name: "a probe failing with 404 under saturation says so in the SATURATED reason",
			hist: func() *sim {
				return newSim().work(40, 16).tick(4, func(s *sim) {
					s.serve(5000, 3)
					s.probe = probes.CompletionStatus{State: probes.ProbeFailed, Started: s.at.Add(-time.Second),
						Observation: probes.Observation{Endpoint: probes.EndpointCompletions, Class: probes.ClassHTTPStatus, Code: 404, Error: "404 Not Found: model nope"}}
				})
			},
			want: StateSaturated, reason: []string{"SATURATED: 40 waiting", "probe failing: 404 Not Found: model nope", "check engine.model"},
		},
		{
			name: "a failing probe stays named while its successor is outstanding",
			hist: func() *sim {
				return newSim().work(40, 16).tick(2, func(s *sim) {
					s.serve(5000, 3)
					s.probe = probes.CompletionStatus{State: probes.ProbeFailed, Started: s.at.Add(-time.Second),
						Observation: probes.Observation{Endpoint: probes.EndpointCompletions, Class: probes.ClassHTTPStatus, Code: 404, Error: "404"}}
				}).tick(1, func(s *sim) { s.serve(5000, 3); s.probeOut(s.at.Add(-time.Second)) })
			},
			want: StateSaturated, reason: []string{"probe failing"},
		},
		// Resume is not evidence (#16): after a hang, frozen idle gauges
		// do not resolve it; a probe sent after the hang completing does.
		{
			name:   "after a hang, an idle-looking engine with no proof of serving is unknown, not healthy",
			hist:   func() *sim { return newSim().tick(4) },
			params: func(p *Params, s *sim) { p.ProofSince = t0 },
			want:   StateUnknown, reason: []string{"no sign of serving"},
			never: []State{StateHealthy},
		},
		{
			name:   "after a hang, a probe sent later completing is proof",
			hist:   func() *sim { return newSim().tick(3).tick(1, func(s *sim) { s.probeOK(time.Second) }) },
			params: func(p *Params, s *sim) { p.ProofSince = t0.Add(time.Second) },
			want:   StateHealthy,
		},
		{
			name: "after a hang, a counter reset (a restart) is no proof of serving",
			hist: func() *sim {
				return newSim().tick(2).tick(2, func(s *sim) { s.m.Progress["vllm:prompt_tokens_total"] = 0 })
			},
			params: func(p *Params, s *sim) { p.ProofSince = t0 },
			want:   StateUnknown,
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
			t.Logf("%s: %s", v.State, v.Reason)
			if v.State != c.want {
				t.Fatalf("got %s (%s), want %s", v.State, v.Reason, c.want)
			}
			if v.Evidence.Hang != c.hang {
				t.Errorf("hang kind %q, want %q", v.Evidence.Hang, c.hang)
			}
			for _, r := range c.reason {
				if !strings.Contains(v.Reason, r) {
					t.Errorf("reason %q does not say %q", v.Reason, r)
				}
			}
		})
	}
}
