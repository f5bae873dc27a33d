package core

// Long prompts in pairs while streams wait (issue 41, the SDK's moderate
// overload). An engine with chunked prefill gives a running prefill its
// step budget first (vLLM: running requests, in admission order, before
// any new one), so a second long prompt admitted while one is prefilled
// takes only what the first leaves of its last step: it does not slow the
// first's first token. Its own TTFT, counted from its admission, includes
// its wait for the first's remaining steps; at a limit of one it would
// have waited as long, or longer, in vigil's queue, which no TTFT counts.
// So while streams still wait for the larger limit (its demand), a mean
// TTFT per stream (the implied rate, limit/TTFT) overstates what the
// larger limit costs them, and it held the limit at one prefill at a time
// on the SDK's 12,000-token prompts: the engine idled between a first
// token and the next prompt's arrival (the proxy's round trip, the host's
// scheduling), and vigil admitted fewer calls than the engine finished
// straight. There the rate of first tokens alone judges: what the
// waiting streams get.
//
// pairShare: a growth of the limit over long prompts, full with streams
// waiting, stays when the rate of first tokens grew by this share of the
// growth. Not kneeShare's half: long prompts never share a step, so the
// most a second prefill can add is the engine's idle time between two
// lone prefills and a step's overhead (a tenth to a third of the rate on
// the simulated engine). A tenth keeps a growth that only the noise of ten
// first tokens made (an engine that shares its budget evenly among
// prefills, whose rate does not grow) from passing as often as not.
const pairShare = 0.1

// waitedAt reports whether streams found the larger limit big of a move
// full (it is the limit in force, or the one a probe came down from).
func (g *firstTokenGate) waitedAt(big float64) bool {
	if big == g.limit {
		return g.demand
	}
	return g.moved < 0 && big == g.from && g.fromDemand
}

// pairsWorth tells whether, over long prompts, the larger of two limits
// is worth having while streams wait for it: its rate of first tokens
// (smallRate, bigRate) grew by pairShare of the growth.
func pairsWorth(small, big, smallRate, bigRate float64) bool {
	n, m := float64(streams(small)), float64(streams(big))
	return bigRate >= smallRate*(1+pairShare*(m-n)/n)
}
