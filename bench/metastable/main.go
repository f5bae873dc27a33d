// Command metastable runs the "Cancellation Is Not Enough" experiment
// (Zhang and Wang, arXiv:2611.08684) on the simulated engine, time-scaled:
// 120 s at 0.6 C, a 107 s pulse at 2.7 C, a 720 s hold at 0.6 C (engine
// seconds), an open-loop Poisson client whose attempts time out at 120 s and
// are retried 3 times as the OpenAI SDKs retry, against the engine directly
// and through vigil's admission limiter. It prints one table row per arm.
//
//	go run ./bench/metastable [-scale 25] [-arms direct-retry-noabort,vigil] [-timeline] [-curve]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/enginesim"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// The experiment, in engine time.
const (
	warmRate, pulseRate, holdRate = 0.6, 2.7, 0.6 // multiples of C
	warmFor                       = 120 * time.Second
	pulseFor                      = 107 * time.Second
	holdFor                       = 720 * time.Second
	// deliveredWithin is the paper's horizon for "delivered": a call
	// answered more than this after it started does not count. Every call
	// ends well before it (4 attempts x 120 s + 3 waits of at most 60 s).
	deliveredWithin = 840 * time.Second

	promptMean, promptSpread = 12000, 1200 // uniform 12,000 ± 1,200 tokens
	prefixTokens             = 2000        // shared by every prompt
	answerMedian, answerSig  = 300, 0.5    // lognormal answer lengths
	answerMax                = 1200        // cap: 4x the median

	engineKey = "sk-engine-bench"
	clientKey = "sk-client-bench"
)

// phases is the schedule for capacity c (calls per engine second).
func phases(c float64) []harness.Phase {
	return []harness.Phase{
		{Name: "warm", Duration: warmFor, Rate: warmRate * c},
		{Name: "pulse", Duration: pulseFor, Rate: pulseRate * c},
		{Name: "hold", Duration: holdFor, Rate: holdRate * c},
	}
}

// Phase indexes in phases.
const (
	phaseWarm = iota
	phasePulse
	phaseHold
)

type options struct {
	scale     float64
	seed      uint64
	arms      []string
	timeline  bool
	calibrate bool
	curve     bool
	// limiterTime is how the limiter keeps time beside the scaled engine.
	limiterTime harness.TimeMode
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("metastable", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var arms string
	fs.Float64Var(&o.scale, "scale", 25, "engine time runs this many times faster than wall time")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the arrivals and workload (the same for every arm)")
	fs.StringVar(&arms, "arms", "all", "comma-separated arms to run, \"all\" or \"none\" (all: "+strings.Join(armNames(), ",")+
		"; variants: vigil+cap=N+max_queue=N+queue_wait=D+cancel_after=D+retry_ratio=R+fifo+nocoalesce)")
	fs.BoolVar(&o.timeline, "timeline", false, "print each arm's engine (and limiter) state every 60 engine seconds")
	fs.BoolVar(&o.curve, "curve", false, "also measure throughput and latency at fixed in-flight counts (16-256), about 2 minutes")
	fs.BoolVar(&o.calibrate, "calibrate", true, "also find capacity with an open-loop rate ramp on the live engine")
	limiterTime := fs.String("limiter-time", "clock", "how vigil keeps time beside the time-scaled engine: clock (engine-time clock, config as written) or config (wall clock, config durations divided by -scale)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var err error
	if o.limiterTime, err = harness.ParseTimeMode(*limiterTime); err != nil {
		fmt.Fprintf(stderr, "metastable: -limiter-time: %v\n", err)
		return 2
	}
	switch arms {
	case "all":
		o.arms = armNames()
	case "none":
	default:
		for _, a := range strings.Split(arms, ",") {
			if _, ok := findArm(a); !ok {
				fmt.Fprintf(stderr, "metastable: unknown arm %q (have %s)\n", a, strings.Join(armNames(), ", "))
				return 2
			}
			o.arms = append(o.arms, a)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := experiment(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "metastable: %v\n", err)
		return 1
	}
	return 0
}

// engineConfig is the calibrated default engine at the run's scale.
func engineConfig(scale float64, abort bool) enginesim.Config {
	cfg := enginesim.DefaultConfig()
	cfg.Model = "sim-llama-8b"
	cfg.APIKey = engineKey
	cfg.Scale = scale
	cfg.AbortOnDisconnect = abort
	return cfg
}

// workload draws one call of the paper's shape.
func workload(rng *rand.Rand) harness.SimCall {
	return harness.SimCall{
		Prompt:   promptMean - promptSpread + rng.IntN(2*promptSpread+1),
		Prefix:   prefixTokens,
		PrefixID: "shared-system-prompt",
		Output:   harness.LogNormal(rng, answerMedian, answerSig, answerMax),
	}
}

func experiment(ctx context.Context, o options, stdout, stderr io.Writer) error {
	meanAnswer := harness.MeanLogNormal(answerMedian, answerSig, answerMax)
	w := enginesim.Workload{PromptTokens: promptMean, PrefixTokens: prefixTokens, OutputTokens: int(math.Round(meanAnswer))}
	c := enginesim.MeasureCapacity(engineConfig(o.scale, true), w)
	fmt.Fprintf(stdout, "Capacity C (enginesim.MeasureCapacity, %d-token prompts, %d-token prefix, %.0f-token mean answer): %.3f calls/s (engine time)\n",
		w.PromptTokens, w.PrefixTokens, meanAnswer, c)
	if o.calibrate {
		k, err := knee(ctx, o, c, stderr)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Open-loop check on the live engine (scale %g): %s\n", o.scale, k)
	}
	if o.curve {
		if err := curve(ctx, o, c, stdout, stderr); err != nil {
			return err
		}
	}
	if len(o.arms) == 0 {
		return nil
	}
	fmt.Fprintf(stdout, "Schedule: %v at %.1f C, %v pulse at %.1f C, %v hold at %.1f C; scale %g (one arm ~%v of wall time plus its tail); limiter time: %s\n\n",
		warmFor, warmRate, pulseFor, pulseRate, holdFor, holdRate, o.scale,
		(time.Duration(float64(warmFor+pulseFor+holdFor) / o.scale)).Round(time.Second), o.limiterTime)

	var results []armResult
	for _, name := range o.arms {
		a, _ := findArm(name)
		fmt.Fprintf(stderr, "metastable: arm %s ...\n", a.name)
		r, err := runArm(ctx, o, a, c)
		if err != nil {
			return fmt.Errorf("arm %s: %w", a.name, err)
		}
		results = append(results, r)
		fmt.Fprintf(stderr, "metastable: arm %s done in %v: hold delivered %s\n", a.name,
			r.wall.Round(time.Second), harness.Pct(r.m.holdDelivered))
		if o.timeline {
			r.printTimeline(stdout)
		}
	}
	printResults(stdout, results, c)
	return nil
}
