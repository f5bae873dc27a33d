package core

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// engineModel is a toy continuous-batching engine fed by a saturated
// limiter: it runs min(n, batch) requests and queues the rest; a wave of
// prefills makes the first token come later the larger the batch, and a
// queued request also waits for a whole answer to free a seat.
type engineModel struct {
	batch    int
	ttftBase float64 // ms: first token of a lone request
	perSeq   float64 // ms of first-token delay per request in the batch
	answer   float64 // ms: one whole answer
}

func (e engineModel) ttft(n int) float64 {
	t := e.ttftBase + e.perSeq*float64(min(n, e.batch))
	if n > e.batch {
		t += e.answer
	}
	return t
}

// drive runs the controller against the model: every 25 ms one streamed
// first byte, every 250 ms one scrape of the engine's gauges; demand always
// exceeds the cap. It returns the caps over time.
func drive(a *autoLimit, e engineModel, d time.Duration) []int {
	now := time.Unix(1000, 0)
	var caps []int
	for i := 0; time.Duration(i)*25*time.Millisecond < d; i++ {
		now = now.Add(25 * time.Millisecond)
		n := a.cap()
		a.markDemand()
		jitter := 1 + 0.05*math.Sin(float64(i))
		a.observeTTFT(now, time.Duration(e.ttft(n)*jitter*float64(time.Millisecond)), now)
		if i%10 == 0 {
			a.observeEngine(float64(max(0, n-e.batch)), float64(min(n, e.batch)), now)
		}
		if i%40 == 0 {
			caps = append(caps, a.cap())
		}
	}
	return caps
}

func settled(caps []int) (mean float64, lo, hi int) {
	tail := caps[len(caps)/2:]
	lo, hi = tail[0], tail[0]
	for _, c := range tail {
		mean += float64(c)
		lo, hi = min(lo, c), max(hi, c)
	}
	return mean / float64(len(tail)), lo, hi
}

func TestAutoLimitFindsTheEngineWithoutBeingTold(t *testing.T) {
	for _, tc := range []struct {
		name           string
		engine         engineModel
		target         time.Duration
		wantLo, wantHi float64
	}{
		{"with no objective the cap settles at a batch of 24", engineModel{24, 20, 6, 300}, 0, 22, 28},
		{"with no objective the cap settles at a batch of 100", engineModel{100, 20, 6, 600}, 0, 90, 112},
		{"with no objective the cap settles at a batch of 200", engineModel{200, 40, 2, 2000}, 0, 180, 224},
		{"a loose objective leaves the cap at the batch", engineModel{100, 20, 6, 600}, 5 * time.Second, 90, 112},
		// 20 + 6n <= 200 ms: n <= 30.
		{"a tight objective holds the cap below the batch, where TTFT meets it", engineModel{100, 20, 6, 600}, 200 * time.Millisecond, 20, 31},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAutoLimit(tc.target, 0, time.Unix(1000, 0))
			caps := drive(a, tc.engine, 2*time.Minute)
			mean, lo, hi := settled(caps)
			if mean < tc.wantLo || mean > tc.wantHi {
				t.Errorf("settled around %.1f (%d..%d), want within [%.0f, %.0f]; caps every second: %v",
					mean, lo, hi, tc.wantLo, tc.wantHi, caps)
			}
		})
	}
}

