package core

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

	// queueTolerance and queueShare: the engine's own waiting queue,
	// averaged over a window, counts as "the cap is above what the engine
	// can run" when it is over queueTolerance requests and over queueShare
	// of those running. By Little's law waiting/running is the time a
	// request spends waiting in the engine over the time it runs: with
	// chunked prefill a few long prompts always wait a step or two for the
	// step's token budget (that is the engine at full use, not queueing),
	// while a cap past the engine's batch or KV capacity parks whole
	// requests there.
	// A streamed answer's first token waits out the whole of that queue,
	// though, so while first tokens are being measured any queue over
	// queueTolerance counts.
	queueTolerance = 1.0
	queueShare     = 0.1
	// growBand: no growth while the TTFT p90 is above this share of the
	// target, so the cap settles below the objective instead of across it.
	growBand = 0.8
	// probeGain multiplies the cap per uncongested round until the first
	// congestion (start-up, after SlowStart).
	probeGain = 1.25
	// turnoverGain: past the first congestion the cap grows by this much
	// per answer finished, i.e. by turnoverGain of itself per turnover
	// (one service time), whatever the length of a window: the evidence of
	// a step (service time, the tail, TTFT) arrives one turnover later.
	turnoverGain = 0.25
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
	// kneeFloor: the knee counts only when the mean service time exceeds
	// its minimum by at least this much. An LLM engine's decode step takes
	// 10-50 ms, so a batch past its knee slows every answer by whole steps;
	// a smaller excess is a fast upstream's scheduling noise (tiny
	// completions, cached answers, a busy host), where holding requests in
	// vigil's queue costs more than the engine gains (docs/design.md, the
	// law's measurements: a 1 ms upstream).
	kneeFloor = 50 * time.Millisecond
	// serviceSamples answers make one service-time estimate.
	serviceSamples = 20
	// sizeShift: an estimate whose answers are, on average, more than this
	// many times larger or smaller (answerSize) than those of the minimum
	// starts a new minimum instead of being judged against it. A one-token
	// answer takes one engine step whatever the load, a 300-token one
	// hundreds: with one minimum for all, a burst of tiny answers set it,
	// every longer answer after it read as past the knee, and the cap
	// stayed at its floor for the hour the minimum took to decay. 2 is
	// under the knee's 3x, so a change of mix within it cannot read as a
	// knee, and far over the noise of a mix's mean size over 20 answers
	// (lognormal lengths, sigma 0.5: +-12%), which the knee was measured
	// with.
	sizeShift = 2.0
	// promptPerStep: prompt tokens that cost about one decode step (a
	// chunked prefill step of a few thousand tokens takes about as long
	// as ten to twenty decode steps). It only sizes answers for sizeShift,
	// so a rough figure does.
	promptPerStep = 256
	// serviceMinDoubling: the remembered minimum service time doubles over
	// this long unless seen again, so a slower engine (longer prompts,
	// after a restart) is relearned.
	serviceMinDoubling = 10 * time.Minute

	// deadlineShare: unary answers whose client announced its timeout
	// (X-Stainless-Timeout) must finish, at the 99th percentile of their
	// time in the engine, within this share of it. Past it the answers the
	// cap adds arrive after their clients gave up: pure waste, and retries.
	// All of it: a first attempt waits little in the queue (newest first),
	// and a smaller share kept calls on time no better while delivering
	// fewer of a backlog's (docs/design.md, the law's measurements).
	deadlineShare = 1.0
	// deadlineSamples answers make the percentile (a ring), from
	// deadlineMinSamples on. The 99th percentile of 200 is the second
	// slowest answer, so one long answer moved the cap by a fifth; of 400
	// it is the fourth, and the cap holds steady instead of swinging
	// (docs/design.md, the law's measurements).
	deadlineSamples    = 400
	deadlineMinSamples = 50
	// nearShare: answers that ran beside at least this share of the cap
	// judge it (deadlineCeiling). 1/2 let answers from the bottom of the
	// range, whose r overstates the cost, hold the cap well below a fixed
	// cap that kept the same deadlines.
	nearShare = 0.75
	// roomyStretch: while the engine's queue is empty, the cap may grow to
	// this multiple of a ceiling extrapolated from lighter load (below the
	// knee answers barely slow as more run beside them). At 1 the cap
	// took most of a surge to reach what the engine could run.
	roomyStretch = 2.0
	// tightenEvery: the saturated verdict cuts the cap at most this often
	// (alerts.resolve_after's default: one cut per saturation incident).
	tightenEvery = time.Minute

	// ttftKeep: first tokens judged at most, the latest of those admitted
	// since the cap last changed. They are kept across windows: long
	// prompts reach an engine a couple a second, so a window of a second
	// rarely held the three that judge the p90, and the cap grew past the
	// objective unjudged.
	ttftKeep = 100
	// ttftMin first tokens judge the cap (slow): the p90 of fewer is one
	// unlucky prompt.
	ttftMin = 5

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
//   - the engine's own queue (its waiting gauge by its profile, read while
//     requests are in flight): a continuous-batching engine starts every
//     request it has room for at once, so anything waiting is work the cap
//     let in beyond the engine's batch or KV capacity. That work is better
//     off in vigil's queue: bounded, newest first, dropped when its client
//     leaves, answered with an honest Retry-After. Except long prompts
//     waiting their turn at the step's token budget on an engine with
//     seats and KV cache for them (prefillBacklog: its KV usage, its batch
//     against engine_max_seqs, its prompt-token and first-token counters):
//     that queue is the engine at full prefill, up to the seats still free;
//   - upstream time to first byte of streamed answers (their TTFT) against
//     ttft_target, judged at the 90th percentile: latency rises with the
//     batch (a bigger batch means slower steps and larger prefill waves), so
//     below the engine's capacity this is what bounds the cap when the
//     objective is tight;
//   - the mean service time S of successful streamed answers, or plain ones
//     without an announced timeout (admission, once the client's whole body
//     is in, to last byte; by Little's law S = N/X for N in flight
//     completing X a second), estimated every serviceSamples answers,
//     against its decaying minimum for answers of like size (sizeShift):
//     below the engine's knee a bigger batch barely slows each answer, past
//     it S grows in proportion to N while X stays flat. This is what stops
//     the cap when the engine starts every request it gets (chunked
//     prefill: no queue to read) and only gets slower;
//   - streams under an objective, which that knee does not judge: the
//     throughput each level of in flight completes (knee.go), where a
//     level well above another completes no more;
//   - plain answers whose client announced its timeout: the deadline
//     ceiling (deadlineCeiling), the most in flight at which the slowest 1%
//     still finish within the timeout;
//   - upstream failures (5xx, refused, reset).
//
// The law: congestion (the engine's queue, see queueShare; p90 over the
// target; S over the knee, the larger of 3*Smin and Smin + 50 ms; the cap
// over the deadline ceiling; any failure) multiplies the cap by the tightest
// of target/p90, knee/S, ceiling/cap and 0.9, and the engine's queue brings it down to
// the requests the engine runs, never below half of itself (each S estimate is used once: it spans answers admitted
// before the last change too, since answers as long as S finish only S after
// it); otherwise, when demand filled the cap, answers are flowing, the p90
// is within 80% of the target and S within 80% of the knee,
// the cap grows: by x1.25 a window until the engine first queues, or while
// the deadline ceiling bounds it (never past it; past twice it while the
// engine's queue is empty and the ceiling comes from lighter load), and otherwise by
// turnoverGain per answer finished; while the engine's gauges are readable,
// only on a window that read them. TTFT and failures count only for
// requests admitted after the last change, so each change is judged by its
// own effect.
type autoLimit struct {
	limit   float64
	probing bool
	target  time.Duration // ttft_target as configured (autoObjective: auto); see gate.objective

	lastChange time.Time
	winStart   time.Time
	ttfts      ttftRing // streamed answers admitted after lastChange
	samples    int      // answers finished or first bytes seen since lastChange
	finished   int      // answers finished this window, whenever admitted
	drops      int
	gauges     int
	waiting    float64 // sums over gauges
	running    float64
	gaugeAt    time.Time // last reading of the engine's gauges
	// The engine's load beyond its queue (see prefillMeter.backlog): KV
	// usage summed over the window's readings that had it.
	kvSum float64
	kvN   int
	// prefill follows the engine's prompt-token and first-token counters
	// and knows its seats (see prefillMeter).
	prefill prefillMeter
	// gate is the first-token limit, which answers for TTFT while it can
	// (see firstTokenGate).
	gate firstTokenGate
	// backlog: the last window read the engine's queue as a prefill
	// backlog of long prompts on an engine with room (see tighten).
	backlog bool
	demand  bool
	// streams: streamed answers have been seen, so the probing can wait
	// for their first tokens.
	streams bool
	// hold stops growth (the watchdog says the engine is saturated).
	hold bool
	// tightened is when the saturated verdict last cut the cap.
	tightened time.Time

	// Service time (admission to the answer's end) of every successful
	// answer, whenever admitted: svcSum/svcN until serviceSamples, then
	// svc is the estimate, fresh until the law has used it once. svcSize*
	// are the answers' mean sizes (answerSize): of the estimate being
	// built, and of the one that set the minimum.
	svcSum     float64
	svcN       int
	svc        float64
	svcFresh   bool
	svcMin     float64
	svcMinAt   time.Time
	svcSizeSum float64
	svcMinSize float64
	// svcStreamN counts the streamed answers of the estimate being
	// built; svcStreamed: most of the last estimate's were streamed.
	svcStreamN  int
	svcStreamed bool
	// judged counts the answers judged by their deadline since the last
	// one that fed the service time: at serviceSamples the estimate no
	// longer describes the traffic and is dropped (see observeDone).
	judged int

	// Unary answers with an announced deadline: a ring of each answer's
	// time in the engine / (its client's timeout x the requests in flight
	// beside it). See deadlineCeiling.
	dl     []dlSample
	dlNext int

	// start: the engine's own seat limit (start.go).
	start startState

	// streamKnee: the throughput knee for streams (knee.go); kneeHit: it
	// set a ceiling since the last window.
	streamKnee throughputKnee
	kneeHit    bool

	// trace, when set, is told every control step (trace.go).
	trace func(Step)
}

