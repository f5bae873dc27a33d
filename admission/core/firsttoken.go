package core

import (
	"math"
	"slices"
	"time"
)

// The first-token limit: how many streams may await their first token at
// once (admitted, no byte of the answer yet). A stream's time to first
// token is, almost all of it, its prompt's prefill, and an engine with
// chunked prefill shares each step's token budget among the prompts it
// prefills: two 12,000-token prompts admitted together each take the time
// of both. The in-flight cap cannot tell a prompt being prefilled from an
// answer being decoded, which costs the others almost nothing; this limit
// can, because the first byte of a stream marks the end of its prefill.
// (What it gained, and on which engines: docs/design.md, the law's
// measurements.)
const (
	// firstTokenInitial: where the limit starts: one prefill at a time,
	// until first tokens show that more come faster.
	firstTokenInitial = 1
	// firstTokenGain: the limit grows by this share of itself per
	// judgement, and by one at least.
	firstTokenGain = 0.25
	// kneeSamples first tokens judge a growth of the limit (its mean
	// TTFT against the one before it).
	kneeSamples = 2 * ttftMin
	// kneeShare: a growth of the limit stays when the rate of first
	// tokens grew by at least this share of the growth (see worth).
	// Twelve-thousand-token prompts on a step budget of 8,192 tokens
	// gain about 0.3 of the ideal from a second prefill beside the first
	// (the second waits for most of the first's steps); prompts that share
	// a step, all of it.
	kneeShare = 0.5
	// kneeHold: after a growth that did not pay off, no growth for this
	// long; a limit held this long probes a step below. It is the hold
	// until the engine's prefill time is known; then see hold.
	kneeHold = 30 * time.Second
	// holdTurns: the hold is this many of the engine's prefill times
	// (turn), holdMin at least. On the engine the law was shaped on a
	// lone 12,000-token prompt takes a third of a second or more, so the
	// hold is kneeHold there; on an engine ten times faster 30 s held the
	// limit for hundreds of judgements, and it missed the knee when the
	// prompts changed; on one twenty times slower 30 s are four prefills,
	// and the limit probed away from its knee about as often as it held
	// it.
	holdTurns = 90
	holdMin   = time.Second
	// impliedShare: a growth of the limit over long prompts stays only
	// when the rate of first tokens its TTFTs imply (limit/mean TTFT) grew
	// by this share of it too (see worth). 12,000-token prompts on a step
	// of 8,192 tokens imply about 1.3x in pairs on any engine: the second
	// waits for most of the first's steps.
	impliedShare = 0.4
	// floorShare and floorShareLong: the TTFT a larger limit may add and
	// still be worth it whatever the rate (see worth) is at most this
	// share of the engine's prefill time (turn), and kneeFloor at most;
	// floorShareLong while the prompts are long (see long). Short prompts
	// share a step and its overhead, so their TTFT grows by a step at
	// most as more go together, and a floor of twice their prefill (the
	// wall 50 ms on the engine the law was shaped on) lets them. A long
	// prompt's prefill is whole steps of its own, a pair's mean TTFT
	// about 1.6x one's, so such a floor would pass any growth.
	floorShare     = 2.0
	floorShareLong = 0.25
	// turnRelax: the engine's prefill time (turn) follows a longer mean
	// TTFT at one stream by this share of the difference per first token
	// (a shorter one sets it at once), so longer prompts or a slower
	// engine are relearned within some fifty first tokens.
	turnRelax = 0.05

	// autoObjectiveFloor and autoObjectiveTurns make the objective of
	// ttft_target: auto (see objective). Over long prompts (longPrompt
	// tokens or more to prefill each, the engine's counters say), what
	// people wait for their first token is the engine's own prefill of
	// them, which grows with the prompt: autoObjectiveTurns of it, as the
	// engine prefills them at light load (leanTurn), so a stream may wait
	// for one prefill ahead of it and no more. At light load, not at the
	// batch the cap makes: a lone prefill beside a batch of long streams
	// takes longer as the batch grows, and an objective that followed it
	// let the cap grow the batch that slowed it. Without a floor in wall
	// time: on an engine twenty times faster 500 ms is twenty such
	// objectives, and the cap ran to the engine's KV limit with first
	// tokens far past them (#43; docs/design.md, the objective).
	// Otherwise the larger of autoObjectiveFloor and autoObjectiveTurns of
	// the engine's prefill time (turn; the floor until it is known). The
	// floor is the one figure here about people, not engines: an
	// interactive first token (MLPerf's interactive scenario asks 450 ms
	// of a 70B model; the paper bench/goodput follows, 689 ms). Below it,
	// twice a short prompt's prefill (a step or two) would hold the batch
	// far under what the engine runs well within any first-token objective
	// people set. Figures: bench/README.md, "Figures once kept in code
	// comments", the floor, and "Goodput past the knee".
	autoObjectiveFloor = 500 * time.Millisecond
	autoObjectiveTurns = 2.0
)

