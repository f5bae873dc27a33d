package engineloss

import (
	"cmp"
	"sort"
	"testing"
	"time"
)

// simCall is one call of a simulated engine: sent, its first byte, a byte
// every `every` after (streams), its end. Times from the run's start.
type simCall struct {
	sent, first, every, end time.Duration
	prompt, output          int
	stream                  bool
	// bytes, when set, are the times of its bytes instead (first, every
	// and end unused), and open a call still in flight when the run ends.
	bytes []time.Duration
	open  bool
}

// load is an engine's traffic: calls every `gap` from `from` to `to`,
// each answered as the engine of step `step` would.
type load struct {
	from, to, gap time.Duration
	prompt        int
	output        int
	stream        bool
	// queue: time a call waits in the engine's own queue; step: the
	// engine's step time; prefill: prompt tokens a second.
	queue, step time.Duration
	prefill     float64
}

func (ld load) calls() []simCall {
	var cs []simCall
	for t := ld.from; t < ld.to; t += ld.gap {
		pre := time.Duration(float64(ld.prompt)/ld.prefill*float64(time.Second)) + ld.step
		c := simCall{sent: t, prompt: ld.prompt, output: ld.output, stream: ld.stream}
		// The engine's own queue fills over a quarter of the run's time: a
		// saturated engine got there from a lighter load.
		c.first = t + min(ld.queue, (t-ld.from)/4) + pre
		c.end = c.first + time.Duration(ld.output-1)*ld.step
		if ld.stream {
			c.every = ld.step
		} else {
			c.first = c.end // a plain answer's first byte is its whole answer
		}
		cs = append(cs, c)
	}
	return cs
}

type simEvent struct {
	at   time.Duration
	kind int // 0 sent, 1 chunk, 2 done
	c    int
}

// runStall plays calls through a Watch, ticking every 20 ms, with
// the engine stopped from stopAt on (0: never): nothing it would have
// sent from then comes. It returns the first tick suspected (-1: none)
// and the false alarms counted.
func runStall(calls []simCall, until, stopAt time.Duration) (first time.Duration, falseAlarms int, s *Watch) {
	evs := simEvents(calls)
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	s = NewWatch()
	ups := make([]*int, len(calls))
	first = -1
	next := 0
	for tick := time.Duration(0); tick <= until; tick += 20 * time.Millisecond {
		for ; next < len(evs) && evs[next].at <= tick; next++ {
			e := evs[next]
			if stopAt > 0 && e.at >= stopAt && e.kind != 0 {
				continue
			}
			feed(s, calls, ups, e, t0.Add(e.at))
		}
		if first < 0 && s.Check(t0.Add(tick)) {
			first = tick
		}
	}
	return first, s.falseAlarms, s
}

// feed notes e at now to s (ups: the calls' keys).
func feed(s *Watch, calls []simCall, ups []*int, e simEvent, now time.Time) {
	c := calls[e.c]
	switch e.kind {
	case 0:
		ups[e.c] = new(int)
		s.Sent(ups[e.c], now, c.prompt, c.output, c.stream)
	case 1:
		s.Chunk(ups[e.c], now)
	case 2:
		s.Done(ups[e.c], now, true, c.output)
	}
}