func newAutoLimit(target time.Duration, seats int, now time.Time) *autoLimit {
	a := &autoLimit{target: target, prefill: newPrefillMeter(seats)}
	a.reset(now)
	return a
}

// reset forgets the evidence and probes again: used after an engine
// restart, whose capacity may differ from the old one.
func (a *autoLimit) reset(now time.Time) {
	defer func(trace func(Step)) { a.trace = trace }(a.trace) // the tracer stays
	*a = autoLimit{limit: autoInitial, probing: true, target: a.target, hold: a.hold,
		prefill: newPrefillMeter(a.prefill.seats), gate: newFirstTokenGate(a.target, now),
		lastChange: now, winStart: now, start: a.start.kept()}
	a.limit = a.start.bound(a.startLimit())
}

// cap is the current limit as a request count.
func (a *autoLimit) cap() int { return int(math.Round(a.limit)) }

// markDemand notes that a request found the cap full.
func (a *autoLimit) markDemand() { a.demand = true }

// observeTTFT feeds a streamed answer's upstream time to first byte.
func (a *autoLimit) observeTTFT(admitted time.Time, ttft time.Duration, now time.Time) bool {
	// Until the engine's counters tell the prompts short, the first-token
	// limit judges them as long: growths passed on the short prompts'
	// floor in the first second of a fast engine, before two readings had
	// come, and the limit then took most of a run to come back down.
	a.gate.long = !a.prefill.short()
	a.gate.prefilled = a.prefill.prefilled()
	a.streams = true
	gated := a.gate.observe(admitted, ttft, now, a.cap())
	if gated && a.trace != nil {
		j := a.gate.judged
		a.trace(Step{At: now, Was: a.limit, Cap: a.limit, Gate: a.gate.bound(), Objective: a.gate.objective(),
			P90: j.p90, Mean: j.mean, TTFTs: j.n,
			Turn: a.gate.turn, LeanTurn: a.gate.leanTurn, Prefilled: a.gate.prefilled, Why: j.why})
	}
	if admitted.Before(a.lastChange) {
		return gated
	}
	a.ttfts.add(ttft)
	a.samples++
	return a.maybeUpdate(now) || gated
}

