package admission

import (
	"math"
	"slices"
	"time"
)

// Bounds and tuning of the automatic cap (max_in_flight: 0). They are
// properties of the method, not of a deployment: nothing here is a capacity
// figure that an operator would have to measure.
const (
	autoMin     = 2   // never starve the engine completely
	autoMax     = 256 // vLLM's default --max-num-seqs: past it an engine only queues
	autoInitial = 16  // small enough for any engine, large enough to batch

	// queueTolerance is the engine's own waiting queue, averaged over a
	// window, that counts as "the cap is above what the engine can run".
	queueTolerance = 1.0
	// growBand: no growth while the TTFT p90 is above this share of the
	// target, so the cap settles below the objective instead of across it.
	growBand = 0.8
	// probeGain multiplies the cap per uncongested round until the first
	// congestion (start-up, after SlowStart); afterwards it grows by
	// addGain of itself (at least 1) per round.
	probeGain = 1.25
	addGain   = 0.05
	// gaugeFresh: while the engine's gauges were read this recently, the
	// cap grows only on a window that includes a reading of them, so it
	// never outruns the evidence of the engine's queue.
	gaugeFresh = 5 * time.Second

	// kneeSlack is the law's knee: the cap stays where the mean service
	// time (admission to last byte, Little's law S = N/X) is at most
	// (1+kneeSlack) times its minimum. Below an engine's knee a bigger
	// batch barely slows each request; past it every request added only
	// slows the others, so S grows in proportion to N. With S = S0 + N/mu,
	// S = (1+k)*S0 keeps k/(1+k) of the throughput ceiling mu: 2 keeps two
	// thirds of it against a truly idle S0, more against the minimum seen,
	// which is measured under light load. 1 (the M/M/1 knee) held unary
	// traffic below what the engine's queue already allowed.
	kneeSlack = 2.0
	// serviceSamples answers make one service-time estimate.
	serviceSamples = 20
	// serviceMinDoubling: the remembered minimum service time doubles over
	// this long unless seen again, so a slower engine (longer prompts,
	// after a restart) is relearned.
	serviceMinDoubling = 10 * time.Minute

	windowMinSamples = 10
	windowMinGauges  = 2
	windowMin        = 100 * time.Millisecond
	windowMax        = time.Second
)

// autoLimit computes the automatic in-flight cap: the most work the engine
// can run at once without queueing it, within the TTFT objective. It is a
// pure state machine: every input carries its time, so tests drive it
// without a clock.
//
// Evidence, gathered in windows:
//   - the engine's own queue (vllm:num_requests_waiting, scraped while
//     requests are in flight): a continuous-batching engine starts every
//     request it has room for at once, so anything waiting is work the cap
//     let in beyond the engine's batch or KV capacity. That work is better
//     off in vigil's queue: bounded, newest first, dropped when its client
//     leaves, answered with an honest Retry-After;
//   - upstream time to first byte of streamed answers (their TTFT) against
//     ttft_target, judged at the 90th percentile: latency rises with the
//     batch (a bigger batch means slower steps and larger prefill waves), so
//     below the engine's capacity this is what bounds the cap when the
//     objective is tight;
//   - the mean service time S of successful answers (admission to last
//     byte; by Little's law S = N/X for N in flight completing X a second),
//     estimated every serviceSamples answers, against its decaying minimum:
//     below the engine's knee a bigger batch barely slows each answer, past
//     it S grows in proportion to N while X stays flat. This is what stops
//     the cap when the engine starts every request it gets (chunked
//     prefill: no queue to read) and only gets slower;
//   - upstream failures (5xx, refused, reset).
//
// The law: congestion (queue over 1 on average, p90 over the target, S over
// three times its minimum, or any failure) multiplies the cap by the
// tightest of running/(running+waiting), target/p90, 3*Smin/S and 0.9,
// floored at 0.5 (each S estimate is used once: it spans answers admitted
// before the last change too, since answers as long as S finish only S after
// it); otherwise, when demand filled the cap, answers are flowing, the p90
// is within 80% of the target and S within 80% of three times its minimum,
// the cap grows by x1.25 until the engine first shows a queue and by 5% (at
// least 1) after; while the engine's gauges are readable, only on a window
// that read them. S aside, only evidence from after the last change
// counts, so each change is judged by its own effect.
type autoLimit struct {
	limit   float64
	probing bool
	target  time.Duration // TTFT objective; 0: none

	lastChange time.Time
	winStart   time.Time
	ttfts      []float64 // seconds, streamed answers admitted after lastChange
	samples    int       // answers finished or first bytes seen since lastChange
	drops      int
	gauges     int
	waiting    float64 // sums over gauges
	running    float64
	gaugeAt    time.Time // last reading of the engine's gauges
	demand     bool
	// hold stops growth (the watchdog says the engine is saturated).
	hold bool

	// Service time (admission to the answer's end) of every successful
	// answer, whenever admitted: svcSum/svcN until serviceSamples, then
	// svc is the estimate, fresh until the law has used it once.
	svcSum   float64
	svcN     int
	svc      float64
	svcFresh bool
	svcMin   float64
	svcMinAt time.Time
}

func newAutoLimit(target time.Duration, now time.Time) *autoLimit {
	a := &autoLimit{target: target}
	a.reset(now)
	return a
}

