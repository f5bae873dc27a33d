package core

import (
	"testing"
	"time"
)

// The SDK's moderate overload (issue 41): 12,000-token prompts (2,000 of
// them a cached prefix), the first-token limit letting them through in
// pairs, so the first tokens' p90 sits near the objective (twice a lone
// prefill) whatever the cap. The cap held there at 16 for a whole run
// while the engine ran 200 straight. It grows when a lone prefill takes
// what it took at light load (the streams in flight do not slow first
// tokens), and holds when the batch has slowed it.
func TestFirstTokensNearTheObjectiveHoldTheCapOnlyWhereItsBatchSlowsThem(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const lean = 334 * time.Millisecond // a lone prefill of 10,000 tokens at light load
	for _, tc := range []struct {
		name string
		turn time.Duration // a lone prefill now
		grow bool
	}{
		{"a lone prefill as at light load: the pairs set the p90, the cap grows", 350 * time.Millisecond, true},
		{"a lone prefill slowed by the batch: the cap holds", 450 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAutoLimit(autoObjective, 0, t0)
			a.limit, a.probing = 16, false
			a.gate.limit = 2
			a.gate.turn = tc.turn.Seconds()
			a.gate.leanTurn = lean.Seconds() / 10000
			at := t0
			var prompt, first, cached float64
			read := func() {
				prompt, first, cached = prompt+2*12000, first+2, cached+2*2000
				a.observeLoad(EngineLoad{Running: 16, KVUsage: 0.1, PromptTokens: prompt, FirstTokens: first, CachedTokens: cached}, at)
			}
			read()
			at = at.Add(250 * time.Millisecond)
			read()
			a.markDemand()
			// A pair's first tokens: 600 ms, within the 668 ms objective
			// but past its growth band (534 ms); answers finish.
			for i := range windowMinSamples {
				at = at.Add(15 * time.Millisecond)
				a.observeTTFT(at, 600*time.Millisecond, at)
				a.observeDone(at.Add(-10*time.Second), at, 0, true, 16, answerSize(12000, 300))
				if i%5 == 4 {
					read()
				}
			}
			if obj := a.gate.objective(); obj < 0.66 || obj > 0.67 {
				t.Fatalf("objective %.3f s, want 0.668 (twice the light-load prefill)", obj)
			}
			if grew := a.cap() > 16; grew != tc.grow {
				t.Errorf("cap %d after first tokens of 600 ms at a lone prefill of %v (%v at light load); want growth %v",
					a.cap(), tc.turn, lean, tc.grow)
			}
		})
	}
}