// simEvents is the calls' sends, bytes and ends in time order.
func simEvents(calls []simCall) []simEvent {
	var evs []simEvent
	for i, c := range calls {
		evs = append(evs, simEvent{c.sent, 0, i})
		if c.bytes != nil || c.open {
			for _, t := range c.bytes {
				evs = append(evs, simEvent{t, 1, i})
			}
			if !c.open {
				evs = append(evs, simEvent{c.bytes[len(c.bytes)-1], 2, i})
			}
			continue
		}
		if c.stream {
			for t := c.first; t < c.end; t += c.every {
				evs = append(evs, simEvent{t, 1, i})
			}
		}
		evs = append(evs, simEvent{c.end, 1, i}, simEvent{c.end, 2, i})
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	return evs
}

// The stall suspicion on the engines it must leave alone and on one that
// stopped, each with streams in flight and without (plain answers only):
// raised within a few step times of a stall (or, with plain answers only,
// once the first of them is overdue), never on a healthy engine.
func TestStallSuspicion(t *testing.T) {
	t.Parallel()
	const run, stop = 60 * time.Second, 30 * time.Second
	fast := load{from: 0, to: run, gap: 250 * time.Millisecond, prompt: 200, output: 200, step: 30 * time.Millisecond, prefill: 5000}
	with := func(ld load, f func(*load)) load { f(&ld); return ld }
	streams := func(ld load) load { return with(ld, func(l *load) { l.stream = true }) }
	plain := func(ld load) load { return with(ld, func(l *load) { l.stream = false; l.output = 100 }) }
	saturated := with(fast, func(l *load) {
		l.gap, l.step, l.queue = 100*time.Millisecond, 120*time.Millisecond, 4*time.Second
	})
	slow := with(fast, func(l *load) { l.gap, l.step, l.output = 2*time.Second, 400*time.Millisecond, 40 })
	// A lone long prefill: short calls first (the prefill rate is learned
	// from them), then one 60,000-token prompt prefilled for 15 s, alone
	// or beside streams whose steps its chunks slow down.
	short := with(fast, func(l *load) { l.to = 5 * time.Second })
	long := func(stream bool) []simCall {
		ld := load{from: 10 * time.Second, to: 10*time.Second + 1, gap: time.Second, prompt: 60000, output: 100,
			step: 30 * time.Millisecond, prefill: 4000, stream: stream}
		return ld.calls()
	}
	// Short calls sent while it prefills wait behind it (the engine
	// prefills first come, first served): their first bytes come after
	// its own, seconds past their own prompts' prefill.
	behind := func(stream bool) []simCall {
		var cs []simCall
		for i, at := 0, 10500*time.Millisecond; at < 24*time.Second; i, at = i+1, at+time.Second {
			c := simCall{sent: at, first: 25*time.Second + time.Duration(i)*30*time.Millisecond, prompt: 200, output: 100, stream: stream}
			c.end = c.first + 99*30*time.Millisecond
			if stream {
				c.every = 30 * time.Millisecond
			} else {
				c.first = c.end
			}
			cs = append(cs, c)
		}
		return cs
	}
	beside := with(fast, func(l *load) {
		l.from, l.to, l.gap, l.step = 10*time.Second, 26*time.Second, time.Second, 90*time.Millisecond
	})
	cat := func(lds ...[]simCall) []simCall {
		var out []simCall
		for _, l := range lds {
			out = append(out, l...)
		}
		return out
	}

	// Engines of steps (stepEngine): a limiter at its cap keeps its calls
	// in flight on a slow model (bench/goodput's slow10 and slow20), whose
	// step that prefills a new call's prompt (8,192 tokens of it: 2.7 s on
	// slow10) stalls every stream beside it for 25 of its decode steps;
	// told the prompts' sizes, or not (the bench's bodies do not show
	// them: 9 tokens). And a saturated batch of slow10: more calls in
	// flight than the engine has seats, its own queue full.
	slowCap := func(f int, told int, stream bool, stop time.Duration) []simCall {
		return slowModel(f).run(closedLoad{inFlight: 8, prompt: 10000, told: told, output: 324, stream: stream, until: run * time.Duration(f)}, 1, stop)
	}
	satEngine := slowModel(10)
	satEngine.seats = 16
	saturatedBatch := func(stream bool) []simCall {
		return satEngine.run(closedLoad{inFlight: 48, prompt: 2000, told: 2000, output: 200, stream: stream, until: 10 * run}, 2, 0)
	}

	for _, tc := range []struct {
		name  string
		calls []simCall
		stop  bool
		// within: a stall is suspected at most this long after it began.
		within time.Duration
		// until and stopAt: the run's length and the stall's start when
		// not the default's.
		until, stopAt time.Duration
	}{
		{name: "healthy, streams", calls: streams(fast).calls()},
		{name: "healthy, plain answers", calls: plain(fast).calls()},
		{name: "saturated, streams", calls: streams(saturated).calls()},
		{name: "saturated, plain answers", calls: plain(saturated).calls()},
		{name: "one long prefill beside streams", calls: cat(streams(short).calls(), long(true), streams(beside).calls())},
		{name: "one long prefill alone", calls: cat(streams(short).calls(), long(true))},
		{name: "one long plain prefill alone", calls: cat(plain(short).calls(), long(false))},
		{name: "one long prefill, streams sent behind it", calls: cat(streams(short).calls(), long(true), behind(true))},
		{name: "one long prefill, plain answers sent behind it", calls: cat(plain(short).calls(), long(false), behind(false))},
		{name: "slow engine, streams", calls: streams(slow).calls()},
		{name: "slow engine, plain answers", calls: plain(slow).calls()},
		// Streams: 10 steps of 30 ms are under the 1 s floor.
		{name: "a real stall, streams", calls: streams(fast).calls(), stop: true, within: stallFloor + 100*time.Millisecond},
		// Plain answers: the oldest in flight is overdue once its decode
		// (100 tokens at the learned step, 3 s) and the silence have
		// passed.
		{name: "a real stall, plain answers", calls: plain(fast).calls(), stop: true,
			within: 100*30*time.Millisecond + stallFloor + 500*time.Millisecond},
		{name: "a real stall of a slow engine, streams", calls: streams(slow).calls(), stop: true,
			within: stallSteps*400*time.Millisecond + 100*time.Millisecond},
		{name: "slow10 at its cap, streams", calls: slowCap(10, 10000, true, 0), until: 10 * run},
		{name: "slow10 at its cap, streams, prompts unsized", calls: slowCap(10, 9, true, 0), until: 10 * run},
		{name: "slow20 at its cap, streams, prompts unsized", calls: slowCap(20, 9, true, 0), until: 20 * run},
		{name: "slow10 at its cap, plain answers", calls: slowCap(10, 10000, false, 0), until: 10 * run},
		{name: "saturated batch of slow10, streams", calls: saturatedBatch(true), until: 10 * run},
		{name: "saturated batch of slow10, plain answers", calls: saturatedBatch(false), until: 10 * run},
		// A slow engine's stall: found within a few of its steps, one
		// that prefills among them.
		{name: "a real stall of slow10 at its cap, streams", calls: slowCap(10, 9, true, 10*stop), until: 10 * run, stopAt: 10 * stop,
			within: 8 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stopAt, until := time.Duration(0), cmp.Or(tc.until, run)
			if tc.stop {
				stopAt = stop
			}
			if tc.stopAt > 0 {
				stopAt = tc.stopAt
			}
			first, falseAlarms, s := runStall(tc.calls, until, stopAt)
			if first >= 0 {
				t.Logf("evidence %+v; prefill rate %.0f", s.Evidence(), s.prefillRate)
			}
			switch {
			case stopAt == 0 && first >= 0:
				t.Fatalf("suspected at %v on an engine that never stopped", first)
			case stopAt > 0 && (first < stopAt || first > stopAt+tc.within):
				t.Fatalf("suspected at %v; want within %v of the stall at %v", first, tc.within, stopAt)
			case falseAlarms != 0:
				t.Fatalf("%d false alarms", falseAlarms)
			}
		})
	}
}