// firstTokenGate is the law of the first-token limit, against the TTFT
// objective (ttft_target): first tokens judged at the 90th percentile of
// the latest ttftKeep streams admitted since the limit last changed, from
// ttftMin of them on. Over the target: the limit shrinks by target/p90 (at
// most by half, at least by a tenth), to one at least. Within growBand of
// it, while a stream waited for the limit (demand): it grows by a quarter,
// one at least, up to the in-flight cap (past it the cap rules), and the
// growth stays only if it paid off (its knee: first tokens came faster by
// half the growth at least, see worth); else back, and no growth for
// kneeHold. Held kneeHold, it probes a step below and stays there unless
// the larger limit proves worth it. It starts at one. No target, no limit.
type firstTokenGate struct {
	limit   float64 // 0: no limit
	target  float64 // seconds: the configured objective (see objective)
	auto    bool    // ttft_target: auto
	ttfts   ttftRing
	changed time.Time
	demand  bool
	// seen counts the first tokens judged since changed; lastAt is when
	// the latest came.
	seen   int
	lastAt time.Time
	// A move of the limit to judge by its knee (worth): moved is +1 after a
	// growth, -1 after a probe down, 0 when none waits; from is the limit
	// before it, fromTTFT and fromRate the mean TTFT and the rate of first
	// tokens there. probeAfter: no growth before it (the last one did not
	// pay off).
	moved                    int
	from, fromTTFT, fromRate float64
	probeAfter               time.Time
	// long: the prompts are long (a step's token budget or more each), so
	// two of them never share a step, or not known to be short; the
	// autoLimit sets it from the engine's counters (prefillMeter.short)
	// before each first token.
	long bool
	// turn is the engine's own prefill time for the prompts it is sent
	// (seconds; 0: unknown): the mean TTFT while one stream at a time
	// awaits its first token, its least value relaxed upward by
	// turnRelax per first token. It sets the pace of the law's hold and
	// floor (see hold, floor).
	turn float64
	// prefilled: the mean prompt tokens the streams' prompts prefill, their
	// cached prefix aside (0: unknown); the autoLimit sets it from the
	// engine's counters. leanTurn is the least prefill time a prefilled
	// token seen at one stream (seconds; 0: unknown): the engine's
	// prefill at light load, for prompts of any length.
	prefilled float64
	leanTurn  float64
	// judged: the last judgement (the control step's trace, trace.go).
	judged judgement
}

// judgement is what the first-token limit last judged by (first tokens'
// p90 and mean in seconds, n of them) and what it did.
type judgement struct {
	p90, mean float64
	n         int
	why       string
}

func newFirstTokenGate(target time.Duration, now time.Time) firstTokenGate {
	g := firstTokenGate{auto: target == autoObjective, changed: now}
	if !g.auto {
		g.target = target.Seconds()
	}
	if target != 0 {
		g.limit = firstTokenInitial
	}
	return g
}

// objective is the TTFT objective in force (seconds; 0: none): the
// configured ttft_target, or with auto autoObjectiveTurns of the engine's
// light-load prefill of the long prompts in flight (see
// autoObjectiveFloor), else the larger of autoObjectiveFloor and
// autoObjectiveTurns of the engine's prefill time (turn; the floor until
// it is known).
func (g *firstTokenGate) objective() float64 {
	if !g.auto {
		return g.target
	}
	if g.prefilled >= longPrompt && g.leanTurn > 0 {
		return autoObjectiveTurns * g.leanTurn * g.prefilled
	}
	return AutoObjective(time.Duration(g.turn * float64(time.Second))).Seconds()
}

// AutoObjective is ttft_target: auto on an engine whose own time to first
// token, one stream at a time, is turn (0: not known).
func AutoObjective(turn time.Duration) time.Duration {
	return max(autoObjectiveFloor, time.Duration(autoObjectiveTurns*float64(turn)))
}

// bound is the limit as a count of streams; 0: none.
func (g *firstTokenGate) bound() int {
	if g.limit == 0 {
		return 0
	}
	return streams(g.limit)
}

// streams is a limit as a count of streams, one at least.
func streams(limit float64) int {
	return max(1, int(limit+1e-9)) // 8 x 0.75 is 6, not 5.999...
}

