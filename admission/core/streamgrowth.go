package core

// When first tokens near the objective hold the cap (issue 41, the
// SDK's moderate overload). Over long prompts the first-token limit, not
// the cap, sets a stream's time to first token: it decides how many
// prefills share the engine's steps, and each of them is whole steps of
// its own. The cap adds streams being decoded, which lengthen each step
// by a sequence's cost: on an engine whose steps are dominated by the
// prefill (the default simulated engine, 8,192 prompt tokens a step at
// 31 us against 0.1 ms a sequence) a hundred more streams add a few
// percent to a first token. There a p90 near the objective is the
// limit's pairing of prefills (two 12,000-token prompts take about the
// objective together) or the host's noise, and holding the cap for it
// kept the engine at about 60% of what it finishes: the cap stayed at
// 16-21 through 90 s of 1.5x overload while the engine ran 200 straight
// (figures: bench/README.md, issue 41, the SDK's moderate overload).
//
// batchSlowShare: the cap's batch reads as slowing first tokens once a
// lone prefill takes this much longer than at light load (the gate's
// turn against its leanTurn per token). 1.25 is growBand's inverse: the
// band the objective keeps.
const batchSlowShare = 1.25

// batchSlows reports whether the streams in flight lengthen a first
// token: the prompts are not known to be long (short prompts share steps
// with the decodes, every added stream delays them), the engine's prefill
// time is not known yet, or a lone prefill now takes batchSlowShare of
// its light-load time or more.
func (g *firstTokenGate) batchSlows() bool {
	if !g.long || g.limit == 0 || g.turn <= 0 || g.leanTurn <= 0 || g.prefilled < longPrompt {
		return true
	}
	return g.turn >= batchSlowShare*g.leanTurn*g.prefilled
}
