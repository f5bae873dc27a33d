package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/simclient"
	"github.com/vigil-dev/vigil/util/humanize"
)

// The family (issue #28): every arm on each engine of enginesim's cost
// models, the calls each is about, at -load x its own capacity. A model
// n times faster than the default runs at scale/n and for window/n (and
// n times slower at n x scale and window x n), so each arm takes about
// the same wall time while vigil keeps its clock at the engine's wall
// ratio: against vigil's time constants a fast model is fast and a slow
// one slow. A model that streams more tokens an engine second than its
// speed accounts for runs at a lower scale still (familySetup), so the
// machine carries the same events a wall second on every model. The TTFT
// objective scales with the engine's own prefill of the paper's call
// (enginesim.MeasureTTFT against the default engine's): by 1/n for a model
// n times faster, by about 3 for prefill-bound, whose prompts alone take
// longer than the default's objective (the first family run scored every
// arm 0 there). vigil's configured durations (ttft_target, queue waits)
// scale by 1/n, as an operator would set them for that engine; its
// built-in constants do not.

// familyCall draws one call of a model's workload: prompts uniform within
// 10% of the mean, the shared prefix as given, lognormal answers whose
// mean is the workload's.
func familyCall(w enginesim.Workload) func(*rand.Rand) simclient.SimCall {
	const sig = 0.5
	median := float64(w.OutputTokens) / math.Exp(sig*sig/2)
	return func(rng *rand.Rand) simclient.SimCall {
		spread := w.PromptTokens / 10
		c := simclient.SimCall{
			Prompt: w.PromptTokens - spread + rng.IntN(2*spread+1),
			Prefix: w.PrefixTokens,
			Output: harness.LogNormal(rng, median, sig, 4*w.OutputTokens),
		}
		if c.Prefix > 0 {
			c.PrefixID = longPrefixID
		}
		return c
	}
}

// familyObjective is the TTFT objective on the engine cfg: base (the
// default engine's) times the ratio of the two engines' prefill of the
// paper's call, alone and its prefix cached.
func familyObjective(base time.Duration, cfg enginesim.Config) time.Duration {
	ref := enginesim.CostModels()[0].Workload
	own := enginesim.MeasureTTFT(cfg, ref)
	def := enginesim.MeasureTTFT(engineConfig(1), ref)
	return time.Duration(float64(base) * float64(own) / float64(def)).Round(time.Millisecond)
}

// familyRow is one model's summary.
type familyRow struct {
	model                enginesim.CostModel
	best, gateway, vigil *result
	// atObjective is vigil's automatic cap told the objective
	// (ttft_target), as an operator with that SLO sets it; nil without
	// -slo-arm.
	atObjective *result
	capacity    float64
	objective   time.Duration
}

// familySetup is one model's run: its engine, calls, arrival rate, window
// and objective, at the options' scale, window and load.
type familySetup struct {
	spec              spec
	scale, capacity   float64
	rate              float64 // arrivals a second, engine time
	window, objective time.Duration
}

// defaultTokenRate is the default model's answer tokens an engine second
// at capacity, the rate familySetup holds every model to: measured once
// (MeasureCapacity drives the scheduler through thousands of calls).
var defaultTokenRate = sync.OnceValue(func() float64 {
	def := enginesim.CostModels()[0]
	cfg := engineConfig(1)
	def.Apply(&cfg)
	return enginesim.MeasureCapacity(cfg, def.Workload) * float64(def.Workload.OutputTokens)
})

func (o options) familySetup(m enginesim.CostModel) familySetup {
	cfg := engineConfig(1)
	m.Apply(&cfg)
	c := enginesim.MeasureCapacity(cfg, m.Workload)
	// Every model streams as many tokens a wall second, at its capacity,
	// as the default does at -long-scale: each token is an SSE event the
	// engine writes, vigil relays and the client reads, all on this
	// machine. decode-bound (1,200-token answers) and big-prefix (little
	// prefill a call) stream 2.5 and 3.3 times the default's tokens an
	// engine second; at the default's scale the machine, not the engine,
	// made their first tokens late (decode-bound, cap 256: TTFT p50 0.9 s
	// at scale 30, 0.2 s at 10, where the engine's steps put it) and the
	// best fixed cap looked like 128 where it is 256. For the fast and
	// slow models this is the 1/speed rule: their tokens an engine second
	// scale with their speed. vigil keeps engine time (-limiter-time
	// clock), so the scale changes the wall time an arm takes, not what
	// it measures.
	scale := max(1, o.long.scale*defaultTokenRate()/(c*float64(m.Workload.OutputTokens)))
	cfg.Scale = scale
	return familySetup{
		spec:  spec{name: m.Name, scale: scale, call: familyCall(m.Workload), engine: m.Apply, speed: m.Speed},
		scale: scale, capacity: c, rate: o.load * c,
		window:    time.Duration(float64(o.long.window) / m.Speed),
		objective: familyObjective(o.long.objective, cfg),
	}
}

