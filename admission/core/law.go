package core

import (
	"math"
	"time"
)

// The steps of the automatic cap's law (maybeUpdate): a window closes
// (windowDone), its evidence is read (evidence), the probing ends at the
// engine's queue (endProbing), the cap is cut on congestion (cut) or else
// grows (grow), growth stays under the clients' deadlines (boundGrowth),
// and the window's counters start again (closeWindow).

// windowDone reports whether the window holds enough evidence to judge:
// windowMinSamples answers or windowMinGauges readings of the engine over
// windowMin at least, or any evidence at all by windowMax.
func (a *autoLimit) windowDone(now time.Time) bool {
	age := now.Sub(a.winStart)
	enough := a.samples >= windowMinSamples || a.gauges >= windowMinGauges
	return (enough && age >= windowMin) || (age >= windowMax && a.samples+a.gauges > 0)
}

// window is what one window says about the cap.
type window struct {
	p90, target float64 // first tokens' p90 and the objective (seconds; 0: none)
	w, r        float64 // the engine's mean waiting and running requests
	backlog     float64 // seats a prefill backlog may use (prefillMeter.backlog)
	queued      bool    // the engine queues past its tolerance
	slow        bool    // first tokens over the objective, and the cap answers for them
	knee        float64 // the service time's knee (seconds)
	kneeJudges  bool
	pastKnee    bool    // a fresh service-time estimate over the knee
	svc         float64 // that estimate
	ceiling     float64 // the deadline ceiling (0: unknown)
	near        bool    // it comes from answers beside most of the cap
	late        bool    // the cap is over a near ceiling
	// streams: the throughput knee's ceiling for streams (knee.go; 0:
	// none), and whether the cap is past it on fresh evidence.
	streams     float64
	pastStreams bool
	drops       int
}

// congested: any evidence that the cap is too high.
func (ev window) congested() bool {
	return ev.queued || ev.slow || ev.pastKnee || ev.late || ev.pastStreams || ev.drops > 0
}

// evidence reads the window. A fresh service-time estimate is used once,
// and so is a fresh throughput knee.
func (a *autoLimit) evidence(now time.Time) window {
	ev := window{p90: a.ttfts.p90Sound(), target: a.gate.objective(), drops: a.drops}
	if a.gauges > 0 {
		ev.w, ev.r = a.waiting/float64(a.gauges), a.running/float64(a.gauges)
	}
	tolerance := queueTolerance
	if len(a.ttfts) == 0 {
		tolerance = max(tolerance, queueShare*ev.r)
	}
	kv := -1.0
	if a.kvN > 0 {
		kv = a.kvSum / float64(a.kvN)
	}
	ev.backlog = a.prefill.backlog(ev.w, ev.r, kv)
	a.backlog = ev.backlog > 0 && ev.w <= ev.backlog
	tolerance = max(tolerance, ev.backlog)
	ev.queued = ev.w > tolerance
	// TTFT is the first-token limit's to keep while it can (at its floor
	// it cannot: the engine is slow to first token even one prefill at a
	// time, and only fewer answers in flight beside it help).
	ev.slow = a.gate.atFloor() && ev.target > 0 && len(a.ttfts) >= ttftMin && ev.p90 > ev.target
	ev.knee = max((1+kneeSlack)*a.svcMin, a.svcMin+kneeFloor.Seconds())
	ev.kneeJudges = a.kneeJudges()
	ev.svc = a.svc
	ev.pastKnee = ev.kneeJudges && a.svcFresh && a.svc > ev.knee
	a.svcFresh = false
	ev.ceiling, ev.near = a.deadlineCeiling()
	ev.late = ev.near && a.limit > ev.ceiling
	if !ev.kneeJudges {
		// Streams under an objective: the service time's knee does not
		// judge them, their throughput's does.
		ev.streams = a.streamKnee.bound(now)
		ev.pastStreams = a.kneeHit && ev.streams > 0 && a.limit > ev.streams
	}
	a.kneeHit = false
	return ev
}

// endProbing: the engine has started to queue, near its capacity, so the
// cap probes gently from here. Streamed answers' first tokens wait out
// any queue, so for them the first request waiting ends the probing, a
// prefill backlog too: probing on through one (x1.25 a window, before the
// TTFT of each step shows) runs the cap far past what the engine
// prefills in time, where growing a turnover at a time does not
// (docs/design.md, the law's measurements). Unless the counters say the
// prompts are short: those are admitted several a step, and one waiting
// is a request between two steps, not a backlog; ended there, the cap
// crept up a turnover at a time from 68 to 100 over 5 min of 50 s
// answers (decode-bound) where 128 served best at a time scale the
// benchmark's machine could not carry; measured right the best is 256,
// which the cap reaches. Their first tokens near the objective stop it
// instead.
func (a *autoLimit) endProbing(ev window) {
	if ev.queued || (len(a.ttfts) > 0 && ev.w > 0 && !a.prefill.measuredShort()) {
		a.probing = false
	}
}

