package engineloss

import (
	"testing"
	"time"
)

// runPause plays calls through a Watch, ticking every 20 ms, with a
// silence of `long` from `at`: vigil's own pause (paused) or the engine's
// stall (not). While vigil is paused it neither ticks nor reads: what the
// engine sent meanwhile is read when it runs again, after the first
// check (the worst order), and its pause meter reports the pause less
// its tolerance (meter: false, no meter: the watch as it was). While the
// engine stalls, vigil ticks on and reads nothing; the engine's answers
// come at the stall's end. It returns the first tick suspected (-1: none)
// and the false alarms counted.
func runPause(calls []simCall, until, at, long time.Duration, paused, meter bool) (first time.Duration, falseAlarms int, s *Watch) {
	const tolerance = 5 * time.Millisecond
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	s = NewWatch()
	if meter && paused {
		from, to := t0.Add(at+tolerance), t0.Add(at+long)
		s.Paused = func(a, b time.Time) time.Duration {
			lo, hi := max(a.UnixNano(), from.UnixNano()), min(b.UnixNano(), to.UnixNano())
			return time.Duration(max(0, hi-lo))
		}
	} else if meter {
		s.Paused = func(a, b time.Time) time.Duration { return 0 }
	}
	evs := simEvents(calls)
	ups := make([]*int, len(calls))
	first = -1
	next := 0
	check := func(tick time.Duration) {
		if first < 0 && s.Check(t0.Add(tick)) {
			first = tick
		}
	}
	end := at + long
	for tick := time.Duration(0); tick <= until; tick += 20 * time.Millisecond {
		inside := tick >= at && tick < end
		if paused && inside {
			continue // vigil does not run
		}
		if tick >= end && tick-20*time.Millisecond < end && paused {
			check(tick) // vigil runs again: its check before its reads
		}
		for ; next < len(evs) && evs[next].at <= tick; next++ {
			e := evs[next]
			if inside && e.kind != 0 {
				break // the engine's answers wait for its stall's end
			}
			now := e.at
			if e.at >= at && e.at < end && e.kind != 0 {
				now = tick // read late: at the pause's or the stall's end
			}
			feed(s, calls, ups, e, t0.Add(now))
		}
		check(tick)
	}
	return first, s.falseAlarms, s
}

// A silence made of vigil's own pause (a starved host, a stopped
// process) raises no suspicion; the engine's stall of the same length
// still does, as soon as before. Before the pause meter both raised one.
func TestVigilsOwnPauseIsNoStall(t *testing.T) {
	t.Parallel()
	const run, at = 40 * time.Second, 30 * time.Second
	fast := load{from: 0, to: run, gap: 250 * time.Millisecond, prompt: 200, output: 200, step: 30 * time.Millisecond,
		prefill: 5000, stream: true}
	plain := fast
	plain.stream, plain.output = false, 100
	slow := fast
	slow.gap, slow.step, slow.output = 2*time.Second, 400*time.Millisecond, 40
	for _, tc := range []struct {
		name   string
		calls  []simCall
		long   time.Duration // the silence
		paused bool          // vigil's pause (else the engine's stall)
		meter  bool          // the watch is told vigil's pauses
		// suspect: a suspicion is raised, within `within` of the
		// silence's start.
		suspect bool
		within  time.Duration
	}{
		// Streams: the silence that raises a suspicion is the 1 s floor.
		{name: "streams, vigil paused 1.5 s", calls: fast.calls(), long: 1500 * time.Millisecond, paused: true, meter: true},
		{name: "streams, vigil paused 1.5 s, no meter", calls: fast.calls(), long: 1500 * time.Millisecond, paused: true,
			suspect: true, within: 1600 * time.Millisecond},
		{name: "streams, the engine stalled 1.5 s", calls: fast.calls(), long: 1500 * time.Millisecond, meter: true,
			suspect: true, within: stallFloor + 100*time.Millisecond},
		// Plain answers: overdue once their decode (100 tokens at 30 ms
		// twice) and the floor passed, 7 s after their first byte was due.
		{name: "plain answers, vigil paused 9 s", calls: plain.calls(), long: 9 * time.Second, paused: true, meter: true},
		{name: "plain answers, vigil paused 9 s, no meter", calls: plain.calls(), long: 9 * time.Second, paused: true,
			suspect: true, within: 9100 * time.Millisecond},
		{name: "plain answers, the engine stalled 9 s", calls: plain.calls(), long: 9 * time.Second, meter: true,
			suspect: true, within: 100*30*time.Millisecond + stallFloor + 500*time.Millisecond},
		// A slow engine (400 ms steps): 10 of them.
		{name: "slow engine, vigil paused 5 s", calls: slow.calls(), long: 5 * time.Second, paused: true, meter: true},
		{name: "slow engine, vigil paused 5 s, no meter", calls: slow.calls(), long: 5 * time.Second, paused: true,
			suspect: true, within: 5100 * time.Millisecond},
		{name: "slow engine, the engine stalled 5 s", calls: slow.calls(), long: 5 * time.Second, meter: true,
			suspect: true, within: stallSteps*400*time.Millisecond + 100*time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			first, falseAlarms, s := runPause(tc.calls, run, at, tc.long, tc.paused, tc.meter)
			if first >= 0 {
				t.Logf("suspected at %v: evidence %+v", first, s.Evidence())
			}
			switch {
			case !tc.suspect && first >= 0:
				t.Fatalf("suspected at %v: vigil's own pause of %v from %v read as the engine's stall", first, tc.long, at)
			case tc.suspect && (first < at || first > at+tc.within):
				t.Fatalf("suspected at %v; want within %v of the silence at %v", first, tc.within, at)
			case tc.suspect && !tc.paused && (first >= at+tc.long):
				t.Fatalf("suspected at %v, after the stall's end", first)
			case !tc.suspect && falseAlarms != 0:
				t.Fatalf("%d false alarms", falseAlarms)
			}
		})
	}
}