func TestAutoLimitLaw(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// window feeds one window of evidence: first bytes of ttft, and two
	// scrapes of the engine's gauges.
	window := func(a *autoLimit, at time.Time, ttft time.Duration, waiting, running float64, demand bool) time.Time {
		if demand {
			a.markDemand()
		}
		for i := range windowMinSamples {
			at = at.Add(15 * time.Millisecond)
			a.observeTTFT(at, ttft, at)
			if i%5 == 4 {
				a.observeEngine(waiting, running, at)
			}
		}
		return at
	}
	t.Run("while the first-token limit can shrink, TTFT is its to keep, not the cap's", func(t *testing.T) {
		a := newAutoLimit(200*time.Millisecond, 0, t0)
		a.limit = 40
		a.gate.limit = 4
		window(a, t0, 250*time.Millisecond, 0, 40, true)
		if a.cap() < 40 || a.gate.bound() != 2 {
			t.Errorf("cap %d, first-token limit %d after p90 250ms against 200ms; want the cap not cut and 2 (4 x 0.8, twice)", a.cap(), a.gate.bound())
		}
	})
	t.Run("first tokens near the objective hold the cap whatever the first-token limit", func(t *testing.T) {
		a := newAutoLimit(time.Second, 0, t0)
		a.limit = 40
		a.gate.limit = 4
		window(a, t0, 900*time.Millisecond, 0, 40, true)
		if a.cap() != 40 || a.gate.bound() != 4 {
			t.Errorf("cap %d, first-token limit %d after p90 900ms against 1s; want both held (40, 4)", a.cap(), a.gate.bound())
		}
	})
	t.Run("it starts at 16 and grows by a quarter while demand fills the cap", func(t *testing.T) {
		a := newAutoLimit(time.Second, 0, t0)
		if a.cap() != autoInitial {
			t.Fatalf("initial cap %d, want %d", a.cap(), autoInitial)
		}
		window(a, t0, 100*time.Millisecond, 0, 16, true)
		if a.cap() != 20 {
			t.Errorf("after one uncongested round the cap is %d, want 20", a.cap())
		}
	})
	t.Run("without demand the cap does not grow", func(t *testing.T) {
		a := newAutoLimit(time.Second, 0, t0)
		at := window(a, t0, 100*time.Millisecond, 0, 5, false)
		window(a, at, 100*time.Millisecond, 0, 5, false)
		if a.cap() != autoInitial {
			t.Errorf("idle cap moved to %d", a.cap())
		}
	})
	t.Run("requests waiting in the engine cut the cap to what it runs", func(t *testing.T) {
		a := newAutoLimit(0, 0, t0)
		a.limit = 48
		window(a, t0, 100*time.Millisecond, 8, 40, true)
		if a.cap() != 40 {
			t.Errorf("cap %d with 40 running and 8 waiting, want 40", a.cap())
		}
		if a.probing {
			t.Error("still probing after congestion")
		}
	})
	t.Run("one request waiting is tolerated; for streamed answers it ends the fast probing", func(t *testing.T) {
		a := newAutoLimit(0, 0, t0)
		window(a, t0, 100*time.Millisecond, 1, 15, true)
		if a.cap() != autoInitial || a.probing {
			t.Errorf("cap %d (probing %v), want %d, no longer probing", a.cap(), a.probing, autoInitial)
		}
	})
	t.Run("one request waiting between steps of short prompts leaves the probing over streams on", func(t *testing.T) {
		for _, tc := range []struct {
			prompt  float64 // tokens per prefill, by the engine's counters
			probing bool
		}{{500, true}, {12000, false}} {
			a := newAutoLimit(0, 0, t0)
			var tokens, firsts float64
			read := func(waiting float64, at time.Time) {
				tokens, firsts = tokens+2*tc.prompt, firsts+2
				a.observeLoad(EngineLoad{Waiting: waiting, Running: 15, KVUsage: 0.1, PromptTokens: tokens, FirstTokens: firsts}, at)
			}
			read(0, t0)
			read(0, t0.Add(250*time.Millisecond)) // no demand yet: the cap holds
			a.markDemand()
			at := t0.Add(250 * time.Millisecond)
			for i := range windowMinSamples {
				at = at.Add(15 * time.Millisecond)
				a.observeTTFT(at, 100*time.Millisecond, at)
				if i%5 == 4 {
					read(1, at)
				}
			}
			if a.probing != tc.probing {
				t.Errorf("%v-token prompts, one waiting: probing %v, want %v", tc.prompt, a.probing, tc.probing)
			}
		}
	})
	t.Run("one request waiting beside plain answers is prefill's pipeline: the probing goes on", func(t *testing.T) {
		a := newAutoLimit(0, 0, t0)
		a.markDemand()
		at := t0
		for i := range windowMinSamples {
			at = at.Add(15 * time.Millisecond)
			a.observeDone(at.Add(-time.Second), at, 0, false, 15, 0)
			if i%5 == 4 {
				a.observeEngine(1, 15, at)
			}
		}
		if a.cap() != 20 || !a.probing {
			t.Errorf("cap %d (probing %v), want 20, still probing", a.cap(), a.probing)
		}
	})
	t.Run("a TTFT p90 over the objective, the first-token limit at one, cuts in proportion", func(t *testing.T) {
		a := newAutoLimit(200*time.Millisecond, 0, t0)
		a.limit = 40
		a.gate.limit = 1
		window(a, t0, 250*time.Millisecond, 0, 40, true)
		if a.cap() != 32 {
			t.Errorf("cap %d after p90 250ms against 200ms, want 32", a.cap())
		}
	})
	t.Run("near the objective the cap holds instead of crossing it", func(t *testing.T) {
		a := newAutoLimit(200*time.Millisecond, 0, t0)
		a.gate.limit = 1
		window(a, t0, 180*time.Millisecond, 0, 16, true)
		if a.cap() != autoInitial {
			t.Errorf("cap %d at 90%% of the objective, want it held at %d", a.cap(), autoInitial)
		}
	})
	t.Run("upstream failures cut the cap by a tenth", func(t *testing.T) {
		a := newAutoLimit(0, 0, t0)
		at := t0
		for range windowMinSamples {
			at = at.Add(15 * time.Millisecond)
			a.drop(at, at)
		}
		if a.cap() != 14 {
			t.Errorf("cap %d after failures, want 14", a.cap())
		}
	})
	t.Run("the cap never falls below 2 nor rises above 256", func(t *testing.T) {
		a := newAutoLimit(0, 0, t0)
		at := t0
		for range 100 {
			at = window(a, at, time.Second, 100, 0, true)
		}
		if a.cap() != autoMin {
			t.Errorf("cap %d with the engine queue never draining, want %d", a.cap(), autoMin)
		}
		b := newAutoLimit(0, 0, t0)
		at = t0
		for range 100 {
			at = window(b, at, 10*time.Millisecond, 0, 10, true)
		}
		if b.cap() != autoMax {
			t.Errorf("cap %d after endless headroom, want %d", b.cap(), autoMax)
		}
	})
	t.Run("answers admitted before the last change are not judged", func(t *testing.T) {
		a := newAutoLimit(200*time.Millisecond, 0, t0)
		at := window(a, t0, 100*time.Millisecond, 0, 16, true)
		before := t0.Add(time.Millisecond)
		for range 3 * windowMinSamples {
			at = at.Add(15 * time.Millisecond)
			a.observeTTFT(before, time.Second, at)
			a.drop(before, at)
		}
		if a.cap() != 20 {
			t.Errorf("cap %d: stale evidence moved it", a.cap())
		}
	})
	t.Run("saturation cuts a quarter and holds growth", func(t *testing.T) {
		a := newAutoLimit(0, 0, t0)
		a.limit = 100
		a.hold = true
		a.tighten(t0)
		window(a, t0, 10*time.Millisecond, 0, 75, true)
		if a.cap() != 75 {
			t.Errorf("cap %d while saturated, want 75", a.cap())
		}
	})
	t.Run("a saturated verdict flapping every second cuts once a minute, not once a flip", func(t *testing.T) {
		a := newAutoLimit(0, 0, t0)
		a.limit = 100
		at := t0
		for i := range 20 { // 20 s: on, off, on, off...
			a.SetSaturated(i%2 == 0, at)
			at = at.Add(time.Second)
		}
		if a.cap() != 75 {
			t.Errorf("cap %d after 10 flips in 20 s, want one cut to 75", a.cap())
		}
		a.SetSaturated(false, at)
		a.SetSaturated(true, t0.Add(tightenEvery))
		if a.cap() != 56 {
			t.Errorf("cap %d a minute after the first cut, want a second cut to 56", a.cap())
		}
	})
	t.Run("an engine that answers nothing gets no more work, whatever its gauges say", func(t *testing.T) {
		a := newAutoLimit(0, 0, t0)
		a.markDemand()
		at := t0
		for range 20 {
			at = at.Add(pollEvery)
			a.observeEngine(0, 16, at)
		}
		if a.cap() != autoInitial {
			t.Errorf("cap %d grew on gauges alone, want %d", a.cap(), autoInitial)
		}
	})
	// answers feeds n answers of service time svc, all admitted after the
	// last change, and returns the time of the last.
	answers := func(a *autoLimit, at time.Time, n int, svc time.Duration) time.Time {
		for range n {
			at = at.Add(windowMin / 4)
			a.observeDone(at.Add(-svc), at, 0, false, 1, 0)
		}
		return at
	}
	t.Run("answers taking over three times their unloaded time cut the cap to the knee", func(t *testing.T) {
		a := newAutoLimit(0, 0, t0)
		a.probing = false
		at := answers(a, t0, serviceSamples, 4*time.Second)
		a.limit = 60
		a.lastChange = time.Time{}
		at = answers(a, at, serviceSamples, 18*time.Second)
		if a.cap() != 40 {
			t.Errorf("cap %d with answers at 4.5x their 4 s minimum, want 40 (knee/S of 60)", a.cap())
		}
		a.markDemand()
		answers(a, at, 2*windowMinSamples, 18*time.Second)
		if a.cap() != 40 {
			t.Errorf("cap %d: one estimate cut twice, want it used once (40)", a.cap())
		}
	})
	t.Run("a millisecond-scale slowdown is no knee", func(t *testing.T) {
		// A fast upstream on a busy host: 0.2 ms alone, 2 ms beside
		// others. Ten times slower, but by less than one decode step.
		a := newAutoLimit(0, 0, t0)
		a.probing = false
		at := answers(a, t0, serviceSamples, 200*time.Microsecond)
		a.lastChange = time.Time{}
		answers(a, at, serviceSamples, 2*time.Millisecond)
		if a.cap() < autoInitial {
			t.Errorf("cap cut to %d by a 1.8 ms slowdown, want it kept at %d or more", a.cap(), autoInitial)
		}
	})
	t.Run("near the knee the cap does not grow", func(t *testing.T) {
		a := newAutoLimit(0, 0, t0)
		a.probing = false
		at := answers(a, t0, serviceSamples, 4*time.Second)
		a.lastChange = time.Time{}
		at = answers(a, at, serviceSamples, 10*time.Second)
		c := a.cap()
		a.markDemand()
		answers(a, at, 2*windowMinSamples, 10*time.Second)
		if a.cap() != c {
			t.Errorf("cap grew from %d to %d with answers at 2.5x their minimum", c, a.cap())
		}
	})
	t.Run("a slow window closes on time with little evidence", func(t *testing.T) {
		a := newAutoLimit(0, 0, t0)
		a.markDemand()
		a.observeDone(t0, t0.Add(100*time.Millisecond), 0, false, 1, 0)
		if a.cap() != autoInitial {
			t.Fatal("one answer closed a window early")
		}
		a.observeDone(t0, t0.Add(windowMax), 0, false, 1, 0)
		if a.cap() != 20 {
			t.Errorf("cap %d after a second-long window of answers, want 20", a.cap())
		}
	})
}

