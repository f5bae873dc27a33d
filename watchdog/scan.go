package watchdog

import (
	"time"

	"github.com/vigil-dev/vigil/probes"
)

// scan is what one pass over the history found about progress.
type scan struct {
	last         *Sample // the last sample
	lastReadable *Sample // the last sample with a readable scrape
	prevReadable *Sample // the readable sample before lastReadable

	// moving: a progress signal moved (or a counter reset) between
	// prevReadable and lastReadable.
	moving bool
	// reset: a counter went down between prevReadable and lastReadable:
	// the engine restarted and the counters were re-baselined.
	reset bool
	// lastMove is when counters were last seen to have moved (the first
	// readable sample is the baseline); lastMoveIdx its index.
	lastMove    time.Time
	lastMoveIdx int
	// resetIdx is the index of the sample after the last counter reset
	// (0 if none): rates never span a reset.
	resetIdx int

	// pending: work is waiting on the engine at the last sample (queued or
	// running requests, or our probe unanswered); pendingKnown is false
	// when that cannot be told.
	pending, pendingKnown bool
	// stall is how long no progress signal moved while work was pending,
	// as of now, not counting time under unreadable scrapes, nor, once
	// discounted, vigil's own pauses.
	stall time.Duration
	// stallFrom is when that stall began; paused is how much of it vigil
	// was paused (discount), already taken off stall.
	stallFrom time.Time
	paused    time.Duration
	// unreadable are the spans of unreadable scrapes (unreadableSpans).
	unreadable []span
	// longestGap is the longest such stall seen anywhere in the history.
	longestGap time.Duration
	// lastGrowth is when a counter last rose with none going down: proof
	// that the engine serves, which a reset (a restart) is not.
	lastGrowth time.Time

	// The partial failures (partial.go): per data-parallel rank, decode,
	// and a wedged API server.
	ranks  []rankScan
	decode decodeScan
	wedge  wedgeScan
}

// span is one unreadable sample's share of time: the interval it covers.
type span struct {
	end time.Time
	d   time.Duration
}

// scanHistory walks the samples once, oldest first.
//
// The "frozen since" clock starts at the later of the last counter move and
// the start of the current stretch of pending work (an idle engine has
// frozen counters too; our probe is what makes it pending). Unreadable
// scrapes neither move the counters nor freeze them: the time each one
// covers is taken off the clock, so a failing /metrics can never make an
// engine look hung.
func scanHistory(history []Sample, now time.Time) scan {
	var sc scan
	if len(history) == 0 {
		return sc
	}
	var (
		pendingSince time.Time
	)
	unreadable := unreadableSpans(history)
	// A sample at which the engine said it was asleep (vLLM's sleep
	// mode) restarts every stall clock: the silence of a sleep is no
	// silence of a hang, neither to time nor to learn from, and a woken
	// engine gets a whole window for its first move.
	woke := 0
	for i := range history {
		if history[i].Asleep {
			woke = i
		}
	}
	stallAt := func(at time.Time) time.Duration {
		if pendingSince.IsZero() || sc.lastMove.IsZero() {
			return 0
		}
		return frozenFor(latest(sc.lastMove, pendingSince), at, unreadable)
	}
	for i := range history {
		s := &history[i]
		if s.readable() {
			if sc.lastReadable == nil {
				sc.lastMove, sc.lastMoveIdx = s.At, i
			} else {
				moved, reset := compare(sc.lastReadable.Metrics.Metrics, s.Metrics.Metrics)
				sc.moving, sc.reset = moved || reset, reset
				if moved || reset {
					sc.lastMove, sc.lastMoveIdx = s.At, i
				}
				if moved && !reset {
					sc.lastGrowth = s.At
				}
				if reset {
					sc.resetIdx = i
				}
			}
			sc.prevReadable, sc.lastReadable = sc.lastReadable, s
		}
		if s.Asleep {
			sc.lastMove, sc.lastMoveIdx = s.At, i
		}
		p, ok := s.pending()
		if ok {
			if !p {
				pendingSince = time.Time{}
			} else if pendingSince.IsZero() {
				pendingSince = s.pendingSince()
			}
		}
		if s.readable() && !pendingSince.IsZero() {
			sc.longestGap = max(sc.longestGap, stallAt(s.At))
		}
	}
	sc.last = &history[len(history)-1]
	sc.pending, sc.pendingKnown = sc.last.pending()
	if !sc.pendingKnown {
		// Unreadable and our probe not pending: carry the stretch on.
		sc.pending = !pendingSince.IsZero()
	}
	if sc.pending {
		sc.stall = stallAt(now)
		if sc.stall > 0 {
			sc.stallFrom = latest(sc.lastMove, pendingSince)
		}
	}
	sc.unreadable = unreadable
	sc.ranks = scanRanks(history[woke:], unreadable, now)
	sc.decode = scanDecode(history[woke:], unreadable, now)
	sc.wedge = scanWedge(history, now)
	return sc
}