// atFloor: the limit admits one stream's prefill at a time, or there is
// no limit; TTFT over the target is then no longer the prefill's
// sharing, and the in-flight cap answers for it.
func (g *firstTokenGate) atFloor() bool { return g.limit <= 1 }

// observe feeds a stream's first token (admitted when it went upstream)
// and applies the law; cap is the in-flight cap in force. It reports
// whether the limit changed.
func (g *firstTokenGate) observe(admitted time.Time, ttft time.Duration, now time.Time, cap int) bool {
	if g.limit == 0 || admitted.Before(g.changed) {
		return false
	}
	g.seen++
	g.lastAt = now
	g.ttfts.add(ttft)
	n := len(g.ttfts)
	if n < ttftMin {
		return false
	}
	p90 := g.ttfts.p90Sound()
	mean := g.ttfts.mean()
	if streams(g.limit) == 1 {
		if g.turn == 0 || mean < g.turn {
			g.turn = mean
		} else {
			g.turn += turnRelax * (mean - g.turn)
		}
		if g.prefilled > 0 && (g.leanTurn == 0 || mean/g.prefilled < g.leanTurn) {
			g.leanTurn = mean / g.prefilled
		}
	}
	old := g.bound()
	target := g.objective()
	g.judged = judgement{p90: p90, mean: mean, n: n}
	switch {
	case p90 > target && g.limit > 1:
		g.judged.why = "gate cut"
		g.change(max(1, g.limit*max(0.5, min(0.9, target/p90))), now)
	case n < kneeSamples:
	case g.moved > 0 && !g.worth(g.from, g.limit, g.fromRate, g.rate(), g.fromTTFT, g.ttfts.mean()):
		// Past the knee: back to where the limit came from, and no
		// growth for a while (the mix of prompts may change).
		g.judged.why = "gate back: not worth it"
		g.change(g.from, now)
		g.probeAfter = now.Add(g.hold())
	case g.moved < 0 && g.worth(g.limit, g.from, g.rate(), g.fromRate, g.ttfts.mean(), g.fromTTFT):
		g.judged.why = "gate up again: worth it"
		g.change(g.from, now) // the larger limit was worth it after all
	case g.moved != 0:
		g.moved = 0 // the move stays
	case g.demand && p90 <= growBand*target && g.limit < float64(cap) && !now.Before(g.probeAfter):
		g.judged.why = "gate grew"
		g.move(+1, min(float64(cap), max(g.limit+1, g.limit*(1+firstTokenGain))), now)
	case g.limit > 1 && now.Sub(g.changed) >= g.hold():
		// Held this long: probe below, so that a growth that passed on a
		// lucky judgement (an engine's hiccup in the rate it was judged
		// against) is judged again instead of staying for good.
		g.judged.why = "gate probed down"
		g.move(-1, max(1, g.limit/(1+firstTokenGain)), now)
	}
	return g.bound() != old
}

// hold is how long the limit waits after a growth that did not pay off,
// and how long a limit holds before it probes below. Over long prompts,
// holdTurns of the engine's prefill time, holdMin at least:
// at one stream at a time the evidence of a move (kneeSamples first
// tokens) comes in a number of prefill times, whatever their length, so
// the hold counts in them too. Over short prompts first tokens come at
// the arrivals' pace, not the prefill's, and a hold of 90 prefills (a few
// seconds) let the limit test growths most of the time on an engine
// bound by decode, whose TTFT then doubled; kneeHold stays there.
func (g *firstTokenGate) hold() time.Duration {
	if g.turn <= 0 || !g.long {
		return kneeHold
	}
	return max(holdMin, time.Duration(holdTurns*g.turn*float64(time.Second)))
}

// move changes the limit to limit, to be judged by its knee.
func (g *firstTokenGate) move(dir int, limit float64, now time.Time) {
	from, mean, rate := g.limit, g.ttfts.mean(), g.rate()
	g.change(limit, now)
	g.moved, g.from, g.fromTTFT, g.fromRate = dir, from, mean, rate
}