// observeDone feeds a successful answer (pacing evidence: the cap was
// used). deadline is its client's announced timeout (0: none): a unary
// answer with one is judged against it; any other feeds the knee. inFlight
// is the number of requests in flight while it ran, itself included; size
// its work for the engine (answerSize).
func (a *autoLimit) observeDone(admitted, now time.Time, deadline time.Duration, streamed bool, inFlight, size int) bool {
	if deadline > 0 && !streamed {
		n := max(1, inFlight)
		a.observeDeadline(dlSample{r: now.Sub(admitted).Seconds() / deadline.Seconds() / float64(n), n: n})
		// When the answers that fed the service time are replaced by
		// answers judged by their deadline (a route's timeout learned
		// mid-run, issue 17), no new estimate comes to lift the last one,
		// and an estimate from a burst past the knee held the cap at its
		// floor for good: drop it, the deadline ceiling rules.
		if a.judged++; a.judged >= serviceSamples {
			a.svc, a.svcFresh = 0, false
			a.svcSum, a.svcSizeSum, a.svcN = 0, 0, 0
		}
	} else {
		a.judged = 0
		a.observeService(now.Sub(admitted), size, streamed, now)
		if streamed && a.streamKnee.observe(now.Sub(admitted), inFlight, size, now) > 0 {
			a.kneeHit = true
		}
	}
	a.finished++
	if admitted.Before(a.lastChange) {
		return false
	}
	a.samples++
	return a.maybeUpdate(now)
}

