package core

import (
	"testing"
	"testing/synctest"
	"time"
)

// feedLoad gives a the engine readings of a busy engine every 250 ms for d:
// waiting and running as given, kv its KV usage (-1: not exported), and its
// counters growing by one completed prefill of prompt tokens a reading.
// Each reading also brings one streamed first token admitted after the last
// change and one finished answer, with demand over the cap throughout. It
// returns the time of the last reading.
func feedLoad(a *autoLimit, from time.Time, d time.Duration, waiting, running, kv float64, prompt int) time.Time {
	at := from
	var tokens, firsts float64
	for step := time.Duration(0); step < d; step += 250 * time.Millisecond {
		at = at.Add(250 * time.Millisecond)
		tokens += float64(prompt)
		firsts++
		a.markDemand()
		a.observeTTFT(at, 300*time.Millisecond, at)
		a.observeDone(at.Add(-5*time.Second), at, 0, true, a.cap(), answerSize(prompt, 300))
		a.observeLoad(EngineLoad{Waiting: waiting, Running: running, KVUsage: kv,
			PromptTokens: tokens, FirstTokens: firsts}, at)
	}
	return at
}

// TestTheCapTellsAPrefillBacklogFromAFullEngine: an engine whose waiting
// gauge holds long prompts waiting their turn at the step's token budget,
// with seats and KV cache free, is not full: the cap keeps growing (on
// main's rules it was cut to the number running, window after window). A
// queue of short prompts, a full KV cache or every seat taken is a full
// engine: the cap comes down to what the engine runs.
func TestTheCapTellsAPrefillBacklogFromAFullEngine(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name             string
		seats            int
		waiting, running float64
		kv               float64
		prompt           int
		grows            bool
		wantAtMost       float64 // when it does not grow
	}{
		{"12k-token prompts waiting, seats and KV free: grows", 0, 4, 30, 0.3, 12000, true, 0},
		{"12k-token prompts waiting, KV usage not exported: grows", 0, 4, 30, -1, 12000, true, 0},
		{"12k-token prompts waiting, engine_max_seqs 64 with 30 running: grows", 64, 4, 30, 0.3, 12000, true, 0},
		{"200-token prompts waiting: a full engine, cut to the running", 0, 4, 30, 0.3, 200, false, 30},
		// Chat-sized prompts: several fit a step's budget, so their queue
		// stays a queue (bench/goodput's chat workload).
		{"3,000-token prompts waiting: cut to the running", 0, 4, 30, 0.3, 3000, false, 30},
		{"12k-token prompts waiting on a full KV cache: cut to the running", 0, 4, 30, 0.95, 12000, false, 30},
		{"12k-token prompts waiting with every seat taken: cut to the running", 30, 4, 30, 0.3, 12000, false, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAutoLimit(0, tc.seats, t0)
			a.limit, a.probing = 34, false
			feedLoad(a, t0, 20*time.Second, tc.waiting, tc.running, tc.kv, tc.prompt)
			switch {
			case tc.grows && a.limit <= 40:
				t.Errorf("cap %.1f after 20 s of a prefill backlog on an engine with room, want it grown past 40", a.limit)
			case !tc.grows && a.limit > tc.wantAtMost+0.5:
				t.Errorf("cap %.1f, want at most %.0f (the requests the engine runs)", a.limit, tc.wantAtMost)
			}
		})
	}
}

