package watchdog

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/probes"
)

// The watchdog's cycles with the default watchdog.interval: quietCycle
// while the last scrape showed no work pending, busyCycle while it did.
var (
	quietCycle = configs.Default().Watchdog.Interval
	busyCycle  = fastCycle(quietCycle)
)

// rowEngine writes the history a vigil would record of an engine doing a
// scripted piece of work, one sample per cycle. Heartbeats are off: only
// the token counters tell progress, so a long prefill is silent until its
// first token (the worst case a window must cover).
type rowEngine struct {
	at      time.Time
	cycle   time.Duration
	samples []Sample

	prompt, gen, hits, prefill, done float64
	waiting, running                 float64
	lim                              *LimiterLoad
	probe                            probes.CompletionStatus
	maxLen                           int
	asleep                           bool
	extras                           bool // the engine exports its pace (vLLM: yes; a bare engine: no)

	// frozen is the earliest the fault the row scripts can have begun,
	// lastMove the last sample that saw the counters move (zero: no fault).
	frozen, lastMove time.Time
}

func newRow(cycle time.Duration) *rowEngine {
	return &rowEngine{at: t0, cycle: cycle, maxLen: 131_072, extras: true,
		// What it served before vigil started, at 20,000 tokens/s of
		// prefill.
		prompt: 1_000_000, gen: 300_000, done: 900, prefill: 50}
}

// request is one call the engine finished between two samples: its prompt
// (cached of it from the prefix cache), its output, its prefill time.
func (e *rowEngine) request(prompt, cached, output float64, prefill time.Duration) {
	e.prompt += prompt
	e.hits += cached
	e.gen += output
	e.prefill += prefill.Seconds()
	e.done++
}

// sample records one cycle; each runs before it. The probe is answered in
// 30 ms unless a step set it otherwise.
func (e *rowEngine) sample(n int, each ...func(*rowEngine)) *rowEngine {
	for range n {
		e.at = e.at.Add(e.cycle)
		e.probe = probes.CompletionStatus{State: probes.ProbeOK, Started: e.at.Add(-e.cycle + time.Millisecond),
			Observation: probes.Observation{Endpoint: probes.EndpointCompletions, Code: 200, Latency: 30 * time.Millisecond}}
		for _, f := range each {
			f(e)
		}
		if e.probe.State == probes.ProbeOK && !e.asleep {
			// vigil's probe: a one-token prompt, two tokens out.
			e.request(1, 0, 2, time.Millisecond)
		}
		m := probes.Metrics{
			Waiting: e.waiting, Running: e.running,
			Progress: map[string]float64{"vllm:prompt_tokens_total": e.prompt, "vllm:generation_tokens_total": e.gen},
			Extra:    map[string]float64{probes.MetricPromptTokens: e.prompt, probes.MetricRequestSuccess: e.done},
		}
		if e.extras {
			m.Extra[probes.MetricPrefixCacheHits] = e.hits
			m.Extra[probes.MetricPrefillTimeSum] = e.prefill
		}
		var lim *LimiterLoad
		if e.lim != nil {
			l := *e.lim
			lim = &l
		}
		e.samples = append(e.samples, Sample{
			At:      e.at,
			Models:  probes.ModelsObservation{Observation: ok(probes.EndpointModels), Models: []string{"llama"}, MaxModelLen: e.maxLen},
			Health:  ok(probes.EndpointHealth),
			Metrics: probes.MetricsObservation{Observation: ok(probes.EndpointMetrics), Metrics: &m},
			Probe:   e.probe,
			Limiter: lim,
			Asleep:  e.asleep,
		})
	}
	return e
}

// freeze marks the fault: the counters never move again, and vigil's
// probe, sent after the last sample, is never answered; the watchdog,
// seeing work pending, samples every busyCycle from then on. The last
// sample showed the counters moving, so they froze after the one before
// it: detection is timed from there, the earliest the fault can be.
func (e *rowEngine) freeze() *rowEngine {
	e.frozen, e.lastMove = e.at.Add(-e.cycle), e.at
	e.cycle = busyCycle
	return e
}

