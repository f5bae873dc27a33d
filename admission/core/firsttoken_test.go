package core

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

func TestTheFirstTokenLimitsLaw(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// judge feeds n first tokens of ttft, admitted after the last change.
	judge := func(g *firstTokenGate, n int, ttft time.Duration, cap int) bool {
		changed := false
		for i := range n {
			at := t0.Add(time.Duration(i+1) * time.Millisecond)
			changed = g.observe(at, ttft, at, cap) || changed
		}
		return changed
	}
	for _, tc := range []struct {
		name   string
		target time.Duration
		limit  float64 // 0: as it starts
		demand bool
		n      int
		ttft   time.Duration
		cap    int
		want   int
	}{
		{"no objective, no limit", 0, 0, true, 20, time.Second, 64, 0},
		{"it starts at one stream", time.Second, 0, false, 0, 0, 64, 1},
		{"fewer than ttftMin first tokens judge nothing", 500 * time.Millisecond, 8, true, ttftMin - 1, time.Second, 64, 8},
		{"over the objective it shrinks in proportion", 600 * time.Millisecond, 8, false, ttftMin, 800 * time.Millisecond, 64, 6},
		{"at most by half", 500 * time.Millisecond, 8, false, ttftMin, 5 * time.Second, 64, 4},
		{"each change judged by first tokens of its own", 600 * time.Millisecond, 8, false, 2 * ttftMin, 800 * time.Millisecond, 64, 4},
		{"at least by a tenth", 990 * time.Millisecond, 2, false, 10, time.Second, 64, 1},
		{"never below one", 100 * time.Millisecond, 1, false, 10, time.Second, 64, 1},
		{"within 80% of it, with demand, it grows by one at least", time.Second, 1, true, kneeSamples, 700 * time.Millisecond, 64, 2},
		{"by a quarter of itself", time.Second, 8, true, kneeSamples, 700 * time.Millisecond, 64, 10},
		{"growth waits for kneeSamples first tokens", time.Second, 8, true, kneeSamples - 1, 700 * time.Millisecond, 64, 8},
		{"not past the in-flight cap", time.Second, 8, true, kneeSamples, 700 * time.Millisecond, 9, 9},
		{"without demand it holds", time.Second, 8, false, kneeSamples, 700 * time.Millisecond, 64, 8},
		{"between 80% and the objective it holds", time.Second, 8, true, kneeSamples, 900 * time.Millisecond, 64, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newFirstTokenGate(tc.target, t0)
			if tc.limit > 0 {
				g.limit = tc.limit
			}
			if tc.demand {
				g.markDemand()
			}
			judge(&g, tc.n, tc.ttft, tc.cap)
			if got := g.bound(); got != tc.want {
				t.Errorf("limit %d, want %d", got, tc.want)
			}
		})
	}

	// The knee: a growth stays only if first tokens then come faster by
	// half the growth at least (limit/mean TTFT, Little's law).
	for _, tc := range []struct {
		name       string
		after      time.Duration // mean TTFT at 2, after growing from 1 at 400 ms
		want       int
		probeAgain bool // growth is tried again at once (it paid off) or only after kneeHold
	}{
		{"prompts that share a step: TTFT as before, twice the rate, it stays", 420 * time.Millisecond, 2, true},
		{"within kneeFloor of the TTFT before, it stays whatever the rate", 400*time.Millisecond + kneeFloor, 2, true},
		{"at half the gain it stays", 533 * time.Millisecond, 2, true},
		{"under half the gain, past kneeFloor, back to one", 540 * time.Millisecond, 1, false},
		{"long prompts: 0.6 s in pairs, 1.33x the rate, back to one", 600 * time.Millisecond, 1, false},
		{"twice the TTFT, no gain, back to one", 800 * time.Millisecond, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newFirstTokenGate(2*time.Second, t0)
			g.markDemand()
			at := t0
			// feed: the limit full, first tokens come every ttft/limit.
			feed := func(ttft time.Duration) {
				for range kneeSamples {
					at = at.Add(ttft / time.Duration(g.bound()))
					g.observe(at, ttft, at, 64)
				}
			}
			feed(400 * time.Millisecond) // at 1: grows to 2
			if g.bound() != 2 {
				t.Fatalf("limit %d after first tokens well within the objective with demand, want 2", g.bound())
			}
			feed(tc.after)
			if g.bound() != tc.want {
				t.Fatalf("limit %d after a mean TTFT of %v at 2, want %d", g.bound(), tc.after, tc.want)
			}
			g.markDemand()
			feed(tc.after)
			if grew := g.bound() > tc.want; grew != tc.probeAgain {
				t.Errorf("grew again at once: %v, want %v", grew, tc.probeAgain)
			}
			if !tc.probeAgain {
				at = at.Add(kneeHold)
				g.markDemand()
				feed(400 * time.Millisecond)
				if g.bound() != 2 {
					t.Errorf("limit %d after kneeHold, want 2: it probes again", g.bound())
				}
			}
		})
	}

	// Growths that read as faster first tokens without being faster: each
	// goes back to 1 after the 10 first tokens at 2 that judge it.
	for _, tc := range []struct {
		name       string
		pause, gap time.Duration // before the first of them, and between them
		ttft       time.Duration
	}{
		// First tokens at 2 come no faster than at 1 (the arrivals bound
		// them), TTFT 100 ms longer: by limit/TTFT, 1.6x the rate.
		{"a growth the streams did not use goes", 0, 400 * time.Millisecond, 500 * time.Millisecond},
		// Nothing for 3 s, then ten first tokens 10 ms apart (an engine
		// catching up): 10 in 3.1 s since the change, not 9 in 90 ms.
		{"a stall then a burst of first tokens is no faster rate", 3 * time.Second, 10 * time.Millisecond, 700 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newFirstTokenGate(2*time.Second, t0)
			g.markDemand()
			at := t0
			for range kneeSamples { // at 1, full: one every TTFT
				at = at.Add(400 * time.Millisecond)
				g.observe(at, 400*time.Millisecond, at, 64)
			}
			at = at.Add(tc.pause)
			for range kneeSamples {
				at = at.Add(tc.gap)
				g.observe(at, tc.ttft, at, 64)
			}
			if g.bound() != 1 {
				t.Errorf("limit %d, want 1", g.bound())
			}
		})
	}

	// Held kneeHold, the limit probes a step below, and stays there
	// unless the larger one proves worth it: a growth that passed on a
	// lucky judgement does not stay for good.
	for _, tc := range []struct {
		name         string
		atTwo, atOne time.Duration // mean TTFT at each, the limit full
		want         int
	}{
		{"long prompts held in pairs go back to one", 600 * time.Millisecond, 400 * time.Millisecond, 1},
		{"prompts that share a step stay in pairs (TTFT under kneeFloor shorter alone)", 420 * time.Millisecond, 400 * time.Millisecond, 2},
		{"pairs twice as fast stay", 400 * time.Millisecond, 400 * time.Millisecond, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newFirstTokenGate(2*time.Second, t0)
			g.change(2, t0) // as if a growth to 2 had passed
			at := t0
			feed := func(ttft time.Duration, d time.Duration) {
				for end := at.Add(d); at.Before(end); {
					at = at.Add(ttft / time.Duration(g.bound()))
					g.observe(at, ttft, at, 64)
				}
			}
			feed(tc.atTwo, kneeHold-time.Second)
			if g.bound() != 2 {
				t.Fatalf("limit %d within kneeHold, want 2", g.bound())
			}
			feed(tc.atTwo, time.Second) // held kneeHold
			if g.bound() != 1 {
				t.Fatalf("limit %d after kneeHold at 2, want the probe at 1", g.bound())
			}
			for range kneeSamples {
				at = at.Add(tc.atOne)
				g.observe(at, tc.atOne, at, 64)
			}
			if g.bound() != tc.want {
				t.Errorf("limit %d after the probe, want %d", g.bound(), tc.want)
			}
		})
	}

	t.Run("first tokens of streams admitted before a change judge nothing", func(t *testing.T) {
		g := newFirstTokenGate(500*time.Millisecond, t0)
		g.change(2, t0.Add(time.Hour))
		for range 10 {
			g.observe(t0, 5*time.Second, t0.Add(2*time.Hour), 64)
		}
		if g.bound() != 2 {
			t.Errorf("limit %d after first tokens of streams admitted before the change, want 2", g.bound())
		}
	})
}