// discount takes vigil's own pauses (Params.Paused) off the stall: a
// process that did not run for a while reads, when it runs again, a
// silence it caused itself (GC, a noisy neighbour, a starved host), and
// the restart a HUNG verdict brings must never come from that. Only the
// pauses under readable scrapes count: the time under unreadable ones is
// already off the stall.
func (sc *scan) discount(paused func(a, b time.Time) time.Duration, now time.Time) {
	if paused == nil || sc.stall <= 0 {
		return
	}
	var d time.Duration
	at := sc.stallFrom
	for _, u := range sc.unreadable { // oldest first
		from, to := u.end.Add(-u.d), u.end
		if !to.After(at) {
			continue
		}
		if !from.Before(now) {
			break
		}
		if from.After(at) {
			d += paused(at, from)
		}
		at = to
	}
	if now.After(at) {
		d += paused(at, now)
	}
	sc.paused = min(max(d, 0), sc.stall)
	sc.stall -= sc.paused
}

// compare reports whether any progress or heartbeat counter present in
// both scrapes moved, and whether any went down (an engine restart).
func compare(a, b *probes.Metrics) (moved, reset bool) {
	m1, r1 := compareCounters(a.Progress, b.Progress)
	m2, r2 := compareCounters(a.Heartbeats, b.Heartbeats)
	return m1 || m2, r1 || r2
}

// rates are the deltas between two readable samples.
type rates struct {
	window     time.Duration
	samples    int
	progress   float64
	heartbeats map[string]float64
	extra      map[string]float64
	// answered is the calls the engine answered through vigil's limiter
	// over the window; answeredKnown: a limiter counted them at both ends.
	answered      float64
	answeredKnown bool
}

func (r rates) perSecond(v float64) float64 {
	if r.window <= 0 {
		return 0
	}
	return v / r.window.Seconds()
}

// rateBase picks the earliest readable sample within window before the
// last readable one (at least the one before it), never across a reset.
func (sc *scan) rates(history []Sample, window time.Duration) rates {
	if sc.lastReadable == nil {
		return rates{}
	}
	last := sc.lastReadable
	var base *Sample
	n := 0
	for i := sc.resetIdx; i < len(history); i++ {
		s := &history[i]
		if !s.readable() || s == last {
			continue
		}
		if s.At.Before(last.At.Add(-window)) && s != sc.prevReadable {
			continue
		}
		if base == nil {
			base = s
		}
		n++
	}
	if base == nil {
		return rates{samples: 1}
	}
	a, b := base.Metrics.Metrics, last.Metrics.Metrics
	r := rates{window: last.At.Sub(base.At), samples: n + 1, heartbeats: map[string]float64{}, extra: map[string]float64{}}
	for name, va := range a.Progress {
		if vb, ok := b.Progress[name]; ok {
			r.progress += vb - va
		}
	}
	for name, va := range a.Heartbeats {
		if vb, ok := b.Heartbeats[name]; ok {
			r.heartbeats[name] = vb - va
		}
	}
	for name, va := range a.Extra {
		if vb, ok := b.Extra[name]; ok {
			r.extra[name] = vb - va
		}
	}
	if la, lb := base.Limiter, last.Limiter; la != nil && lb != nil && lb.Answered >= la.Answered {
		r.answered, r.answeredKnown = float64(lb.Answered-la.Answered), true
	}
	return r
}