// answerSize is an answer's work for the engine in decode steps: its
// output tokens plus its prompt's share of prefill steps, at least 1.
func answerSize(promptTokens, outputTokens int) int {
	return max(1, max(0, outputTokens)+max(0, promptTokens)/promptPerStep)
}

// observeService accumulates service times into an estimate and keeps its
// decaying minimum, of answers of like size: an estimate of answers more
// than sizeShift times larger or smaller on average than those that set
// the minimum starts a new one (as the first estimate does), so the
// minimum is never that of another kind of request.
func (a *autoLimit) observeService(d time.Duration, size int, streamed bool, now time.Time) {
	a.svcSum += d.Seconds()
	a.svcSizeSum += float64(max(1, size))
	a.svcN++
	if streamed {
		a.svcStreamN++
	}
	if a.svcN < serviceSamples {
		return
	}
	a.svc = a.svcSum / float64(a.svcN)
	sz := a.svcSizeSum / float64(a.svcN)
	a.svcStreamed = 2*a.svcStreamN > a.svcN
	a.svcSum, a.svcSizeSum, a.svcN, a.svcStreamN = 0, 0, 0, 0
	a.svcFresh = true
	if a.svcMin > 0 {
		a.svcMin *= math.Exp2(now.Sub(a.svcMinAt).Seconds() / serviceMinDoubling.Seconds())
	}
	if a.svcMin == 0 || a.svc < a.svcMin || sz > sizeShift*a.svcMinSize || sz*sizeShift < a.svcMinSize {
		a.svcMin, a.svcMinSize = a.svc, sz
	}
	a.svcMinAt = now
}

// kneeJudges reports whether the service time's knee judges the cap. It
// judges answers whose only evidence is their length. A stream whose
// first token is judged against an objective has better: its TTFT says
// when the engine stops starting work in time, and its engine's queue
// when it stops starting it at all. Its service time is the engine's
// per-token pace, which a decode-bound batch trades for throughput up to
// the engine's own max-num-seqs: held to a multiple of the lightest
// load's, the cap would sit far under the batch that serves every first
// token in time. Figures: bench/README.md, "Figures once kept in code
// comments", the knee does not judge objective-judged streams.
func (a *autoLimit) kneeJudges() bool {
	return !(a.svcStreamed && a.gate.objective() > 0)
}

// observeDeadline adds one answer's share of its client's timeout per
// request in flight.
func (a *autoLimit) observeDeadline(r dlSample) {
	if len(a.dl) < deadlineSamples {
		a.dl = append(a.dl, r)
	} else {
		a.dl[a.dlNext] = r
		a.dlNext = (a.dlNext + 1) % deadlineSamples
	}
}