// worth tells whether the larger of two limits (big over small, with
// their rates of first tokens and mean TTFTs) is worth having: its first
// tokens come faster by at least kneeShare of the growth. While the limit
// is full, by Little's law first tokens come at limit/TTFT a second: for
// prompts that share one engine step TTFT stays as it was and the rate
// grows with the limit; past the step's token budget each prompt added
// delays all the others, TTFT grows in proportion and the rate stays flat.
// A limit the streams did not fill (the cap or the arrivals bound them)
// does not raise the rate either: a growth nobody used goes, since long
// prompts let through in pairs when load rises are what it would cost
// (with the rate taken as limit/TTFT alone, such a growth stayed).
//
// A larger limit whose mean TTFT is longer by less than floor (a share of
// the engine's own prefill time, kneeFloor at most) is worth it whatever
// the rate: that is within an engine step or two, which short prompts pay
// as their batch grows. A floor in wall time alone let long prompts
// through in pairs on an engine ten times faster, where a pair's whole
// prefill is some 26 ms longer than one's.
func (g *firstTokenGate) worth(small, big, smallRate, bigRate, smallTTFT, bigTTFT float64) bool {
	if bigTTFT < smallTTFT+g.floor() {
		return true
	}
	n, m := float64(streams(small)), float64(streams(big))
	if !g.long {
		return bigRate >= smallRate*(1+kneeShare*(m-n)/n)
	}
	// Long prompts: the rate measured must grow by kneeShare of the
	// growth, and the rate the TTFTs imply by Little's law (limit/TTFT) by
	// impliedShare of it. The measured one alone passed pairs of long
	// prompts on a fast engine: one prompt at a time leaves the engine idle
	// between a first token and the next prompt's start (the proxy's round
	// trip, a larger share of a short prefill), which a pair hides, so
	// first tokens came nearly 1.5x as fast while each came 1.6x as late.
	// The implied one alone passes a growth nobody used (see above).
	//
	// At one stream the implied rate is taken from the engine's own
	// prefill time (turn) when that is shorter: the first streams after a
	// probe down wait for the prefills let through at the larger limit,
	// and a lone TTFT measured with them favoured the larger limit.
	if n == 1 && g.turn > 0 {
		smallTTFT = min(smallTTFT, g.turn)
	}
	return bigRate >= smallRate*(1+kneeShare*(m-n)/n) && m*smallTTFT >= n*bigTTFT*(1+impliedShare*(m-n)/n)
}

// floor is the TTFT a larger limit may add and be worth it whatever the
// rate: a share of the engine's own prefill time (turn), kneeFloor at
// most: two prefills' worth for prompts that share a step, a quarter of
// one for long ones (see long). Of the engine's prefill time, not of the
// smaller limit's mean TTFT: a limit grown past the knee has a longer
// mean, which would let the next growth pass on the floor alone.
func (g *firstTokenGate) floor() float64 {
	if g.turn <= 0 {
		return kneeFloor.Seconds()
	}
	share := floorShare
	if g.long {
		share = floorShareLong
	}
	return min(kneeFloor.Seconds(), share*g.turn)
}

// rate is first tokens a second since the limit last changed, to the
// latest of them. Counted from the change, not from the first of them: a
// stall then a burst of first tokens (an engine catching up) would
// otherwise read as a fast rate.
func (g *firstTokenGate) rate() float64 {
	span := g.lastAt.Sub(g.changed).Seconds()
	if span <= 0 {
		return 0
	}
	return float64(g.seen) / span
}

func (g *firstTokenGate) change(limit float64, now time.Time) {
	g.limit = math.Max(1, limit)
	g.changed = now
	g.demand = false
	g.ttfts = g.ttfts[:0]
	g.seen = 0
	g.moved = 0
}

// markDemand: a stream found the limit full while the cap had room.
func (g *firstTokenGate) markDemand() { g.demand = true }

// ttftRing holds the latest ttftKeep first tokens (seconds) that judge a
// limit: the cap's or the first-token limit's.
type ttftRing []float64

func (r *ttftRing) add(ttft time.Duration) {
	if len(*r) == ttftKeep {
		*r = append((*r)[:0], (*r)[1:]...)
	}
	*r = append(*r, ttft.Seconds())
}

// p90 of the ring; 0 when empty.
func (r ttftRing) p90() float64 {
	if len(r) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(r))
	return s[min(len(s)-1, len(s)*9/10)]
}

// p90Sound is the p90 of the ring, but never its slowest first token
// alone: below twenty first tokens the p90 is the slowest, and one late
// prompt is an engine's or a host's hiccup, not the batch's doing. On the
// benchmark's machine a host stall of some 30 ms (10 s of a ten times
// slower engine's time) made one first token of five three times the
// others; judged by it, the cap was cut by half twice and sat at 4-6 for
// the rest of the run (docs/design.md, the cap's first tokens).
func (r ttftRing) p90Sound() float64 {
	if len(r) < 2 {
		return r.p90()
	}
	s := slices.Sorted(slices.Values(r))
	return min(s[min(len(s)-1, len(s)*9/10)], s[len(s)-2])
}

func (r ttftRing) mean() float64 {
	var sum float64
	for _, t := range r {
		sum += t
	}
	return sum / float64(max(1, len(r)))
}