func TestSlidingSumForgetsWhatLeftTheWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := newSlidingSum(time.Minute, 60)
	s.add(t0, 5)
	s.add(t0.Add(30*time.Second), 3)
	if got := s.sum(t0.Add(59 * time.Second)); got != 8 {
		t.Errorf("sum within the window = %v, want 8", got)
	}
	if got := s.sum(t0.Add(61 * time.Second)); got != 3 {
		t.Errorf("sum after the first bucket left = %v, want 3", got)
	}
	if d := s.untilFreed(t0.Add(61*time.Second), 3); d <= 0 || d > 30*time.Second {
		t.Errorf("untilFreed = %v, want within (0, 30s]", d)
	}
	if got := s.sum(t0.Add(10 * time.Minute)); got != 0 {
		t.Errorf("sum long after = %v, want 0", got)
	}
	s.add(t0.Add(10*time.Minute), -4)
	if got := s.sum(t0.Add(10 * time.Minute)); got != 0 {
		t.Errorf("a negative correction made the sum %v, want it floored at 0", got)
	}
}

func TestAutoLimitKeepsUnaryAnswersWithinTheirClientsDeadline(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const deadline = 120 * time.Second
	// answersBeside feeds deadlineMinSamples plain answers with the
	// deadline, each of which took took beside n in flight, and returns
	// the time of the last.
	answersBeside := func(a *autoLimit, at time.Time, took time.Duration, n int) time.Time {
		for range deadlineMinSamples {
			at = at.Add(10 * time.Millisecond)
			a.observeDone(at.Add(-took), at, deadline, false, n, 0)
		}
		return at
	}
	// gaugeWindow marks demand and closes a window on readings of the
	// engine's gauges (waiting, running); it returns the time of the last.
	gaugeWindow := func(a *autoLimit, at time.Time, waiting, running float64) time.Time {
		a.markDemand()
		for range windowMinGauges {
			at = at.Add(windowMin)
			a.observeEngine(waiting, running, at)
		}
		return at
	}
	// run drives a saturated limiter against an engine past its knee: an
	// answer takes perReq per request in flight (Little's law at a flat
	// throughput), one in fifty twice that; the engine never queues.
	run := func(a *autoLimit, perReq time.Duration, d time.Duration) []int {
		at := t0
		var caps []int
		for i := 0; time.Duration(i)*100*time.Millisecond < d; i++ {
			at = at.Add(100 * time.Millisecond)
			n := a.cap()
			a.markDemand()
			svc := time.Duration(n) * perReq
			if i%50 == 0 {
				svc *= 2
			}
			a.observeDone(at.Add(-svc), at, deadline, false, n, 0)
			if i%3 == 0 {
				a.observeEngine(0, float64(n), at)
			}
			if i%10 == 0 {
				caps = append(caps, a.cap())
			}
		}
		return caps
	}
	for _, tc := range []struct {
		name           string
		perReq         time.Duration
		wantLo, wantHi float64
	}{
		// The tail (2 x n x 0.5 s) reaches 120 s at n = 120.
		{"the tail reaches the deadline at 120 in flight", 500 * time.Millisecond, 100, 120},
		// 2 x n x 1 s = 120 s at n = 60.
		{"a slower engine gets half as many", time.Second, 50, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAutoLimit(0, 0, t0)
			caps := run(a, tc.perReq, 3*time.Minute)
			mean, lo, hi := settled(caps)
			if mean < tc.wantLo || mean > tc.wantHi || float64(hi) > tc.wantHi {
				t.Errorf("settled around %.1f (%d..%d), want within [%.0f, %.0f]; caps every second: %v",
					mean, lo, hi, tc.wantLo, tc.wantHi, caps)
			}
		})
	}
	t.Run("a cap above the ceiling is cut to it", func(t *testing.T) {
		a := newAutoLimit(0, 0, t0)
		a.limit, a.probing = 200, false
		at := t0
		// Every answer took 180 s beside 150 others: at this pace the tail
		// reaches the 120 s deadline at 100 in flight.
		at = answersBeside(a, at, 180*time.Second, 150)
		if c, near := a.deadlineCeiling(); c < 99 || c > 101 || !near {
			t.Fatalf("ceiling %.1f (near %v), want 100 from answers near the cap", c, near)
		}
		at = gaugeWindow(a, at, 0, 200)
		if a.cap() != 100 {
			t.Errorf("cap %d above a ceiling of 100, want it cut to 100", a.cap())
		}
	})
	t.Run("answers from lighter load bound the growth but never cut", func(t *testing.T) {
		a := newAutoLimit(0, 0, t0)
		a.limit, a.probing = 100, false
		at := t0
		// 20 s beside 10 in flight reads as 2 s a request, a ceiling of
		// 60: extrapolated from far below the cap of 100.
		at = answersBeside(a, at, 20*time.Second, 10)
		if c, near := a.deadlineCeiling(); c < 59 || c > 61 || near {
			t.Fatalf("ceiling %.1f (near %v) from the low answers alone, want 60, not near", c, near)
		}
		// A window with demand and a request waiting in the engine (not
		// enough to count as its queue, enough to say it has no room):
		// no cut, and no growth past the light-load ceiling either.
		at = gaugeWindow(a, at, 1, 100)
		if a.cap() != 100 {
			t.Errorf("cap %d: want it kept at 100 (light-load answers neither cut it nor let it grow)", a.cap())
		}
		// Answers near the cap take over: 90 s beside 80, a ceiling of
		// about 107, judged on them alone.
		at = answersBeside(a, at, 90*time.Second, 80)
		if c, near := a.deadlineCeiling(); c < 106 || c > 107 || !near {
			t.Errorf("ceiling %.1f (near %v), want 106.7 from the answers beside 80 (>= 3/4 of the cap)", c, near)
		}
	})
	t.Run("while the engine has room a surge grows the cap past a light-load ceiling, to twice it", func(t *testing.T) {
		// A quiet spell: long answers beside few others read as a low
		// ceiling (20 s beside 5: 30). Then a surge fills the cap while the
		// engine's queue stays empty.
		grow := func(waiting float64) int {
			a := newAutoLimit(0, 0, t0)
			a.limit, a.probing = 20, false
			at := t0
			at = answersBeside(a, at, 20*time.Second, 5)
			for range 40 {
				a.markDemand()
				at = at.Add(windowMin)
				a.observeEngine(waiting, float64(a.cap()), at)
				at = at.Add(windowMin)
				a.observeEngine(waiting, float64(a.cap()), at)
				a.observeDone(at.Add(-time.Second), at, 0, false, a.cap(), 0)
			}
			return a.cap()
		}
		if c := grow(0); c != 60 {
			t.Errorf("cap %d after a surge on an engine with room, want 60 (twice the light-load ceiling of 30)", c)
		}
		if c := grow(1); c != 30 {
			t.Errorf("cap %d after a surge on an engine queueing one request, want 30 (the light-load ceiling)", c)
		}
	})
	t.Run("streamed answers and answers with no announced timeout feed the knee, not the ceiling", func(t *testing.T) {
		a := newAutoLimit(0, 0, t0)
		at := t0
		for range deadlineMinSamples {
			at = at.Add(10 * time.Millisecond)
			a.observeDone(at.Add(-time.Second), at, deadline, true, 10, 0)
			a.observeDone(at.Add(-time.Second), at, 0, false, 10, 0)
		}
		if c, _ := a.deadlineCeiling(); len(a.dl) != 0 || c != 0 {
			t.Errorf("%d deadline samples, ceiling %.1f; want none", len(a.dl), c)
		}
		if a.svcMin == 0 {
			t.Error("the knee got no service time")
		}
	})
}