// TestTheSaturatedVerdictSparesAPrefillBacklog: the watchdog says
// SATURATED when the engine's waiting gauge passes its threshold; with long
// prompts on an engine with room that gauge is the prefill backlog, so the
// automatic cap is not cut by a quarter and keeps growing, and a fixed cap
// is not reduced. On a full engine the verdict still cuts.
func TestTheSaturatedVerdictSparesAPrefillBacklog(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name    string
		prompt  int
		kv      float64
		backlog bool
	}{
		{"12k-token prompts, KV cache free", 12000, 0.3, true},
		{"200-token prompts", 200, 0.3, false},
		{"12k-token prompts, KV cache full", 12000, 0.95, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAutoLimit(0, 0, t0)
			a.limit, a.probing = 40, false
			at := feedLoad(a, t0, 2*time.Second, 9, 40, tc.kv, tc.prompt)
			before := a.limit
			a.hold = true
			a.tighten(at)
			if tc.backlog {
				if a.limit != before {
					t.Fatalf("the saturated verdict cut the cap %.1f -> %.1f on a prefill backlog", before, a.limit)
				}
				feedLoad(a, at, 20*time.Second, 9, 60, tc.kv, tc.prompt)
				if a.limit <= before {
					t.Errorf("cap %.1f, want it grown past %.1f while the verdict holds on a prefill backlog", a.limit, before)
				}
				return
			}
			if want := max(autoMin, before*0.75); a.limit > want {
				t.Errorf("cap %.1f after the saturated verdict, want cut to %.1f", a.limit, want)
			}
		})
	}
}

// TestAFixedCapUnderASaturatedVerdict: a fixed cap admits 3/4 of itself
// while the watchdog says saturated, unless the engine's queue reads as a
// prefill backlog on an engine with room.
func TestAFixedCapUnderASaturatedVerdict(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prompt  int
		wantCap int
	}{
		{"12k-token prompts waiting for prefill: the cap stays", 12000, 64},
		{"200-token prompts waiting: 3/4 of the cap", 200, 48},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := testConfig()
				cfg.MaxInFlight = 64
				l := New(cfg)
				l.SetSaturated(true)
				for i := range 8 {
					advance(250 * time.Millisecond)
					l.ObserveEngine(EngineLoad{Waiting: 12, Running: 50, KVUsage: 0.4,
						PromptTokens: float64((i + 1) * tc.prompt), FirstTokens: float64(i + 1)})
				}
				if got := l.Stats().Cap; got != tc.wantCap {
					t.Errorf("cap %d while saturated, want %d", got, tc.wantCap)
				}
			})
		})
	}
}

// The first-token limit judges prompts as long until the engine's
// counters tell them short, or tell that they cannot (no such counters).
func TestPromptsAreShortOnlyOnceTheCountersSaySo(t *testing.T) {
	t0 := time.Unix(1000, 0)
	read := func(prompt, first float64) EngineLoad {
		return EngineLoad{Waiting: 0, Running: 4, KVUsage: 0.1, PromptTokens: prompt, FirstTokens: first}
	}
	m := newPrefillMeter(0)
	if m.short() {
		t.Error("short before any reading")
	}
	m.note(read(0, 0), t0)
	if m.short() {
		t.Error("short after one reading")
	}
	m.note(read(4000, 2), t0.Add(250*time.Millisecond))
	if !m.short() {
		t.Error("not short after 2,000-token prompts")
	}
	long := newPrefillMeter(0)
	long.note(read(0, 0), t0)
	long.note(read(24000, 2), t0.Add(250*time.Millisecond))
	if long.short() {
		t.Error("short after 12,000-token prompts")
	}
	// The same 12,000-token prompts behind a 10,000-token prefix the
	// prefix cache holds prefill 2,000 tokens each: short (judged long
	// before, as the prompt counter alone counts the cached prefix too).
	cached := newPrefillMeter(0)
	readCached := func(prompt, first, hits float64) EngineLoad {
		g := read(prompt, first)
		g.CachedTokens = hits
		return g
	}
	cached.note(readCached(0, 0, 0), t0)
	cached.note(readCached(24000, 2, 20000), t0.Add(250*time.Millisecond))
	if !cached.short() {
		t.Error("not short after 12,000-token prompts of which 10,000 came from the prefix cache")
	}
	none := newPrefillMeter(0)
	none.note(QueueOnly(0, 4), t0)
	none.note(QueueOnly(0, 4), t0.Add(250*time.Millisecond))
	if !none.short() {
		t.Error("not short after two readings without the counters: their length cannot be known")
	}
}