// after is how many cycles cover four minutes: past the old ceiling.
func after(e *rowEngine) int { return int(4 * time.Minute / e.cycle) }

// unanswered keeps vigil's probe outstanding since the frozen moment.
func unanswered(e *rowEngine) {
	started := e.lastMove.Add(time.Millisecond)
	e.probe = probes.CompletionStatus{State: probes.ProbeOutstanding, Started: started, Age: e.at.Sub(started)}
}

// judge runs the loop's window over the history one cycle at a time, as
// the watchdog does (the log learning, the window held under a stall),
// from a log (nil: a fresh vigil), and returns the first HUNG verdict.
func judge(samples []Sample, l *workLog, cycle time.Duration) (Verdict, bool) {
	if l == nil {
		l = &workLog{}
	}
	var held time.Duration
	// A fresh vigil that never saw the engine ready takes it as started
	// with itself (the startup grace), as the watchdog does.
	start := samples[0].At.Add(-cycle)
	for i := range samples {
		h := samples[:i+1]
		now := h[i].At
		l.learn(h, now)
		win := autoWindow(h, l, floor, ceiling)
		sc := scanHistory(h, now)
		if stalling := sc.stall > 0 || sc.decode.Stall > 0 || sc.wedge.For > 0; stalling && held > win.D {
			win.D = held
		}
		held = win.D
		p := defaultParams()
		p.HangAfter, p.WindowWhy, p.Tolerance = win.D, win.Why, cycle/10
		p.LastStart = start
		v := Classify(h, p, now)
		v.Evidence.HangAfter, v.Evidence.HangAfterWhy = win.D, win.Why
		if v.State == StateHung {
			return v, true
		}
	}
	return Verdict{}, false
}

// chat is a cycle of chat load through the limiter: 32 calls in flight,
// six a second finished with 2,000-token prompts at 20,000 tokens/s of
// prefill.
func chat(e *rowEngine) {
	e.running, e.waiting = 30, 2
	e.lim = &LimiterLoad{InFlight: 32, LongestPrompt: 2400}
	for range int(6 * e.cycle.Seconds()) {
		e.request(2000, 0, 100, 100*time.Millisecond)
	}
}

// aroundLimiter is chat load sent straight at the engine: its gauges show
// 40 requests, the limiter sent none.
func aroundLimiter(e *rowEngine) {
	chat(e)
	e.running, e.waiting = 32, 8
	e.lim = &LimiterLoad{}
}

// oneAtATime is one client at a time: a call of 1,500 prompt tokens and
// 300 output tokens finished between two samples, gauges 0/0 at them.
func oneAtATime(e *rowEngine) {
	e.running, e.waiting = 0, 0
	e.lim = &LimiterLoad{}
	e.request(1500, 0, 300, 150*time.Millisecond)
}

func idle(e *rowEngine) {
	e.running, e.waiting = 0, 0
	e.lim = &LimiterLoad{}
}