// gateLimit is a fixed cap with a first-token limit.
type gateLimit struct {
	fixedCap
	firstTokens, gateDemand int
}

func (g *gateLimit) FirstTokenLimit() int { return g.firstTokens }
func (g *gateLimit) OnFirstTokenDemand()  { g.gateDemand++ }

// With one stream at a time awaiting its first token, a second stream
// waits for the first one's first token (not for its end), while a plain
// call behind it goes at once: only streams pass the first-token limit.
func TestStreamsWaitForTheFirstTokenLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig()
		cfg.MaxInFlight = 0
		// An objective whose queue bound (2 s) the second stream fits at the
		// drain rate one admission implies; the automatic one's 500 ms
		// would turn it away at once.
		cfg.TTFTTarget = configs.Fixed(2 * time.Second)
		lim := &gateLimit{fixedCap: fixedCap{n: 8}, firstTokens: 1}
		l := New(cfg, WithLimit(lim))
		first := mustAcquire(t, l, Request{Stream: true})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		second := acquireAsync(ctx, l, Request{Stream: true})
		untilQueued(t, l, 1)
		if lim.gateDemand != 1 {
			t.Errorf("gate demand %d, want 1: the stream found the first-token limit full", lim.gateDemand)
		}
		plain := mustAcquire(t, l, Request{})
		if s := l.Stats(); s.InFlight != 2 || s.QueueDepth != 1 || s.AwaitingFirstToken != 1 || s.FirstTokenLimit != 1 {
			t.Fatalf("in flight %d, queued %d, awaiting a first token %d (limit %d); want 2, 1 (the second stream), 1, 1",
				s.InFlight, s.QueueDepth, s.AwaitingFirstToken, s.FirstTokenLimit)
		}
		first.FirstToken(300 * time.Millisecond)
		a := get(t, second)
		if a.lis == nil {
			t.Fatalf("the second stream was not admitted after the first one's first token: %v %v", a.rj, a.err)
		}
		if s := l.Stats(); s.InFlight != 3 || s.AwaitingFirstToken != 1 {
			t.Errorf("in flight %d, awaiting %d; want 3 and 1", s.InFlight, s.AwaitingFirstToken)
		}
		// A slot that ends before its first token frees the limit too.
		a.lis.Release(Outcome{Dropped: true, Streamed: true})
		third := mustAcquire(t, l, Request{Stream: true})
		third.Ignore()
		first.Release(Outcome{Success: true, Streamed: true})
		plain.Release(Outcome{Success: true})
		if s := l.Stats(); s.InFlight != 0 || s.AwaitingFirstToken != 0 {
			t.Errorf("in flight %d, awaiting %d at the end; want 0 and 0", s.InFlight, s.AwaitingFirstToken)
		}
	})
}

