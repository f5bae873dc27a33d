package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/simclient"
	"github.com/vigil-dev/vigil/util/humanize"
)

// The longprompt workload (issue #17): the call shape of the paper's
// experiment instead of chat. Streamed /v1/completions whose prompts are
// 12,000 ± 1,200 tokens (uniform), the first 2,000 of them a prefix every
// call shares (a system prompt: the engine's prefix cache serves it), and
// lognormal answers of median 300 tokens. Clients send no deadline header
// (X-Stainless-Timeout) and never retry; they have no timeout of their own
// either, so every stream admitted is read to its end, however late.
const (
	longPromptMean, longPromptSpread = 12000, 1200
	longPrefix                       = 2000
	longPrefixID                     = "system-prompt"
	longAnswerMedian, longAnswerSig  = 300, 0.5
	longAnswerMax                    = 1200
)

// longOptions are the longprompt workload's flags.
type longOptions struct {
	scale     float64
	window    time.Duration
	objective time.Duration // TTFT objective, engine time
}

// longCall draws one call of the longprompt workload.
func longCall(rng *rand.Rand) simclient.SimCall {
	return simclient.SimCall{
		Prompt:   longPromptMean - longPromptSpread + rng.IntN(2*longPromptSpread+1),
		Prefix:   longPrefix,
		PrefixID: longPrefixID,
		Output:   harness.LogNormal(rng, longAnswerMedian, longAnswerSig, longAnswerMax),
	}
}

func (o options) longSpec() spec {
	// The zero policy: one attempt, no timeout, so no X-Stainless-Timeout.
	return spec{name: "longprompt", scale: o.long.scale, call: longCall}
}

// longCapacity is the engine's capacity for the workload's mean call, in
// calls per engine second.
func longCapacity(scale float64) (c, meanAnswer float64) {
	meanAnswer = harness.MeanLogNormal(longAnswerMedian, longAnswerSig, longAnswerMax)
	c = enginesim.MeasureCapacity(engineConfig(scale), enginesim.Workload{
		PromptTokens: longPromptMean, PrefixTokens: longPrefix, OutputTokens: int(meanAnswer + 0.5)})
	return c, meanAnswer
}

func longExperiment(ctx context.Context, o options, stdout, stderr io.Writer) error {
	c, meanAnswer := longCapacity(o.long.scale)
	fmt.Fprintf(stdout, "Capacity C (enginesim.MeasureCapacity, %d-token prompts with a %d-token shared prefix, %.0f-token mean answer): %.2f calls/s (engine time); scale %g\n",
		longPromptMean, longPrefix, meanAnswer, c, o.long.scale)
	fmt.Fprintf(stdout, "Window: %v at %.1f C (%.2f calls/s), streamed, no retries, no client timeout, no deadline header; TTFT objective %v\n\n",
		o.long.window, o.load, o.load*c, o.long.objective)
	list := []arm{{name: "ungated", cap: -1}}
	for _, n := range o.caps {
		list = append(list, arm{name: fmt.Sprintf("cap %d", n), cap: n})
	}
	list = append(list, arm{name: "vigil defaults (automatic cap)"})
	if o.sloArm {
		// Not a default: the cap's law told the objective, as on chat.
		list = append(list, arm{name: fmt.Sprintf("vigil, automatic cap, ttft_target %v", o.long.objective),
			ttftTarget: o.long.objective})
	}
	rs, err := runArms(ctx, o, o.longSpec(), list, o.load*c, o.long.window, o.long.objective, stderr)
	if err != nil {
		return err
	}
	printIssueTable(stdout, rs, o.long.window)
	for _, r := range rs {
		if r.limiter != "" {
			fmt.Fprintf(stdout, "%s limiter counters: %s\n", r.arm.name, r.limiter)
		}
	}
	return nil
}

// printIssueTable prints the arms in the columns of issue #17's table, with
// each arm's goodput against the best fixed cap of the same run.
func printIssueTable(w io.Writer, rs []result, window time.Duration) {
	best := bestFixed(rs)
	t := humanize.Table{Header: []string{"arm", "goodput/s", "vs best fixed cap", "completed", "within SLO",
		"rejected", "TTFT p50", "TTFT p99", "mean in-flight", "max cap"}}
	for _, r := range rs {
		ratio := "n/a"
		if best != nil && best.goodput > 0 {
			ratio = fmt.Sprintf("%.2fx", r.goodput/best.goodput)
		}
		inflight, maxCap := "", ""
		if r.arm.cap >= 0 {
			inflight, maxCap = strconv.Itoa(r.meanInFlight), strconv.Itoa(r.maxCap)
		}
		t.Add(r.arm.name, fmt.Sprintf("%.3f", r.goodput), ratio, r.delivered, r.good, r.rejected,
			roundTTFT(r.p50), roundTTFT(r.p99), inflight, maxCap)
	}
	t.Print(w)
	if best != nil {
		fmt.Fprintf(w, "Best fixed cap: %s (%.3f/s). Goodput: streams completed with TTFT within the objective per second of the %v window.\n",
			best.arm.name, best.goodput, window)
	}
}

// roundTTFT keeps three significant figures or so of a TTFT.
func roundTTFT(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}