// The rows of issue #37: a hang in each situation is HUNG within the
// target from the moment the counters froze.
func TestTheWindowCatchesAHangInSecondsOnEveryLoad(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		row    func() *rowEngine
		log    *workLog
		within time.Duration
	}{
		{
			name: "under load through the limiter, after warm-up",
			row: func() *rowEngine {
				e := newRow(busyCycle).sample(40, chat).freeze()
				return e.sample(after(e), unanswered)
			},
			log: served(20_000), within: 20 * time.Second,
		},
		{
			name: "one client at a time: the gauges read 0/0 at most samples",
			row: func() *rowEngine {
				e := newRow(quietCycle).sample(20, oneAtATime).sample(1, func(e *rowEngine) {
					e.running, e.lim = 1, &LimiterLoad{InFlight: 1, LongestPrompt: 1500}
				}).freeze()
				return e.sample(after(e), unanswered)
			},
			within: 30 * time.Second,
		},
		{
			name: "a hang 40 s after vigil started, under load",
			row: func() *rowEngine {
				e := newRow(busyCycle).sample(8, chat).freeze()
				return e.sample(after(e), unanswered)
			},
			within: 30 * time.Second,
		},
		{
			name: "load that goes straight at the engine",
			row: func() *rowEngine {
				e := newRow(busyCycle).sample(12, aroundLimiter).freeze()
				return e.sample(after(e), unanswered)
			},
			within: time.Minute,
		},
		{
			name: "one long call on a fresh vigil",
			row: func() *rowEngine {
				e := newRow(quietCycle).sample(2, idle)
				// The call's first token came (its prompt counted), then
				// its long generation, then the engine froze.
				e.sample(3, func(e *rowEngine) {
					e.running, e.lim = 1, &LimiterLoad{InFlight: 1}
					e.gen += 40 * iv.Seconds()
				})
				e.prompt += 800
				e.prefill += 0.04
				return e.freeze().sample(after(e), unanswered)
			},
			within: 30 * time.Second,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := c.row()
			v, hung := judge(e.samples, c.log, e.cycle)
			if !hung {
				last := e.samples[len(e.samples)-1].At
				t.Fatalf("not HUNG %s after the freeze", last.Sub(e.frozen))
			}
			took := v.At.Sub(e.frozen)
			t.Logf("HUNG %s after the freeze; %s", took, v.Evidence.HangAfterWhy)
			if took > c.within {
				t.Errorf("HUNG %s after the freeze, want within %s (%s)", took, c.within, v.Evidence.HangAfterWhy)
			}
		})
	}
}

