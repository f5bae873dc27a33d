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
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/simclient"
	"github.com/vigil-dev/vigil/util/humanize"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// The experiment, in engine time (harness/paper.go: shared with
// bench/pool).
const (
	warmRate, pulseRate, holdRate = harness.PaperWarmRate, harness.PaperPulseRate, harness.PaperHoldRate
	warmFor                       = harness.PaperWarmFor
	pulseFor                      = harness.PaperPulseFor
	holdFor                       = harness.PaperHoldFor
	deliveredWithin               = harness.PaperDeliveredWithin

	engineKey = "sk-engine-bench"
	clientKey = "sk-client-bench"
)

// phases is the schedule for capacity c (calls per engine second).
func phases(c float64) []harness.Phase { return harness.PaperPhases(c, holdFor) }

// Phase indexes in phases.
const (
	phaseWarm  = harness.PhaseWarm
	phasePulse = harness.PhasePulse
	phaseHold  = harness.PhaseHold
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
	return harness.PaperEngineConfig(scale, abort, engineKey)
}

// workload draws one call of the paper's shape.
func workload(rng *rand.Rand) simclient.SimCall { return harness.PaperCall(rng) }

func experiment(ctx context.Context, o options, stdout, stderr io.Writer) error {
	c, line := harness.PaperCapacity(o.scale)
	fmt.Fprintln(stdout, line)
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
			r.wall.Round(time.Second), humanize.Pct(r.m.holdDelivered))
		if o.timeline {
			r.printTimeline(stdout)
		}
	}
	printResults(stdout, results, c)
	return nil
}