func familyExperiment(ctx context.Context, o options, models []enginesim.CostModel, stdout, stderr io.Writer) error {
	// Against the gateway at its best cap, not at the best queued cap's:
	// with vigil's objective in a queued cap's stream bound the two bests
	// part (decode-bound: queued 32, gateway 64).
	o.allGateways = true
	var rows []familyRow
	for _, m := range models {
		f := o.familySetup(m)
		sp, scale, window, objective, c := f.spec, f.scale, f.window, f.objective, f.capacity
		fmt.Fprintf(stdout, "== model %s: %s\n", m.Name, m.About)
		fmt.Fprintf(stdout, "Capacity C %.3f calls/s of %d-token prompts (%d shared), %d-token mean answers; scale %.3g; window %v at %.1f C; TTFT objective %v\n\n",
			c, m.Workload.PromptTokens, m.Workload.PrefixTokens, m.Workload.OutputTokens, scale, window, o.load, objective)
		list := []arm{{name: "ungated", cap: -1}}
		for _, n := range o.caps {
			list = append(list, arm{name: fmt.Sprintf("cap %d", n), cap: n})
		}
		list = append(list, arm{name: "vigil defaults (automatic cap)"})
		if o.sloArm {
			// ttft_target is a configured duration, which runArm scales by
			// the model's speed: given at the default's pace here, it is
			// the model's objective there.
			list = append(list, arm{name: fmt.Sprintf("vigil, automatic cap, ttft_target %v", objective),
				ttftTarget: time.Duration(float64(objective) * m.Speed), atObjective: true})
		}
		if o.laxArm > 0 {
			lax := time.Duration(o.laxArm * float64(objective))
			list = append(list, arm{name: fmt.Sprintf("vigil, automatic cap, ttft_target %v (lax)", lax),
				ttftTarget: time.Duration(float64(lax) * m.Speed), lax: true})
		}
		rs, err := runArms(ctx, o, sp, list, f.rate, window, objective, stderr)
		if err != nil {
			return fmt.Errorf("model %s: %w", m.Name, err)
		}
		printIssueTable(stdout, rs, window)
		fmt.Fprintln(stdout)
		row := familyRow{model: m, best: bestFixed(rs), gateway: bestGateway(rs), capacity: c, objective: objective}
		for i := range rs {
			switch r := &rs[i]; {
			case r.arm.atObjective:
				row.atObjective = r
			case r.arm.cap == 0 && !r.arm.lax:
				row.vigil = r
			}
		}
		rows = append(rows, row)
	}
	printFamily(stdout, rows)
	return nil
}

// printFamily is the family's summary: vigil's defaults against the best
// fixed cap and the no-queue gateway of the same run, per model.
func printFamily(w io.Writer, rows []familyRow) {
	fmt.Fprintln(w, "== family summary (same-run ratios)")
	t := humanize.Table{Header: []string{"model", "best fixed cap", "goodput/s", "best no-queue gateway", "vigil defaults",
		"vigil / best fixed", "vigil / gateway", "vigil mean in-flight", "vigil mean first-token limit",
		"vigil at the objective", "/ best fixed", "/ gateway", "its mean in-flight"}}
	ratio := func(a, b *result) string {
		if a == nil || b == nil || b.goodput == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2fx", a.goodput/b.goodput)
	}
	gp := func(r *result) string {
		if r == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.3f", r.goodput)
	}
	for _, r := range rows {
		best, inflight, ft := "n/a", "", ""
		if r.best != nil {
			best = r.best.arm.name
		}
		if r.vigil != nil {
			inflight = fmt.Sprint(r.vigil.meanInFlight)
			ft = fmt.Sprintf("%.1f", r.vigil.meanFirstToken)
		}
		objInflight := ""
		if r.atObjective != nil {
			objInflight = fmt.Sprint(r.atObjective.meanInFlight)
		}
		gw := gp(r.gateway)
		if r.gateway != nil {
			gw += fmt.Sprintf(" (cap %d)", r.gateway.arm.cap)
		}
		t.Add(r.model.Name, best, gp(r.best), gw, gp(r.vigil), ratio(r.vigil, r.best), ratio(r.vigil, r.gateway), inflight, ft,
			gp(r.atObjective), ratio(r.atObjective, r.best), ratio(r.atObjective, r.gateway), objInflight)
	}
	t.Print(w)
}