// The law's hold and floor follow the engine's own prefill time (turn),
// so on an engine ten times faster the limit probes ten times as often,
// and long prompts (which never share a step) pass no growth on a floor
// of wall milliseconds.
func TestTheFirstTokenLimitKeepsTheEnginesPace(t *testing.T) {
	t0 := time.Unix(1000, 0)
	// run grows the limit from 1 (first tokens of TTFT lone, one every
	// lone) to 2, then judges it by kneeSamples first tokens of TTFT pair
	// coming rateGain times as fast as at one.
	run := func(long bool, lone, pair time.Duration, rateGain float64) (*firstTokenGate, time.Time) {
		g := newFirstTokenGate(2*time.Second, t0)
		g.long = long
		g.markDemand()
		at := t0
		for range kneeSamples {
			at = at.Add(lone)
			g.observe(at, lone, at, 64)
		}
		if g.bound() != 2 {
			t.Fatalf("limit %d after first tokens well within the objective with demand, want 2", g.bound())
		}
		gap := time.Duration(float64(lone) / rateGain)
		for range kneeSamples {
			at = at.Add(gap)
			g.observe(at, pair, at, 64)
		}
		return &g, at
	}
	for _, tc := range []struct {
		name string
		long bool
		want int
	}{
		// 12,000-token prompts on an engine ten times faster: 40 ms alone,
		// 65 ms in pairs, first tokens 1.45x as fast (the round trip
		// between a first token and the next prompt hidden by the pair).
		{"long prompts: 1.45x the rate measured but 1.23x implied, back to one", true, 1},
		// Short prompts that share a step stay in pairs: within two of
		// their prefills (and kneeFloor), whatever the rate.
		{"short prompts: within the floor, the pair stays", false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := run(tc.long, 40*time.Millisecond, 65*time.Millisecond, 1.45)
			if g.bound() != tc.want {
				t.Errorf("limit %d, want %d", g.bound(), tc.want)
			}
		})
	}
	t.Run("the hold is 90 prefill times", func(t *testing.T) {
		g, at := run(true, 40*time.Millisecond, 80*time.Millisecond, 1)
		if g.bound() != 1 {
			t.Fatalf("limit %d after pairs no faster, want 1", g.bound())
		}
		if h := g.hold(); h < 3500*time.Millisecond || h > 3700*time.Millisecond {
			t.Errorf("hold %v on an engine whose prefill takes 40 ms, want 90 x 40 ms", h)
		}
		at = at.Add(g.hold())
		g.markDemand()
		for range kneeSamples {
			at = at.Add(40 * time.Millisecond)
			g.observe(at, 40*time.Millisecond, at, 64)
		}
		if g.bound() != 2 {
			t.Errorf("limit %d after the hold, want 2: it probes again", g.bound())
		}
		slow := newFirstTokenGate(2*time.Second, t0)
		slow.long = true
		if h := slow.hold(); h != kneeHold {
			t.Errorf("hold %v before the engine's prefill time is known, want kneeHold", h)
		}
		for _, c := range []struct {
			turn float64
			want time.Duration
		}{{1.0 / 3, kneeHold}, {7, 630 * time.Second}, {0.002, holdMin}} {
			slow.turn = c.turn
			if h := slow.hold(); h != c.want {
				t.Errorf("hold %v on an engine whose prefill takes %vs, want %v", h, c.turn, c.want)
			}
		}
		slow.long, slow.turn = false, 0.04
		if h := slow.hold(); h != kneeHold {
			t.Errorf("hold %v over short prompts, want kneeHold", h)
		}
	})
}