// cut lowers the cap on congestion: by the tightest of target/p90,
// knee/S, ceiling/cap and 0.9, never below half of itself; the engine's
// queue brings it to what the engine runs.
func (a *autoLimit) cut(ev window) {
	next := a.limit
	if ev.slow || ev.pastKnee || ev.late || ev.drops > 0 {
		f := 0.9
		if ev.pastKnee {
			f = min(f, ev.knee/ev.svc)
		}
		if ev.late {
			f = min(f, ev.ceiling/a.limit)
		}
		if ev.slow {
			f = min(f, ev.target/ev.p90)
		}
		next = a.limit * max(0.5, f)
	}
	if ev.pastStreams {
		// Back to the level of in flight that completed as much.
		next = min(next, max(0.5*a.limit, ev.streams))
	}
	if ev.queued {
		// To what the engine runs, not by a ratio: the queue lasts
		// until answers free the seats, so the same evidence comes
		// back window after window, and a ratio would compound.
		next = min(next, max(0.5*a.limit, ev.r+ev.backlog))
	}
	a.limit = max(autoMin, next)
	a.probing = false
}

// grow raises the cap when nothing holds it: by probeGain a window while
// probing or under a known deadline ceiling, else by turnoverGain per
// answer finished. It reports what it did, or what held the cap (the
// control step's trace, trace.go).
func (a *autoLimit) grow(ev window, now time.Time) string {
	switch {
	case a.hold && !a.backlog:
		// Held while the watchdog says saturated, unless what it saw is a
		// prefill backlog on an engine with room (see tighten).
		return "held: saturated"
	case !a.demand:
		return "held: no demand"
	case a.samples == 0 && a.finished == 0:
		// Nothing started or finished: no sign the engine is moving (it
		// may be hung), so no reason to send it more. Any answer counts
		// here, whenever admitted: answers as long as a minute would
		// otherwise allow one step per minute.
		return "held: no answers"
	case ev.target > 0 && ev.p90 > growBand*ev.target && a.gate.batchSlows():
		// First tokens near the objective: more in flight only makes each
		// engine step longer, whichever limit cuts when they pass it. Only
		// at the first-token limit's floor did this hold the cap: above it
		// the cap grew while the limit shrank, on an engine whose first
		// tokens wait on its steps, not on each other's prefill
		// (decode-bound: the cap ran to 233, the p99 first token to 1.5 s,
		// though much of that lateness was the benchmark's machine).
		// Not where a lone long prefill takes what it took at light load:
		// the streams in flight do not slow first tokens there
		// (batchSlows, streamgrowth.go).
		return "held: first tokens near the objective"
	case ev.kneeJudges && a.svc > growBand*ev.knee:
		// Near the knee: more in flight would only slow every answer.
		return "held: near the knee"
	case a.gauges == 0 && now.Sub(a.gaugeAt) < gaugeFresh:
		// The engine's queue is readable but was not read this window.
		return "held: gauges unread"
	case a.probing && a.streams && len(a.ttfts) == 0:
		// Probing over streams: no first token yet of those admitted
		// since the last growth, so no evidence of what it did. Growth
		// waits for it, at the engine's pace: a window is a fraction of
		// a second, and on an engine whose prefill takes seconds x1.25 a
		// window ran the cap to many times what the engine prefills in
		// time before its first token showed.
		return "held: no first token yet"
	case a.probing || ev.ceiling > 0:
		// Start-up, or a known ceiling (the clients' deadlines) that
		// already bounds the step: no need to creep up a turnover at a time.
		a.limit = min(autoMax, max(a.limit+1, a.limit*a.probeGainFor(ev.w, ev.r, a.gauges)))
		return "grew: probing"
	case a.finished == 0:
		return "held: no answer finished"
	default:
		a.limit = min(autoMax, a.limit+turnoverGain*float64(a.finished))
		return "grew: turnover"
	}
}

// boundGrowth keeps a growth under the deadline ceiling (twice it while
// the engine's queue is empty and the ceiling comes from lighter load),
// and under the throughput knee's while it holds.
func (a *autoLimit) boundGrowth(ev window, old float64) {
	if ev.streams > 0 && a.limit > old {
		a.limit = max(old, min(a.limit, ev.streams))
	}
	bound := ev.ceiling
	if bound <= 0 || a.limit <= old {
		return
	}
	if !ev.near && a.gauges > 0 && ev.w == 0 {
		bound *= roomyStretch
	}
	a.limit = max(old, min(a.limit, bound))
}

// closeWindow starts the next window; a change of the cap starts its
// judgement afresh. It reports whether the cap changed as a count.
func (a *autoLimit) closeWindow(old float64, now time.Time) bool {
	changed := a.cap() != int(math.Round(old))
	if a.limit != old {
		a.lastChange = now
		a.demand = false
		a.ttfts = a.ttfts[:0]
	}
	a.winStart = now
	a.samples, a.finished, a.drops, a.gauges = 0, 0, 0, 0
	a.waiting, a.running = 0, 0
	a.kvSum, a.kvN = 0, 0
	return changed
}