func TestAutoLimitReadsTheEnginesQueueByWhatItCosts(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name             string
		streamed         bool
		waiting, running float64
		wantCut          bool
	}{
		// Waiting/running is queue time over run time (Little's law).
		{"unary: 3 waiting beside 60 running is prefill's pipeline", false, 3, 60, false},
		{"unary: 9 waiting beside 60 running is a queue", false, 9, 60, true},
		{"unary: 1 waiting is never a queue", false, 1, 4, false},
		{"streamed: 3 waiting delay first tokens by a whole wait", true, 3, 60, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAutoLimit(0, 0, t0)
			a.limit, a.probing = 64, false
			a.markDemand()
			at := t0
			for i := range windowMinSamples {
				at = at.Add(15 * time.Millisecond)
				if tc.streamed {
					a.observeTTFT(at, 100*time.Millisecond, at)
				} else {
					a.observeDone(at.Add(-10*time.Second), at, 0, false, 60, 0)
				}
				if i%5 == 4 {
					a.observeEngine(tc.waiting, tc.running, at)
				}
			}
			if cut := a.cap() < 64; cut != tc.wantCut {
				t.Errorf("cap 64 -> %d; want cut %v", a.cap(), tc.wantCut)
			}
		})
	}
}

func TestAutoLimitGrowsByTheTurnover(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := newAutoLimit(0, 0, t0)
	a.limit, a.probing = 40, false
	at := t0
	// Two windows: 10 answers finish in each (admitted long ago), no queue.
	for range 2 {
		a.markDemand()
		for i := range windowMinSamples {
			at = at.Add(15 * time.Millisecond)
			a.observeDone(t0.Add(-time.Minute), at, 0, false, 40, 0)
			if i%5 == 4 {
				a.observeEngine(0, 40, at)
			}
		}
	}
	// 20 answers of a turnover of 40: half a turnover, so an eighth more.
	if got := a.limit; math.Abs(got-45) > 0.01 {
		t.Errorf("limit %.2f after 20 answers at 40 in flight, want 45 (+%.2f per answer)", got, turnoverGain)
	}
}