// After a probe down from 2 to 1 over long prompts, the first streams at
// one wait for the pair's prefills: their mean TTFT overstates a lone
// prefill. Judged against the engine's own prefill time (turn), the pair
// is not worth going back to.
func TestAProbeDownIsJudgedAgainstTheEnginesOwnPrefill(t *testing.T) {
	t0 := time.Unix(1000, 0)
	g := newFirstTokenGate(2*time.Second, t0)
	g.long = true
	at := t0
	for range kneeSamples { // learn turn: 400 ms alone
		at = at.Add(400 * time.Millisecond)
		g.observe(at, 400*time.Millisecond, at, 64)
	}
	g.change(2, at) // as if a growth to 2 had passed
	for end := at.Add(g.hold()); at.Before(end); {
		at = at.Add(325 * time.Millisecond) // 2 at 650 ms each
		g.observe(at, 650*time.Millisecond, at, 64)
	}
	if g.bound() != 1 {
		t.Fatalf("limit %d after the hold at 2, want the probe at 1", g.bound())
	}
	// At 1: 500 ms on average (the first ones waited), one every 500 ms.
	for range kneeSamples {
		at = at.Add(500 * time.Millisecond)
		g.observe(at, 500*time.Millisecond, at, 64)
	}
	if g.bound() != 1 {
		t.Errorf("limit %d after the probe, want 1: pairs at 650 ms imply 1.23x a lone 400 ms prefill's rate", g.bound())
	}
}

// ttft_target: auto derives the objective from the engine's own time to
// first token (turn): twice it, at least autoObjectiveFloor. The turns are
// enginesim's family: a short prompt on a decode-bound engine, the paper's
// 12,000-token call on the default engine and on one twenty times slower.
func TestTheAutomaticObjectiveFollowsTheEnginesPrefill(t *testing.T) {
	for _, tc := range []struct {
		name string
		turn time.Duration
		want time.Duration
	}{
		{"not known yet: the floor", 0, autoObjectiveFloor},
		{"a short prompt's step: the floor", 26 * time.Millisecond, autoObjectiveFloor},
		{"a long prompt on the default engine: two prefills", 334 * time.Millisecond, 668 * time.Millisecond},
		{"the same on an engine twenty times slower", 6684 * time.Millisecond, 13368 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := AutoObjective(tc.turn); got != tc.want {
				t.Errorf("AutoObjective(%v) = %v, want %v", tc.turn, got, tc.want)
			}
		})
	}
}