// The false-hang battery: what makes a quiet engine legitimately silent
// is never HUNG.
func TestTheWindowNeverCallsALegitimateSilenceHung(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		row  func() *rowEngine
		log  *workLog
	}{
		{
			name: "a lone 100k-token prefill on a fresh vigil",
			row: func() *rowEngine {
				// 2,000 tokens/s: 50 s of silence until its first token.
				e := newRow(quietCycle).sample(2, idle)
				e.sample(4, func(e *rowEngine) { e.running, e.lim = 1, &LimiterLoad{InFlight: 1, LongestPrompt: 100_000} })
				return e.sample(1, func(e *rowEngine) { e.request(100_000, 0, 1, 50*time.Second) })
			},
		},
		{
			name: "a lone 100k-token prefill after chat taught the rate",
			row: func() *rowEngine {
				// Chat prefilled at 20,000 tokens/s; the long prompt goes at
				// a third of that (attention grows with length): 15 s.
				e := newRow(quietCycle).sample(20, chat).sample(2, idle)
				e.sample(1, func(e *rowEngine) { e.running, e.lim = 1, &LimiterLoad{InFlight: 1, LongestPrompt: 100_000} })
				return e.sample(1, func(e *rowEngine) { e.request(100_000, 0, 1, 15*time.Second) })
			},
		},
		{
			name: "a rate learned on cached-prefix prompts, then an uncached long prompt",
			row: func() *rowEngine {
				// 10,000-token prompts, 9,500 of them from the prefix cache,
				// 500 prefilled in 250 ms: 2,000 tokens/s of real prefill,
				// 40,000 as the prompt counter alone reads it.
				cached := func(e *rowEngine) {
					e.running, e.waiting, e.lim = 4, 0, &LimiterLoad{InFlight: 4, LongestPrompt: 10_000}
					for range 20 {
						e.request(10_000, 9_500, 50, 250*time.Millisecond)
					}
				}
				e := newRow(quietCycle).sample(20, cached).sample(1, idle)
				e.sample(3, func(e *rowEngine) { e.running, e.lim = 1, &LimiterLoad{InFlight: 1, LongestPrompt: 60_000} })
				return e.sample(1, func(e *rowEngine) { e.request(60_000, 0, 1, 30*time.Second) })
			},
		},
		{
			name: "an engine that slows 20x under load",
			row: func() *rowEngine {
				slow := func(e *rowEngine) {
					e.running, e.waiting, e.lim = 32, 40, &LimiterLoad{InFlight: 32, Queued: 100, LongestPrompt: 2400}
					e.request(2000, 0, 100, 2*time.Second)
					e.gen += 20
				}
				return newRow(busyCycle).sample(40, chat).sample(40, slow)
			},
			log: served(20_000),
		},
		{
			name: "a burst after a long idle",
			row: func() *rowEngine {
				// Hours idle (the log forgot the rate), then 64 calls of 8,000
				// tokens: the first tokens come as each prefill ends.
				e := newRow(quietCycle).sample(4*60, idle)
				return e.sample(6, func(e *rowEngine) {
					e.running, e.waiting, e.lim = 32, 32, &LimiterLoad{InFlight: 64, LongestPrompt: 8000}
					for range 8 {
						e.request(8000, 0, 20, 2*time.Second)
					}
				})
			},
			log: servedBy(t0.Add(-7*time.Hour), 20_000),
		},
		{
			name: "an adapter loading: its calls wait a few seconds",
			row: func() *rowEngine {
				e := newRow(quietCycle).sample(10, oneAtATime)
				// Two cycles of waiting on the load (under the floor), then
				// served.
				e.sample(2, func(e *rowEngine) { e.waiting, e.lim = 2, &LimiterLoad{InFlight: 2, LongestPrompt: 300} })
				return e.sample(3, oneAtATime)
			},
		},
		{
			name: "a model loading: nothing answers for two minutes, then it serves",
			row: func() *rowEngine {
				e := newRow(quietCycle)
				e.prompt, e.gen, e.done, e.prefill = 0, 0, 0, 0
				e.sample(8, func(e *rowEngine) {
					e.probe = probes.CompletionStatus{State: probes.ProbeFailed,
						Observation: probes.Observation{Endpoint: probes.EndpointCompletions, Class: probes.ClassRefused, Error: "refused"}}
				})
				for i := range e.samples {
					refused := probes.Observation{Class: probes.ClassRefused, Error: "connection refused"}
					e.samples[i].Models = probes.ModelsObservation{Observation: refused}
					e.samples[i].Health = refused
					e.samples[i].Metrics = probes.MetricsObservation{Observation: refused}
				}
				return e.sample(4, oneAtATime)
			},
		},
		{
			name: "an engine put to sleep on purpose (vLLM sleep mode)",
			row: func() *rowEngine {
				e := newRow(quietCycle).sample(10, chat).freeze()
				// Asleep for 10 minutes with calls held and vigil's probe
				// unanswered: the gauges show work, nothing moves.
				return e.sample(40, unanswered, func(e *rowEngine) { e.asleep, e.running, e.waiting = true, 0, 3 })
			},
		},
		{
			name: "a long prompt sent around the limiter",
			row: func() *rowEngine {
				// A 120,000-token prompt straight at the engine, prefilled at
				// the rate chat taught (20,000 tokens/s): 6 s, then 40 s on a
				// third of it.
				e := newRow(quietCycle).sample(10, chat).sample(1, idle)
				e.sample(3, func(e *rowEngine) { e.running, e.lim = 1, &LimiterLoad{} })
				return e.sample(1, func(e *rowEngine) { e.request(120_000, 0, 1, 40*time.Second) })
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := c.row()
			if v, hung := judge(e.samples, c.log, e.cycle); hung {
				t.Fatalf("HUNG at %s: %s (%s)", v.At.Sub(t0), v.Reason, v.Evidence.HangAfterWhy)
			}
		})
	}
}