// TestAnswersAreJudgedByWhatRanBesideThem: the deadline ceiling divides an
// answer's time by the requests in flight beside it over its whole life,
// not by a count at its start or end. An answer that ran beside 100 for
// 90 s and beside 10 for its last 10 s ran beside 91 on average; the
// counts at its ends (1 and 10) would have read it as ten times slower
// per request than it was, and cut the cap for it.
func TestAnswersAreJudgedByWhatRanBesideThem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig()
		cfg.MaxInFlight = 0
		l := New(cfg)
		auto := l.auto.(*autoLimit)
		auto.limit = autoMax
		enter := func() *Listener {
			tk, rj, err := l.Acquire(t.Context(), Request{Tokens: 1, Timeout: 120 * time.Second})
			if err != nil || rj != nil {
				t.Fatalf("enter: %v %v", err, rj)
			}
			return tk
		}
		first := enter()
		others := make([]*Listener, 99)
		for i := range others {
			others[i] = enter()
		}
		advance(90 * time.Second)
		for _, tk := range others[:90] {
			tk.Release(Outcome{Success: true})
		}
		advance(10 * time.Second)
		auto.dl = nil // only the first answer's sample below
		first.Release(Outcome{Success: true})
		if len(auto.dl) != 1 {
			t.Fatalf("%d deadline samples, want 1", len(auto.dl))
		}
		if n := auto.dl[0].n; n != 91 {
			t.Errorf("the answer ran beside %d by the limiter's count, want 91 (100 for 90 s, 10 for 10 s)", n)
		}
	})
}