// A suspicion clears at the first byte, counted false, and the next needs
// a longer silence (hysteresis), until a quiet spell restores it.
func TestStallSuspicionHysteresis(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s := NewWatch()
	c := new(int)
	s.Sent(c, at(0), 10, 100, true)
	s.Chunk(c, at(100*time.Millisecond))
	if s.Check(at(1050 * time.Millisecond)) {
		t.Fatal("suspected before a second of silence")
	}
	if !s.Check(at(1150 * time.Millisecond)) {
		t.Fatal("not suspected after a second of silence")
	}
	s.Chunk(c, at(1200*time.Millisecond))
	if s.Check(at(1210*time.Millisecond)) || s.falseAlarms != 1 {
		t.Fatalf("still suspected after a byte, or not counted false (%d)", s.falseAlarms)
	}
	if s.Check(at(2300 * time.Millisecond)) {
		t.Fatal("suspected again after one second: the backoff did not double the silence")
	}
	if !s.Check(at(3250 * time.Millisecond)) {
		t.Fatal("not suspected after two seconds of silence")
	}
	s.Confirmed(at(3300 * time.Millisecond))
	if s.falseAlarms != 1 || s.raised != 2 {
		t.Fatalf("false alarms %d, raised %d; want the confirmed one not false", s.falseAlarms, s.raised)
	}
	s.Check(at(3300*time.Millisecond + backoffDecay))
	if s.backoff != 1 {
		t.Fatalf("backoff %d after a quiet spell, want 1", s.backoff)
	}
}

// What the limiter passes through (GET /health, /metrics: the load
// balancer's checks) is no progress of the engine's, though it answers
// while hung.
func TestStallWatchIgnoresCallsItDoesNotWatch(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	s := NewWatch()
	c := new(int)
	s.Sent(c, t0, 10, 100, true)
	s.Chunk(c, t0.Add(50*time.Millisecond))
	for i := 1; i <= 20; i++ { // a health check every 100 ms
		hc := new(int)
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		s.Chunk(hc, at)
		s.Done(hc, at, true, -1)
	}
	if !s.Check(t0.Add(2 * time.Second)) {
		t.Fatal("passed-through answers hid the stall")
	}
}

// An engine that has answered nothing through the watch has no pace to
// judge its silence by (a slow model's first prefill takes seconds): its
// calls are not overdue until it answers one.
func TestStallWatchJudgesOnlyAnEngineThatAnswered(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	s := NewWatch()
	c := new(int)
	s.Sent(c, t0, 9, 300, true)
	if s.Check(t0.Add(time.Minute)) {
		t.Fatal("suspected an engine that never answered")
	}
	s.Chunk(c, t0.Add(time.Minute))
	if !s.Check(t0.Add(time.Minute + 2*time.Second)) {
		t.Fatal("not suspected once it answered and went silent")
	}
	// The verdict: the engine is restarted, and not judged again until
	// the restarted one answers.
	s.Confirmed(t0.Add(2 * time.Minute))
	s.Sent(c, t0.Add(3*time.Minute), 9, 300, true)
	if s.Check(t0.Add(4 * time.Minute)) {
		t.Fatal("suspected the restarted engine before it answered")
	}
}
