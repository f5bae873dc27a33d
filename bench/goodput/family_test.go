package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/testinfra"
)

// familyFloor is, per cost model, the share of the best fixed cap's
// goodput (caps 8 and 32, same run) that vigil's defaults must reach in
// TestVigilsDefaultsKeepGoodputOnEveryCostModel: the best fixed cap
// itself, where three runs of the final law all reached 1.15x it or more
// (bench/README.md, goodput, the family in CI). Not asserted:
// decode-bound and big-prefix, which this short run's caps 8 and 32 do
// not judge (their best fixed cap is 64 or 32 and vigil's defaults fall
// well short of it in the family run; the short window also spares
// vigil's cap the growth that costs it there), so they are run and
// reported only.
var familyFloor = map[string]float64{
	"default": 1, "prefill-bound": 1, "kv-bound": 1,
	"fast10": 1, "fast20": 1, "slow10": 1, "slow20": 1,
}

// TestVigilsDefaultsKeepGoodputOnEveryCostModel (issue #28) runs, on each
// engine of enginesim's family, the fixed caps 8 and 32 and vigil's
// defaults (automatic cap, first-token limit) on the same arrivals at 2x
// the engine's capacity, time-scaled like bench/goodput -workload family
// but with a 90 s window (engine time of the default model, divided by
// the model's speed), and checks that the automatic cap's goodput lands
// in the band the best fixed cap sets: familyFloor of it at least.
func TestVigilsDefaultsKeepGoodputOnEveryCostModel(t *testing.T) {
	testinfra.Alone(t)
	if testing.Short() {
		t.Skip("runs the simulated engine of every cost model")
	}
	o := options{seed: 1, load: 2, limiterTime: harness.TimeClock,
		long: longOptions{scale: 30, window: 90 * time.Second, objective: 690 * time.Millisecond}}
	var summary []string
	for _, m := range enginesim.CostModels() {
		t.Run(m.Name, func(t *testing.T) {
			f := o.familySetup(m)
			run := func(a arm) result {
				r, err := runArm(context.Background(), o, f.spec, a, f.rate, f.window)
				if err != nil {
					t.Fatalf("arm %s: %v", a.name, err)
				}
				r.score(f.objective, f.window)
				return r
			}
			var best result
			var fixed []string
			for _, n := range []int{8, 32} {
				r := run(arm{name: fmt.Sprintf("cap %d", n), cap: n})
				fixed = append(fixed, fmt.Sprintf("cap %d %.3f/s", n, r.goodput))
				if r.goodput > best.goodput {
					best = r
				}
			}
			auto := run(arm{name: "vigil defaults"})
			ratio := 0.0
			if best.goodput > 0 {
				ratio = auto.goodput / best.goodput
			}
			line := fmt.Sprintf("%s: %s; vigil %.3f/s = %.2fx the best fixed cap (in flight %d, first-token limit %.1f on average)",
				m.Name, strings.Join(fixed, ", "), auto.goodput, ratio, auto.meanInFlight, auto.meanFirstToken)
			summary = append(summary, line)
			t.Log(line)
			if best.goodput == 0 {
				t.Fatalf("no fixed cap scored: the objective %v is out of the engine's reach", f.objective)
			}
			floor, ok := familyFloor[m.Name]
			switch {
			case !ok:
				t.Logf("%s: not asserted (the law does not reach the best fixed cap there in the family run yet)", m.Name)
			case ratio < floor:
				t.Errorf("vigil's defaults reached %.2fx the best fixed cap's goodput, want %.2fx at least", ratio, floor)
			}
		})
	}
	t.Logf("summary:\n%s", strings.Join(summary, "\n"))
}
