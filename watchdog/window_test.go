package watchdog

import (
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/probes"
	"github.com/vigil-dev/vigil/state"
)

const (
	floor   = 15 * time.Second
	ceiling = 3 * time.Minute
)

// served is a log of an engine seen serving for an hour: chat-like work
// (no silence with work pending) at a measured prefill rate.
func served(rate float64, gaps ...time.Duration) *workLog { return servedBy(t0, rate, gaps...) }

// servedBy is served, the hour ending at the given time (a rig on the
// wall clock forgets a log older than logKeep).
func servedBy(at time.Time, rate float64, gaps ...time.Duration) *workLog {
	l := &workLog{Served: 240}
	for i := range 10 {
		// Busy cycles of varied rates whose mean over busy time is rate.
		d := time.Duration(i+1) * time.Second
		l.Prefill = append(l.Prefill, logged{At: at.Add(-time.Duration(i) * time.Minute), V: rate * d.Seconds(), D: d})
	}
	for _, g := range gaps {
		l.Gaps = append(l.Gaps, logged{At: at, D: g})
	}
	return l
}

// through sets what the limiter had in flight at each tick.
func through(inFlight, longestPrompt int) func(*sim) {
	return func(s *sim) { s.lim = &LimiterLoad{InFlight: inFlight, LongestPrompt: longestPrompt} }
}