// sizedEngine is a toy continuous-batching engine for the knee: it runs
// min(n, batch) requests and queues the rest; an answer of size decode
// steps takes overhead plus size steps, a step slowing a little with each
// request in the batch (so below the batch answers barely slow).
type sizedEngine struct {
	batch    int
	overhead time.Duration
	step     time.Duration // a step's fixed cost
	perSeq   time.Duration // a step's cost per request in the batch
}

func (e sizedEngine) service(size, n int) time.Duration {
	running := min(n, e.batch)
	s := e.overhead + time.Duration(size)*(e.step+time.Duration(running)*e.perSeq)
	if n > e.batch {
		// A queued request waits for a seat: about one answer more.
		s *= 2
	}
	return s
}

// sizedPhase: answers of size (or, when mix is set, of the size mix
// picks for the i-th answer) for d, demand always over the cap.
type sizedPhase struct {
	size int
	mix  func(i int) int
	d    time.Duration
}

// driveSized runs the controller against e through the phases: every
// 10 ms the answers that the cap in force completes in 10 ms finish (at
// least one, streamed or not), every 250 ms one scrape of the engine's
// gauges. It returns the cap every second of the last phase.
func driveSized(a *autoLimit, e sizedEngine, streamed bool, phases []sizedPhase) []int {
	now := time.Unix(1000, 0)
	var caps []int
	due, answer := 0.0, 0
	for p, ph := range phases {
		for i := 0; time.Duration(i)*10*time.Millisecond < ph.d; i++ {
			now = now.Add(10 * time.Millisecond)
			n := a.cap()
			a.markDemand()
			size := ph.size
			if ph.mix != nil {
				size = ph.mix(answer)
			}
			s := e.service(size, n)
			due += float64(min(n, e.batch)) * (10 * time.Millisecond).Seconds() / s.Seconds()
			for ; due >= 1; due-- {
				a.observeDone(now.Add(-s), now, 0, streamed, n, size)
				answer++
			}
			if i%25 == 0 {
				a.observeEngine(float64(max(0, n-e.batch)), float64(min(n, e.batch)), now)
			}
			if p == len(phases)-1 && i%100 == 0 {
				caps = append(caps, a.cap())
			}
		}
	}
	return caps
}

