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

// familyCheck is, per cost model, what TestVigilsDefaultsKeepGoodputOnEveryCostModel
// asserts: whether the arm judged is vigil told the objective
// (ttft_target) instead of its defaults, and the share of the best fixed
// cap's goodput (caps 8 and 32, same run; 64 too for a told arm) it must
// reach. On decode-bound and big-prefix the defaults' 2 s target lets the
// cap trade first tokens past the 0.69 s objective for throughput (by its
// own target rightly; docs/design.md, the objective vigil is told): there
// the defaults are run and reported, and vigil told the objective judged,
// against caps up to 64, the best fixed cap of the family run.
type familyCheck struct {
	told  bool
	floor float64
}

// defaultsJudged: vigil's defaults at the best fixed cap at least.
var defaultsJudged = familyCheck{floor: 1}

var familyChecks = map[string]familyCheck{
	"default": defaultsJudged, "prefill-bound": defaultsJudged, "kv-bound": defaultsJudged,
	"fast10": defaultsJudged, "fast20": defaultsJudged, "slow10": defaultsJudged, "slow20": defaultsJudged,
	"decode-bound": {told: true, floor: 1},
	// One run of this short form gave big-prefix 1.05x told the objective
	// (1.35x in both family runs): the floor leaves room for the noise of
	// a 90 s window.
	"big-prefix": {told: true, floor: 0.9},
}

// TestVigilsDefaultsKeepGoodputOnEveryCostModel (issue #28) runs, on each
// engine of enginesim's family, fixed caps and vigil's defaults
// (automatic cap, first-token limit) on the same arrivals at 2x the
// engine's capacity, time-scaled like bench/goodput -workload family but
// with a 90 s window (engine time of the default model, divided by the
// model's speed), and checks that the automatic cap's goodput lands in
// the band the best fixed cap sets (familyChecks).
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
			check, ok := familyChecks[m.Name]
			if !ok {
				t.Fatalf("cost model %s has no familyChecks entry", m.Name)
			}
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
			caps := []int{8, 32}
			if check.told {
				caps = append(caps, 64)
			}
			for _, n := range caps {
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
			judged, what := auto, "vigil's defaults"
			if check.told {
				told := run(arm{name: "vigil told the objective", ttftTarget: time.Duration(float64(f.objective) * m.Speed)})
				line += fmt.Sprintf("; told ttft_target %v: %.3f/s = %.2fx (in flight %d)",
					f.objective, told.goodput, told.goodput/best.goodput, told.meanInFlight)
				judged, what = told, "vigil told the objective"
			}
			summary = append(summary, line)
			t.Log(line)
			if ratio := judged.goodput / best.goodput; ratio < check.floor {
				t.Errorf("%s reached %.2fx the best fixed cap's goodput, want %.2fx at least", what, ratio, check.floor)
			}
		})
	}
	t.Logf("summary:\n%s", strings.Join(summary, "\n"))
}