func TestTheAutomaticWindowCoversTheWorkInFlight(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		hist func() *sim
		log  *workLog
		want time.Duration
		says string
	}{
		{
			name: "idle: the floor",
			hist: func() *sim { return newSim().work(0, 0).tick(3, through(0, 0)) },
			log:  served(40_000), want: floor, says: "(auto, the floor)",
		},
		{
			name: "chat load through the limiter: the floor",
			hist: func() *sim {
				return newSim().work(2, 30).tick(3, func(s *sim) { s.serve(3000, 10) }, through(32, 2400))
			},
			log: served(40_000), want: floor, says: "longest prefill in flight 2,400 tokens at 40,000 tok/s",
		},
		{
			name: "one 196k-token prompt alone: the window covers its prefill three times over",
			hist: func() *sim { return newSim().work(0, 1).tick(3, through(1, 196_763)) },
			log:  served(40_000),
			// 196,763 / 40,000 = 4.92 s, plus a step (1 s when the heartbeat
			// gives none), times 3.
			want: time.Duration(3 * (196_763.0/40_000*float64(time.Second) + float64(time.Second))),
			says: "longest prefill in flight 196,763 tokens",
		},
		{
			name: "a 196k-token prompt on a slow engine: the ceiling bounds it",
			hist: func() *sim { return newSim().work(0, 1).tick(3, through(1, 196_763)) },
			log:  served(900), want: ceiling, says: "(auto, the ceiling)",
		},
		{
			name: "requests that bypass the limiter: the ceiling",
			hist: func() *sim {
				return newSim().work(10, 40).tick(3, func(s *sim) { s.serve(3000, 10) }, through(8, 2000))
			},
			log: served(40_000), want: ceiling, says: "50 requests in the engine, 8 of them through the limiter",
		},
		{
			name: "work in the engine and no limiter in front: the ceiling",
			hist: func() *sim { return newSim().work(2, 8).tick(3, func(s *sim) { s.serve(3000, 10) }) },
			log:  served(40_000), want: ceiling, says: "no limiter in front",
		},
		{
			// No warm-up: the floor from the first samples.
			name: "an engine vigil has never seen serve, idle: the floor",
			hist: func() *sim { return newSim().work(0, 0).tick(3, through(0, 0)) },
			log:  &workLog{}, want: floor, says: "(auto, the floor)",
		},
		{
			name: "a prompt in flight and no prefill rate measured: the ceiling",
			hist: func() *sim { return newSim().work(0, 1).tick(3, through(1, 12_000)) },
			log:  &workLog{Served: 100}, want: ceiling, says: "no prefill rate measured",
		},
		{
			name: "long silences seen on this engine widen the window",
			hist: func() *sim { return newSim().work(0, 0).tick(3, through(0, 0)) },
			log:  served(40_000, 15*time.Second, 30*time.Second), want: 90 * time.Second, says: "history p99.9 gap 30s",
		},
		{
			name: "only vigil's probe pending on an idle engine: sized, not the ceiling",
			hist: func() *sim {
				s := newSim().work(0, 0).tick(2, through(0, 0))
				return s.probeOut(s.at.Add(time.Millisecond)).tick(1, through(0, 0))
			},
			log: served(40_000), want: floor, says: "(auto, the floor)",
		},
		{
			// CI saw this: the probe just sent (not yet in the engine's
			// gauges), the one running request the long prompt. Taking the
			// running request for the probe left the window at the floor
			// and a decode-stall rule called the prefill a hang.
			name: "a long prompt running while vigil's probe is out: sized from the prompt",
			hist: func() *sim {
				s := newSim().work(0, 1).tick(2, through(1, 196_763))
				return s.probeOut(s.at.Add(time.Millisecond)).tick(1, through(1, 196_763))
			},
			log:  served(40_000),
			want: time.Duration(3 * (196_763.0/40_000*float64(time.Second) + float64(time.Second))),
			says: "longest prefill in flight 196,763 tokens",
		},
	}
	// The engine's own figures: 1,000,000 prompt tokens, 100,000 of them
	// from the prefix cache, in 45 s of prefill: 20,000 tok/s.
	figures := func(s *sim) {
		s.m.Extra[probes.MetricPromptTokens] = 1_000_000
		s.m.Extra[probes.MetricPrefixCacheHits] = 100_000
		s.m.Extra[probes.MetricPrefillTimeSum] = 45
	}
	cases = append(cases, []struct {
		name string
		hist func() *sim
		log  *workLog
		want time.Duration
		says string
	}{
		{
			// One client at a time with long answers: vigil's busy-time
			// rate (120 tok/s) counts decode as busy; 2,352 / 120 x 3
			// would be a minute.
			name: "a decode-heavy engine on a fresh vigil: its own prefill rate, the floor",
			hist: func() *sim { s := newSim(); figures(s); return s.work(0, 1).tick(3, through(1, 2352)) },
			log:  served(120), want: floor, says: "longest prefill in flight 2,352 tokens at 20,000 tok/s",
		},
		{
			// Slowed 20x over the last minutes: the recent figure rules.
			name: "an engine slowed 20x: its recent prefill rate sizes the prompt",
			hist: func() *sim { s := newSim(); figures(s); return s.work(0, 1).tick(3, through(1, 20_000)) },
			log:  &workLog{Engine: []logged{{At: t0.Add(-9 * time.Minute), V: 5_000, D: 5 * time.Second}, {At: t0, V: 5_000, D: 5 * time.Second}}},
			// 20,000 / 1,000 = 20 s, plus a step, times 3.
			want: 63 * time.Second, says: "the slower of 1,000 tok/s over the last 9m45s and 20,000 tok/s since it started",
		},
		{
			// vigil diagnose sees the engine for seconds: the recent rate
			// says the seconds it covers, never "the last 10 minutes"
			// (on a real llama-server diagnose once said so of 3 s).
			name: "figures from a few seconds: the recent rate says how few",
			hist: func() *sim { s := newSim(); figures(s); return s.work(0, 1).tick(3, through(1, 20_000)) },
			log:  &workLog{Engine: []logged{{At: t0, V: 10_000, D: 10 * time.Second}}},
			want: 63 * time.Second, says: "the slower of 1,000 tok/s over the last 45s and 20,000 tok/s since it started",
		},
		{
			// A quiet engine's last minutes: 120 of vigil's one-token
			// probes, 20 ms of prefill each (a step's fixed cost), read
			// 50 tok/s; they tell nothing of the rate.
			name: "a quiet engine whose recent prefills are vigil's probes: its rate since it started",
			hist: func() *sim {
				s := newSim()
				figures(s)
				s.m.Extra[probes.MetricPrefillTimeCount] = 900 // 1,000 computed tokens a prefill
				return s.work(0, 1).tick(3, through(1, 2352))
			},
			log:  &workLog{Engine: []logged{{At: t0, V: 120, D: 2400 * time.Millisecond, N: 120}}},
			want: floor, says: "20,000 tok/s by the engine's prefill time",
		},
	}...)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := c.hist()
			w := autoWindow(s.samples, c.log, floor, ceiling)
			if w.D.Round(time.Millisecond) != c.want.Round(time.Millisecond) {
				t.Errorf("window %s, want %s (%s)", w.D, c.want, w.Why)
			}
			if !strings.Contains(w.Why+"; learned from: "+w.From, c.says) {
				t.Errorf("why %q (from %q) does not say %q", w.Why, w.From, c.says)
			}
		})
	}
}