// With auto, the first-token limit starts at one stream like any
// objective, learns the engine's prefill from lone first tokens, and
// judges by twice it: 3 s lone prefills (a slow engine) keep a limit that
// a 2 s objective (the old default) would cut, and 7 s ones cut it.
func TestTheFirstTokenLimitJudgesByTheAutomaticObjective(t *testing.T) {
	t0 := time.Unix(1000, 0)
	feed := func(g *firstTokenGate, n int, ttft time.Duration, from time.Time) time.Time {
		at := from
		for range n {
			at = at.Add(ttft)
			g.observe(at.Add(-ttft), ttft, at, 64)
		}
		return at
	}
	g := newFirstTokenGate(autoObjective, t0)
	if g.bound() != firstTokenInitial || g.objective() != autoObjectiveFloor.Seconds() {
		t.Fatalf("starts at %d streams, objective %vs; want %d and the floor", g.bound(), g.objective(), firstTokenInitial)
	}
	at := feed(&g, ttftMin, 3*time.Second, t0)
	if got := g.objective(); got != 6 {
		t.Fatalf("objective %vs after lone 3 s first tokens, want 6s", got)
	}
	g.change(4, at)
	at = feed(&g, ttftMin, 4*time.Second, at)
	if g.bound() != 4 {
		t.Errorf("limit %d after first tokens of 4 s under a 6 s objective, want 4 (kept)", g.bound())
	}
	g.change(4, at)
	feed(&g, ttftMin, 7*time.Second, at)
	if g.bound() >= 4 {
		t.Errorf("limit %d after first tokens of 7 s under a 6 s objective, want it cut", g.bound())
	}
	fixed := newFirstTokenGate(2*time.Second, t0)
	if fixed.objective() != 2 {
		t.Errorf("a configured ttft_target: objective %vs, want 2s", fixed.objective())
	}
	if none := newFirstTokenGate(0, t0); none.bound() != 0 || none.objective() != 0 {
		t.Errorf("ttft_target 0: limit %d, objective %vs; want none", none.bound(), none.objective())
	}
}

// Over long prompts (the engine's counters tell their prefill), ttft_target:
// auto is twice the engine's light-load prefill of the prompts in flight,
// whatever a lone prefill does as the batch beside it grows, and on any
// engine's pace: the issue #43 engine, twenty times faster, read the 500
// ms floor, twenty of its prefills, and its first tokens ran far past
// what its users wait. Short prompts keep the floor.
func TestTheAutomaticObjectiveFollowsThePromptsNotTheBatch(t *testing.T) {
	t0 := time.Unix(1000, 0)
	feed := func(g *firstTokenGate, n int, ttft time.Duration, from time.Time) time.Time {
		at := from
		for range n {
			at = at.Add(ttft)
			g.observe(at.Add(-ttft), ttft, at, 64)
		}
		return at
	}
	for _, tc := range []struct {
		name      string
		prefilled float64
		lone      []time.Duration // mean lone first tokens as the batch grows
		want      time.Duration
	}{
		{"the paper's call beside a growing batch", 10000,
			[]time.Duration{334 * time.Millisecond, 400 * time.Millisecond, 450 * time.Millisecond, 500 * time.Millisecond}, 668 * time.Millisecond},
		{"the same on an engine twenty times faster", 10000,
			[]time.Duration{17 * time.Millisecond, 25 * time.Millisecond, 40 * time.Millisecond}, 34 * time.Millisecond},
		{"a prefill-bound engine", 10000, []time.Duration{962 * time.Millisecond, 1200 * time.Millisecond}, 1924 * time.Millisecond},
		{"a chat prompt: the floor", 2000, []time.Duration{60 * time.Millisecond, 90 * time.Millisecond}, autoObjectiveFloor},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newFirstTokenGate(autoObjective, t0)
			g.prefilled = tc.prefilled
			at := t0
			for _, d := range tc.lone {
				at = feed(&g, 4*ttftMin, d, at)
			}
			got := time.Duration(g.objective() * float64(time.Second)).Round(100 * time.Microsecond)
			if got != tc.want {
				t.Errorf("objective %v after lone first tokens of %v, want %v", got, tc.lone, tc.want)
			}
		})
	}
}