// TestTheKneeIsJudgedBySize is issue 16's row at the law's level: answers
// of one decode step (max_tokens 1) take a step whatever the load, answers
// of hundreds of tokens hundreds of steps. A baseline learned from the
// small ones held the cap at its floor for the hour its minimum took to
// decay; judged by size, the cap finds the engine's batch after a burst
// of tiny answers, and a mix of sizes reads as no knee.
func TestTheKneeIsJudgedBySize(t *testing.T) {
	e := sizedEngine{batch: 40, overhead: 2 * time.Millisecond, step: 10 * time.Millisecond, perSeq: 100 * time.Microsecond}
	const tiny, long = 1, 200 // decode steps: 12 ms and ~2.4 s alone
	// The cap's law finds the batch by the engine's queue: within a 20%
	// band around it once settled (TestAutoLimitFindsTheEngineWithoutBeingTold).
	const lo, hi = 32, 48
	settle := 60 * time.Second
	for _, tc := range []struct {
		name   string
		phases []sizedPhase
	}{
		{"control: long answers only", []sizedPhase{{size: long, d: settle}}},
		{"a burst of tiny answers, then long ones", []sizedPhase{{size: tiny, d: 2 * time.Second}, {size: long, d: settle}}},
		{"long answers, a burst of tiny ones, long again", []sizedPhase{
			{size: long, d: settle}, {size: tiny, d: 2 * time.Second}, {size: long, d: settle}}},
		{"a mix that shifts between tiny and long answers", []sizedPhase{{d: 2 * settle, mix: func(i int) int {
			// Runs of 30 answers of one size, more tiny runs early on.
			if (i/30)%3 == 0 {
				return long
			}
			return tiny
		}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAutoLimit(0, 0, time.Unix(1000, 0))
			caps := driveSized(a, e, true, tc.phases)
			// Bounded recovery: judged from 20 s into the last phase.
			tail := caps[20:]
			mean := 0.0
			for _, c := range tail {
				mean += float64(c)
			}
			mean /= float64(len(tail))
			if mean < lo || mean > hi {
				t.Errorf("cap %.1f on average from 20 s into the load, want within [%d, %d] (the batch of %d); caps every second: %v",
					mean, lo, hi, e.batch, caps)
			}
		})
	}
}

func TestAnAnswersSizeComesFromItsUsageElseTheEstimate(t *testing.T) {
	// Admitted with an estimate of 2,560 prompt tokens (10 steps) and
	// max_tokens 300.
	tk := &Listener{prompt: 2560, tokens: 2560 + 300}
	for _, tc := range []struct {
		name string
		o    Outcome
		want int
	}{
		{"usage: 12,800 prompt tokens and 40 output tokens", Outcome{CompletionTokens: 40, TotalTokens: 12840}, 40 + 50},
		{"a stream without usage: 7 events, the prompt estimated", Outcome{CompletionTokens: 7, TotalTokens: 2560 + 7}, 7 + 10},
		{"nothing known: max_tokens and the prompt estimated", Outcome{CompletionTokens: -1, TotalTokens: -1}, 300 + 10},
		{"an inconsistent total: the prompt estimated", Outcome{CompletionTokens: 5, TotalTokens: 3}, 5 + 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tk.size(tc.o); got != tc.want {
				t.Errorf("size %d, want %d", got, tc.want)
			}
		})
	}
	if got := answerSize(0, 0); got != 1 {
		t.Errorf("an empty answer's size is %d, want 1 (a step)", got)
	}
}

// TestAMixOfLengthsKeepsOneMinimum: chat-like answer lengths (lognormal,
// median 100 tokens, sigma 0.5, as bench/goodput) vary over 20 answers by
// far less than sizeShift, so the knee's minimum is never restarted by
// them: the law is the one the knee was measured with. Service times grow
// with the load here, so a restarted minimum would show as a rise.
func TestAMixOfLengthsKeepsOneMinimum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	a := newAutoLimit(0, 0, time.Unix(1000, 0))
	at := time.Unix(1000, 0)
	last := 0.0
	for i := range 4000 {
		at = at.Add(10 * time.Millisecond)
		size := answerSize(2000, int(math.Round(100*math.Exp(0.5*rng.NormFloat64()))))
		load := 1 + float64(i)/1000
		a.observeService(time.Duration(float64(size)*load*float64(10*time.Millisecond)), size, false, at)
		if last > 0 && a.svcMin > last*1.001 { // decay over 40 s: x1.05
			t.Fatalf("answer %d: the minimum rose from %.3f s to %.3f s: restarted (its answers' mean size now %.0f)",
				i, last, a.svcMin, a.svcMinSize)
		}
		last = a.svcMin
	}
}

// A service-time estimate that no answer refreshes any more must not hold
// the cap. Issue 17's headerless clients: their unary answers fed the knee
// until the route's timeout was learned, then every answer was judged by
// its deadline instead; the last estimate, taken in the burst past the
// knee, blocked growth for good (bench/harness's headerless burst: cap 4
// with 600 queued and the engine idle, for the 14 minutes left).
func TestAStaleServiceEstimateDoesNotHoldTheCap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := newAutoLimit(0, 0, t0)
	a.probing = false
	at := t0
	feed := func(n int, took, deadline time.Duration) {
		for range n {
			at = at.Add(windowMin / 4)
			a.markDemand()
			a.observeDone(at.Add(-took), at, deadline, false, a.cap(), 0)
			a.observeEngine(0, float64(a.cap()), at)
		}
	}
	feed(serviceSamples, 4*time.Second, 0)
	a.limit = 60
	a.lastChange = time.Time{}
	feed(serviceSamples, 18*time.Second, 0) // past the knee: cut
	cut := a.cap()
	if cut >= 60 {
		t.Fatalf("cap %d: the slow answers did not cut it", cut)
	}
	// Now the clients' timeout is known: answers finish in 4 s of their
	// 120 s, the engine never queues.
	feed(40*serviceSamples, 4*time.Second, 120*time.Second)
	if a.cap() <= cut {
		t.Errorf("cap %d after %d answers well within their deadline on an engine with no queue, still at the cut %d: "+
			"the stale service estimate held it", a.cap(), 40*serviceSamples, cut)
	}
}