// The log learns silences the classifier saw and the prefill rate, and
// counts cycles of serving; a steadily moving engine shows no silence.
func TestTheWorkLogLearnsSilencesAndThePrefillRate(t *testing.T) {
	t.Parallel()
	s := newSim().work(2, 8)
	s.m.Extra[probes.MetricPromptTokens] = 0
	grow := func(s *sim) { s.serve(3000, 10); s.m.Extra[probes.MetricPromptTokens] += 15 * 4000 }
	s.tick(6, grow).tick(2).tick(1, grow)
	var l workLog
	for i := 2; i <= len(s.samples); i++ {
		l.learn(s.samples[:i], s.samples[i-1].At)
	}
	if len(l.Gaps) != 1 || l.Gaps[0].D != 2*iv {
		t.Errorf("gaps %+v, want one of %s (two samples without a move)", l.Gaps, 2*iv)
	}
	// 8 busy cycles (the 2 silent ones included) counted 6 rises of 60,000
	// prompt tokens: the rate is over busy time, silences and all.
	if got, want := l.prefillRate(), 6*60_000/(8*iv.Seconds()); got != want {
		t.Errorf("prefill rate %v tok/s of busy time, want %v", got, want)
	}
	if l.Served != 6 {
		t.Errorf("served %d cycles, want 6", l.Served)
	}
}

func TestTheWindowNeverShrinksWhileAStallIsTimedAndSurvivesARestartOfVigil(t *testing.T) {
	t.Parallel()
	store := state.Memory()
	r := newRig(t, store, func(o *Options) {
		o.Watchdog.HangAfter = configs.Automatic()
		o.LimiterLoad = func() LimiterLoad { return LimiterLoad{InFlight: 1, LongestPrompt: 150_000} }
	})
	r.w.mu.Lock()
	r.w.work = *servedBy(time.Now(), 10_000)
	r.w.mu.Unlock()
	r.engine.set(func(f *fakeEngine) { f.waiting, f.running, f.mode = 0, 1, "hung" })
	r.w.Cycle(t.Context())
	r.w.Cycle(t.Context())
	v, _ := r.w.Current()
	// 150,000 / 10,000 = 15 s + 1 s step, x3 = 48 s.
	if v.Evidence.HangAfter != 48*time.Second {
		t.Fatalf("window %s (%s), want 48s", v.Evidence.HangAfter, v.Evidence.HangAfterWhy)
	}
	// The long prompt's first byte comes, nothing else is in flight, but
	// the counters stay frozen: the stall being timed keeps its window.
	r.w.opts.LimiterLoad = func() LimiterLoad { return LimiterLoad{InFlight: 1} }
	r.w.Cycle(t.Context())
	v, _ = r.w.Current()
	if v.Evidence.HangAfter != 48*time.Second || !strings.Contains(v.Evidence.HangAfterWhy, "held while the stall is timed") {
		t.Fatalf("window under a stall: %s (%s), want 48s held", v.Evidence.HangAfter, v.Evidence.HangAfterWhy)
	}
	// vigil restarts: the log and the held window come back from the
	// state file.
	r2 := newRig(t, store, func(o *Options) {
		o.Watchdog.HangAfter = configs.Automatic()
		o.LimiterLoad = func() LimiterLoad { return LimiterLoad{InFlight: 1} }
	})
	r2.engine.set(func(f *fakeEngine) { f.waiting, f.running, f.mode = 0, 1, "hung" })
	r2.w.mu.Lock()
	restored := r2.w.work.Served
	r2.w.mu.Unlock()
	if restored != 240 {
		t.Fatalf("the restarted vigil's log has %d cycles served, want the persisted %d", restored, 240)
	}
	r2.w.Cycle(t.Context())
	v, _ = r2.w.Current()
	if v.Evidence.HangAfter != 48*time.Second {
		t.Fatalf("after vigil's restart, under the same stall: %s (%s), want 48s held", v.Evidence.HangAfter, v.Evidence.HangAfterWhy)
	}
}