// reset forgets the evidence and probes again: used after an engine
// restart, whose capacity may differ from the old one.
func (a *autoLimit) reset(now time.Time) {
	*a = autoLimit{limit: autoInitial, probing: true, target: a.target, hold: a.hold,
		lastChange: now, winStart: now}
}

// cap is the current limit as a request count.
func (a *autoLimit) cap() int { return int(math.Round(a.limit)) }

// markDemand notes that a request found the cap full.
func (a *autoLimit) markDemand() { a.demand = true }

// observeTTFT feeds a streamed answer's upstream time to first byte.
func (a *autoLimit) observeTTFT(admitted time.Time, ttft time.Duration, now time.Time) bool {
	if admitted.Before(a.lastChange) {
		return false
	}
	a.ttfts = append(a.ttfts, ttft.Seconds())
	a.samples++
	return a.maybeUpdate(now)
}

// observeDone feeds a finished answer (pacing evidence: the cap was used).
func (a *autoLimit) observeDone(admitted, now time.Time) bool {
	a.observeService(now.Sub(admitted), now)
	if admitted.Before(a.lastChange) {
		return false
	}
	a.samples++
	return a.maybeUpdate(now)
}

// observeService accumulates service times into an estimate and keeps its
// decaying minimum.
func (a *autoLimit) observeService(d time.Duration, now time.Time) {
	a.svcSum += d.Seconds()
	a.svcN++
	if a.svcN < serviceSamples {
		return
	}
	a.svc = a.svcSum / float64(a.svcN)
	a.svcSum, a.svcN = 0, 0
	a.svcFresh = true
	if a.svcMin > 0 {
		a.svcMin *= math.Exp2(now.Sub(a.svcMinAt).Seconds() / serviceMinDoubling.Seconds())
	}
	if a.svcMin == 0 || a.svc < a.svcMin {
		a.svcMin = a.svc
	}
	a.svcMinAt = now
}

// drop records an upstream failure of a request admitted at admitted.
func (a *autoLimit) drop(admitted, now time.Time) bool {
	if admitted.Before(a.lastChange) {
		return false
	}
	a.drops++
	a.samples++
	return a.maybeUpdate(now)
}

// observeEngine feeds one scrape of the engine's queue gauges.
func (a *autoLimit) observeEngine(waiting, running float64, now time.Time) bool {
	a.gauges++
	a.gaugeAt = now
	a.waiting += waiting
	a.running += running
	return a.maybeUpdate(now)
}

// maybeUpdate closes the window when it holds enough evidence and applies
// the control law; it reports whether the cap changed.
func (a *autoLimit) maybeUpdate(now time.Time) bool {
	age := now.Sub(a.winStart)
	enough := a.samples >= windowMinSamples || a.gauges >= windowMinGauges
	if !(enough && age >= windowMin) && !(age >= windowMax && a.samples+a.gauges > 0) {
		return false
	}
	var p90 float64
	if len(a.ttfts) > 0 {
		slices.Sort(a.ttfts)
		p90 = a.ttfts[min(len(a.ttfts)-1, len(a.ttfts)*9/10)]
	}
	target := a.target.Seconds()
	var w, r float64
	if a.gauges > 0 {
		w, r = a.waiting/float64(a.gauges), a.running/float64(a.gauges)
	}
	queued := w > queueTolerance
	slow := target > 0 && len(a.ttfts) >= 3 && p90 > target
	knee := (1 + kneeSlack) * a.svcMin
	pastKnee := a.svcFresh && a.svc > knee
	a.svcFresh = false
	if w > 0 {
		// The engine has started to queue: near its capacity, probe gently.
		a.probing = false
	}
	old := a.limit
	switch {
	case queued || slow || pastKnee || a.drops > 0:
		f := 0.9
		if pastKnee {
			f = min(f, knee/a.svc)
		}
		if queued {
			f = min(f, r/(r+w))
		}
		if slow {
			f = min(f, target/p90)
		}
		a.limit = max(autoMin, a.limit*max(0.5, f))
		a.probing = false
	case a.hold || !a.demand:
	case a.samples == 0:
		// Nothing started or finished: no sign the engine is moving (it
		// may be hung), so no reason to send it more.
	case target > 0 && p90 > growBand*target:
	case a.svc > growBand*knee:
		// Near the knee: more in flight would only slow every answer.
	case a.gauges == 0 && now.Sub(a.gaugeAt) < gaugeFresh:
		// The engine's queue is readable but was not read this window.
	case a.probing:
		a.limit = min(autoMax, max(a.limit+1, a.limit*probeGain))
	default:
		a.limit = min(autoMax, a.limit+max(1, a.limit*addGain))
	}
	changed := a.cap() != int(math.Round(old))
	if a.limit != old {
		a.lastChange = now
		a.demand = false
	}
	a.winStart = now
	a.ttfts = a.ttfts[:0]
	a.samples, a.drops, a.gauges = 0, 0, 0
	a.waiting, a.running = 0, 0
	return changed
}

// tighten is the watchdog's "saturated" verdict: the engine's own queue is
// deep although the evidence here has not shown it (traffic that bypasses
// the limiter, no readable metrics). Cut once and stop probing.
func (a *autoLimit) tighten(now time.Time) {
	a.limit = max(autoMin, a.limit*0.75)
	a.probing = false
	a.lastChange = now
	a.demand = false
}