// deadlineCeiling is the most requests in flight at which unary answers
// still finish within deadlineShare of their clients' timeouts at the 99th
// percentile, or 0 while unknown. Each answer took t = d x n x r (timeout
// d, n the mean in flight while it ran); past an engine's knee its
// throughput X is flat, so by Little's law t grows in proportion to n
// (t = n/X per mean request, the tail in proportion), and r is what one
// more request in flight costs. Below the knee t barely grows with n, so r
// overstates that cost and the ceiling errs low. Normalised by n, answers
// measured at any cap are comparable: the ceiling needs no step-by-step
// probing of the tail, which shows only minutes after each change.
//
// near reports whether the ceiling comes from answers that ran beside at
// least nearShare of the cap in force. Only those judge the cap (cut it);
// answers from lighter load (a quiet hour before a surge: a long answer
// beside 3 others reads as a ceiling of 9) only bound its growth, and
// loosely while the engine has room (see maybeUpdate).
func (a *autoLimit) deadlineCeiling() (ceiling float64, near bool) {
	if len(a.dl) < deadlineMinSamples {
		return 0, false
	}
	nearN := 0
	for _, d := range a.dl {
		if float64(d.n) >= nearShare*a.limit {
			nearN++
		}
	}
	near = nearN >= deadlineMinSamples
	s := make([]float64, 0, len(a.dl))
	for _, d := range a.dl {
		if !near || float64(d.n) >= nearShare*a.limit {
			s = append(s, d.r)
		}
	}
	slices.Sort(s)
	return deadlineShare / s[min(len(s)-1, len(s)*99/100)], near
}

// dlSample is one answer for the deadline ceiling: its time in the engine
// over (its client's timeout x n), n the requests in flight beside it.
type dlSample struct {
	r float64
	n int
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

// observeLoad feeds one scrape of the engine's load.
func (a *autoLimit) observeLoad(g EngineLoad, now time.Time) bool {
	a.gauges++
	a.gaugeAt = now
	a.waiting += g.Waiting
	a.running += g.Running
	if g.KVUsage >= 0 {
		a.kvSum += g.KVUsage
		a.kvN++
	}
	a.prefill.note(g, now)
	return a.maybeUpdate(now)
}

// maybeUpdate closes the window when it holds enough evidence and applies
// the control law; it reports whether the cap changed. The steps are in
// law.go.
func (a *autoLimit) maybeUpdate(now time.Time) bool {
	if !a.windowDone(now) {
		return false
	}
	ev := a.evidence(now)
	a.endProbing(ev)
	old := a.limit
	var why string
	if ev.congested() {
		a.cut(ev)
		why = ev.why()
	} else {
		why = a.grow(ev, now)
	}
	grown := a.limit
	a.boundGrowth(ev, old)
	a.settle(old)
	if a.limit < grown && a.limit <= old {
		why = "held: at a ceiling"
	}
	a.step(ev, old, why, now)
	return a.closeWindow(old, now)
}

// tighten is the watchdog's "saturated" verdict: the engine's own queue is
// deep although the evidence here has not shown it (traffic that bypasses
// the limiter, no readable metrics). Cut once and stop probing. A queue the
// last window read as long prompts waiting their turn at the token budget,
// on an engine with seats and KV cache for them (backlog), is no such
// evidence: the watchdog counts waiting requests, and with 12,000-token
// prompts that count is the engine at full prefill, so the cap stays.
//
// One cut per tightenEvery: with the limiter holding the engine's queue near
// the watchdog's saturated_waiting, the verdict flips every second or two,
// and a cut per flip took the cap down a quarter each time.
func (a *autoLimit) tighten(now time.Time) {
	if a.backlog {
		a.probing = false
		return
	}
	if !a.tightened.IsZero() && now.Sub(a.tightened) < tightenEvery {
		a.probing = false
		return
	}
	a.tightened = now
	a.limit = max(autoMin, a.limit*0.75)
	a.probing = false
	a.lastChange = now
	a.demand = false
	a.ttfts = a.ttfts[:0]
}