// A stall is the difference of two cycles' clocks, each read a little
// late: n intervals measure a few milliseconds short about half of the
// time. The loop's tolerance (a tenth of an interval) lets them count,
// so a window of n intervals is met on the nth cycle, not the next.
func TestAStallAFewMillisecondsShortOfTheWindowReachesIt(t *testing.T) {
	t.Parallel()
	s := newSim().work(40, 8).tick(4, func(s *sim) { s.serve(30000, 20) })
	s.tick(1, keepProbeOutstanding(90*time.Second))
	s.at = s.at.Add(-35 * time.Millisecond) // this cycle read its clock early
	s.samples[len(s.samples)-1].At = s.at
	p := defaultParams()
	p.HangAfter = iv
	if v := Classify(s.samples, p, s.at); v.State == StateHung {
		t.Fatalf("exact comparison: %s", v.Reason)
	}
	p.Tolerance = iv / 10
	if v := Classify(s.samples, p, s.at); v.State != StateHung {
		t.Fatalf("with the loop's tolerance: %s (%s), want HUNG", v.State, v.Reason)
	}
}

// vLLM's sleep mode: an engine put to sleep with calls held is LOADING
// (asleep), never hung, however long it sleeps; its sleep is no silence
// the log learns; once woken it gets a whole window for its first move,
// and a hang after it is still found.
func TestAnEngineAsleepOnPurposeIsNeverHungAndAHangAfterItIsFound(t *testing.T) {
	t.Parallel()
	s := newSim().work(0, 0).tick(4, func(s *sim) { s.serve(3000, 10) })
	s.work(3, 2)
	for range 40 { // ten minutes asleep, counters frozen, probe unanswered
		s.tick(1, keepProbeOutstanding(90*time.Second))
		s.samples[len(s.samples)-1].Asleep = true
	}
	p := defaultParams()
	p.HangAfter = 40 * time.Second
	var l workLog
	for i := 2; i <= len(s.samples); i++ {
		l.learn(s.samples[:i], s.samples[i-1].At)
		h := s.samples[:i]
		if v := Classify(h, p, h[i-1].At); v.State == StateHung {
			t.Fatalf("asleep: %s", v.Reason)
		} else if h[i-1].Asleep && (v.State != StateLoading || !strings.Contains(v.Reason, "asleep")) {
			t.Fatalf("asleep: %s (%s), want LOADING (asleep)", v.State, v.Reason)
		}
	}
	// Woken: still frozen for two cycles (weights reloading): not hung.
	s.tick(2, keepProbeOutstanding(90*time.Second))
	if v := Classify(s.samples, p, s.at); v.State == StateHung {
		t.Fatalf("30s after waking: %s", v.Reason)
	}
	// Frozen past the window after waking: hung.
	s.tick(1, keepProbeOutstanding(90*time.Second))
	if v := Classify(s.samples, p, s.at); v.State != StateHung {
		t.Fatalf("45s after waking, frozen with work: %s (%s), want HUNG", v.State, v.Reason)
	}
	for i := len(s.samples) - 3; i <= len(s.samples); i++ {
		l.learn(s.samples[:i], s.samples[i-1].At)
	}
	if q := l.gapQ(); q > iv {
		t.Fatalf("the log learned a silence of %s from the sleep", q)
	}
}

// The log keeps the engine's own figures between samples, prefix-cache
// hits left out, and learns the busy-time rate from computed tokens only.
func TestTheWorkLogKeepsTheEnginesFiguresWithoutCacheHits(t *testing.T) {
	t.Parallel()
	s := newSim().work(2, 8)
	s.m.Extra[probes.MetricPromptTokens] = 0
	s.m.Extra[probes.MetricPrefixCacheHits] = 0
	s.m.Extra[probes.MetricPrefillTimeSum] = 0
	// 60,000 prompt tokens a cycle, 54,000 of them cached, 1.5 s of
	// prefill: 4,000 tok/s computed, not 40,000.
	grow := func(s *sim) {
		s.serve(3000, 10)
		s.m.Extra[probes.MetricPromptTokens] += 60_000
		s.m.Extra[probes.MetricPrefixCacheHits] += 54_000
		s.m.Extra[probes.MetricPrefillTimeSum] += 1.5
	}
	s.tick(5, grow)
	var l workLog
	for i := 2; i <= len(s.samples); i++ {
		l.learn(s.samples[:i], s.samples[i-1].At)
	}
	if got := l.engineRecent(s.at); got < 3999 || got > 4001 {
		t.Errorf("engine's recent rate %v tok/s, want 4,000 (%+v)", got, l.Engine)
	}
	if got, want := l.prefillRate(), 6_000/iv.Seconds(); got != want {
		t.Errorf("busy-time rate %v tok/s, want %v (computed tokens only)", got, want)
	}
}
