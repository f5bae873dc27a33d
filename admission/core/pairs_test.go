package core

import (
	"testing"
	"time"
)

// Over long prompts, a growth of the first-token limit from one to two
// while streams still wait for it is judged by the rate of first tokens
// alone (pairs.go): the second prompt's wait for the first's remaining
// steps is a wait it had in vigil's queue at one. The rows are the
// simulated engine's 12,000-token prompts through the SDK's moderate
// overload: 420 ms alone, one every 520 ms (the engine idle between a
// first token and the next prompt's arrival); in pairs each TTFT about
// 1.5x as long.
func TestLongPromptsInPairsAreJudgedByTheirRateWhileStreamsWait(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name     string
		waited   bool    // streams found the limit of 2 full
		rateGain float64 // first tokens at 2 against 1
		pair     time.Duration
		want     int
	}{
		// Failed before pairs.go: 2 x 520 / 640 is 1.63x implied, under
		// 1.4 x the 1.23x a lone 420 ms prefill implies.
		{"streams wait, 1.25x the rate: the pair stays", true, 1.25, 640 * time.Millisecond, 2},
		{"streams wait, the rate no faster: back to one", true, 1.02, 640 * time.Millisecond, 1},
		{"nobody waits, 1.25x the rate: back to one", false, 1.25, 640 * time.Millisecond, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newFirstTokenGate(autoObjective, t0)
			g.long, g.prefilled = true, 12000
			g.markDemand()
			at := t0
			const lone, every = 420 * time.Millisecond, 520 * time.Millisecond
			for range kneeSamples {
				at = at.Add(every)
				g.observe(at, lone, at, 64)
			}
			if g.bound() != 2 {
				t.Fatalf("limit %d after lone first tokens well within the objective with demand, want 2", g.bound())
			}
			gap := time.Duration(float64(every) / tc.rateGain)
			for range kneeSamples {
				if tc.waited {
					g.markDemand()
				}
				at = at.Add(gap)
				g.observe(at, tc.pair, at, 64)
			}
			if g.bound() != tc.want {
				t.Errorf("limit %d after pairs at %v, %.2fx the rate, want %d", g.bound(), tc.pair, tc.rateGain, tc.want)
			}
		})
	}
}
