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

// familyCheck is, per cost model, what
// TestVigilsDefaultsKeepGoodputOnEveryCostModel judges vigil's defaults
// against: the fixed caps run beside them (the same arrivals) and the
// share of the best one's goodput they must reach.
type familyCheck struct {
	caps  []int
	floor float64
}

// familyChecks: 8 and 32 where the family's best fixed cap is 8. On
// decode-bound the best is 256, the engine's own max-num-seqs, where it
// starts every stream it runs within the objective (693 of 694 in the
// family run, bench/README.md): no cap or law serves more, so vigil's
// defaults are held to parity less the noise (1.00x there). big-prefix's
// best is 128 (1.14x in the family run); its floor is 0.9, as before the
// scale fix: CI runs read 0.99-1.14x against 64, the old defaults
// 0.25-0.49x. Those two run their best cap only: at the token rate this
// machine carries (familySetup) an arm of theirs takes 35-45 s of wall
// time. Elsewhere vigil's defaults reach the best at least (1.1x or more
// in the family runs; a 90 s window is noisier than their 5 min).
var familyChecks = map[string]familyCheck{
	"default": {[]int{8, 32}, 1}, "prefill-bound": {[]int{8, 32}, 1}, "kv-bound": {[]int{8, 32}, 1},
	"fast10": {[]int{8, 32}, 1}, "fast20": {[]int{8, 32}, 1}, "slow10": {[]int{8, 32}, 1}, "slow20": {[]int{8, 32}, 1},
	"big-prefix":   {[]int{128}, 0.9},
	"decode-bound": {[]int{256}, 0.9},
}

// familyLongWindow: the models that run the family's own 5 min window.
// Those whose best fixed cap is 64 or more: their first-token limit grows
// over prompts that share a step one growth at a time and holds 30 s
// after one that did not pay, so 90 s judged mostly its start (big-prefix:
// limit 1.1 on average and 1.05x the best fixed cap in 90 s, 3-7 and 1.31x
// over 5 min). And the fast and slow ones, whose 90 s is 3 s of wall time
// an arm (slow10 scores some 90 streams in it): a CI run read slow10 at
// 0.91x and fast20 at 1.03x where the family runs read 1.51-1.85x.
var familyLongWindow = map[string]bool{"decode-bound": true, "big-prefix": true,
	"fast10": true, "fast20": true, "slow10": true, "slow20": true}

// TestVigilsDefaultsKeepGoodputOnEveryCostModel (issue #28) runs, on each
// engine of enginesim's family, fixed caps and vigil's defaults
// (automatic cap, first-token limit) on the same arrivals at 2x the
// engine's capacity, time-scaled like bench/goodput -workload family but
// with a 90 s window (engine time of the default model, divided by the
// model's speed; 5 min on familyLongWindow's), and checks that the automatic cap's goodput lands in
// the band the best fixed cap sets (familyChecks).
func TestVigilsDefaultsKeepGoodputOnEveryCostModel(t *testing.T) {
	testinfra.Alone(t)
	testinfra.Long(t, "runs the simulated engine of every cost model")
	o := options{seed: 1, load: 2, limiterTime: harness.TimeClock,
		long: longOptions{scale: 30, window: 90 * time.Second, objective: 690 * time.Millisecond}}
	var summary []string
	for _, m := range enginesim.CostModels() {
		t.Run(m.Name, func(t *testing.T) {
			check, ok := familyChecks[m.Name]
			if !ok {
				t.Fatalf("cost model %s has no familyChecks entry", m.Name)
			}
			mo := o
			if familyLongWindow[m.Name] {
				mo.long.window = 300 * time.Second
			}
			f := mo.familySetup(m)
			run := func(a arm) result {
				r, err := runArm(context.Background(), mo, f.spec, a, f.rate, f.window)
				if err != nil {
					t.Fatalf("arm %s: %v", a.name, err)
				}
				r.score(f.objective, f.window)
				return r
			}
			var best result
			var fixed []string
			for _, n := range check.caps {
				r := run(arm{name: fmt.Sprintf("cap %d", n), cap: n})
				fixed = append(fixed, fmt.Sprintf("cap %d %.3f/s", n, r.goodput))
				if r.goodput > best.goodput {
					best = r
				}
			}
			if best.goodput == 0 {
				t.Fatalf("no fixed cap scored: the objective %v is out of the engine's reach", f.objective)
			}
			auto := run(arm{name: "vigil defaults"})
			line := fmt.Sprintf("%s: %s; vigil defaults %.3f/s = %.2fx the best fixed cap (in flight %d, first-token limit %.1f on average)",
				m.Name, strings.Join(fixed, ", "), auto.goodput, auto.goodput/best.goodput, auto.meanInFlight, auto.meanFirstToken)
			summary = append(summary, line)
			t.Log(line)
			if ratio := auto.goodput / best.goodput; ratio < check.floor {
				t.Errorf("vigil's defaults reached %.2fx the best fixed cap's goodput, want %.2fx at least", ratio, check.floor)
			}
		})
	}
	t.Logf("summary:\n%s", strings.Join(summary, "\n"))
}