// On an engine whose prefill takes seconds, windows of a fraction of a
// second pass before any first token of what a growth let in: probing
// over streams grows only once one has come.
func TestProbingOverStreamsWaitsForTheFirstTokensOfItsLastGrowth(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := newAutoLimit(2*time.Second, 0, t0)
	at := t0.Add(100 * time.Millisecond)
	a.observeTTFT(t0.Add(-time.Second), time.Second, at) // streams are the traffic
	grown := func() bool {
		for range 40 { // 10 s of windows: gauges alone, demand filling the cap
			a.markDemand()
			at = at.Add(pollEvery)
			a.observeEngine(0, float64(a.cap()), at)
			a.observeDone(at.Add(-5*time.Second), at, 0, true, a.cap(), 300)
		}
		return a.cap() > autoInitial
	}
	if !a.probing {
		t.Fatal("not probing at start")
	}
	if grown() {
		t.Fatalf("cap %d with no first token of a stream admitted at %d: grew on no evidence", a.cap(), autoInitial)
	}
	a.observeTTFT(at.Add(-time.Second), time.Second, at) // admitted after the start, first token now
	if !grown() {
		t.Fatalf("cap %d after a first token of its own: the probing should go on", a.cap())
	}
}

// TestStreamsJudgedByTheirFirstTokensPassTheKnee: on a decode-bound engine
// (each request in the batch slows the step by 0.4 ms on 10 ms, answers of
// 1,200 tokens) the answers slow in proportion to the batch long before it
// fills: 20 s beside 16 others, 135 s beside 255. Streams whose first
// tokens an objective judges are not held at three times the lightest
// load's service time: their engine starts them in time up to its own
// max-num-seqs, where it delivers a fifth more of them than at 128
// (bench/README.md, the knee and streams; there the knee took the cap from
// 256 to 28). Answers with nothing but their length to judge them keep the
// knee.
func TestStreamsJudgedByTheirFirstTokensPassTheKnee(t *testing.T) {
	e := sizedEngine{batch: autoMax, step: 10 * time.Millisecond, perSeq: 400 * time.Microsecond}
	for _, tc := range []struct {
		name           string
		target         time.Duration
		streamed       bool
		wantLo, wantHi float64
	}{
		{"streams under the automatic objective fill the engine's seats", autoObjective, true, 0.85 * autoMax, autoMax},
		{"streams under a configured objective fill them too", 2 * time.Second, true, 0.85 * autoMax, autoMax},
		// Three times the service time beside 16 is the batch of 98;
		// the minimum decays (serviceMinDoubling), so the cap creeps on.
		{"streams with no objective stop at the knee", 0, true, autoMin, 0.7 * autoMax},
		{"unary answers stop at the knee", autoObjective, false, autoMin, 0.7 * autoMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAutoLimit(tc.target, 0, time.Unix(1000, 0))
			// Past its first probe, so that the first answers to finish
			// ran beside a light load, as on an engine that took traffic
			// before the surge: the cap then grows a turnover at a time.
			a.probing = false
			caps := driveSized(a, e, tc.streamed, []sizedPhase{{size: 1200, d: 10 * time.Minute}})
			last := caps[len(caps)-60:] // the last minute
			if lo, hi := slices.Min(last), slices.Max(last); float64(lo) < tc.wantLo || float64(hi) > tc.wantHi {
				t.Errorf("cap %d..%d over the 10th minute, want within [%.0f, %.0f]", lo, hi, tc.wantLo, tc.wantHi)
			}
			// What the stats show an operator beside a service time
			// far over its baseline (service_knee_applies).
			if want := !(tc.streamed && tc.target != 0); a.kneeJudges() != want {
				t.Errorf("the knee applies: %v, want %v", a.kneeJudges(), want)
			}
		})
	}
}

// The automatic cap hands the first-token limit what the engine's
// counters say the prompts prefill (12,000-token prompts, 2,000 of them a
// cached prefix: 10,000), so over long prompts ttft_target: auto is twice
// the light-load prefill of them: lone first tokens of 334 ms, then 500 ms
// as a batch grows beside them, make 668 ms (issue #43).
func TestTheAutomaticCapTellsTheObjectiveThePromptsLength(t *testing.T) {
	t0 := time.Unix(1000, 0)
	a := newAutoLimit(autoObjective, 0, t0)
	at := t0
	var prompt, first, cached float64
	feed := func(n int, ttft time.Duration) {
		for range n {
			at = at.Add(ttft)
			prompt, first, cached = prompt+12000, first+1, cached+2000
			a.observeLoad(EngineLoad{Running: 1, KVUsage: 0.1, PromptTokens: prompt, FirstTokens: first, CachedTokens: cached}, at)
			a.observeTTFT(at.Add(-ttft), ttft, at)
		}
	}
	feed(4*ttftMin, 334*time.Millisecond)
	feed(4*ttftMin, 500*time.Millisecond)
	if got := a.gate.prefilled; math.Abs(got-10000) > 1e-6 {
		t.Fatalf("the first-token limit was told %v tokens prefilled a prompt, want 10000", got)
	}
	if got := time.Duration(a.gate.objective() * float64(time.Second)).Round(time.Millisecond); got != 668*time.Millisecond {
		t.Errorf("objective %v, want 668ms: twice the light-load prefill of 10,000 tokens", got)
	}
}
