// Command pool runs the overload experiment of bench/metastable (the
// paper's pulse and hold, harness/paper.go) against a pool of simulated
// engines, each behind its own vigil admission limiter, behind one real
// HAProxy: once with round-robin routing and once with the shipped
// key-affine configuration (configs/haproxy/pool.cfg: calls hashed by
// Idempotency-Key on a consistent ring). The load is the single-node
// experiment's times the number of nodes, so each node sees the load of
// one metastable engine; the single-node vigil arm runs in the same process
// as the baseline. It prints one row per arm and the pool arms' ratios to
// the single node.
//
//	go run ./bench/pool [-scale 25] [-nodes 3] [-arms single,round-robin,key-affine] [-quick]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/util/humanize"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const (
	engineKey = "sk-engine-bench"
	clientKey = "sk-client-bench"
)

type options struct {
	scale float64
	seed  uint64
	nodes int
	arms  []arm
	// hold is the hold phase's length (the paper's 720 s; -quick cuts it).
	hold        time.Duration
	limiterTime harness.TimeMode
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pool", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.Float64Var(&o.scale, "scale", 25, "engine time runs this many times faster than wall time")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the arrivals and workload")
	fs.IntVar(&o.nodes, "nodes", 3, "pool members (engine + limiter each) behind HAProxy")
	arms := fs.String("arms", strings.Join(armNames(), ","), "comma-separated arms to run (of "+strings.Join(armNames(), ", ")+")")
	fs.DurationVar(&o.hold, "hold", harness.PaperHoldFor, "length of the hold phase (engine time)")
	quick := fs.Bool("quick", false, "a try-out: hold 240 s instead of 720 s (figures not comparable to metastable's)")
	limiterTime := fs.String("limiter-time", "clock", "how each limiter keeps time beside its time-scaled engine: clock or config (see bench/metastable)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "pool: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *quick {
		o.hold = 240 * time.Second
	}
	var err error
	if o.limiterTime, err = harness.ParseTimeMode(*limiterTime); err != nil {
		fmt.Fprintf(stderr, "pool: -limiter-time: %v\n", err)
		return 2
	}
	if o.arms, err = parseArms(*arms); err != nil {
		fmt.Fprintf(stderr, "pool: -arms: %v\n", err)
		return 2
	}
	switch {
	case o.nodes < 2:
		fmt.Fprintf(stderr, "pool: -nodes %d: a pool needs at least 2\n", o.nodes)
		return 2
	case !(o.scale > 0):
		fmt.Fprintf(stderr, "pool: -scale %v: must be positive\n", o.scale)
		return 2
	case o.hold < time.Minute:
		fmt.Fprintf(stderr, "pool: -hold %v: at least 1m\n", o.hold)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := experiment(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "pool: %v\n", err)
		return 1
	}
	return 0
}

func experiment(ctx context.Context, o options, stdout, stderr io.Writer) error {
	c, line := harness.PaperCapacity(o.scale)
	fmt.Fprintln(stdout, line)
	fmt.Fprintf(stdout, "Schedule per node: %v at %.1f C, %v pulse at %.1f C, %v hold at %.1f C; pool of %d: %d x those rates through HAProxy; scale %g; limiter time: %s\n\n",
		harness.PaperWarmFor, harness.PaperWarmRate, harness.PaperPulseFor, harness.PaperPulseRate, o.hold, harness.PaperHoldRate,
		o.nodes, o.nodes, o.scale, o.limiterTime)
	var results []armResult
	for _, a := range o.arms {
		fmt.Fprintf(stderr, "pool: arm %s (load %s) ...\n", a.name, harness.LoadAvg())
		r, err := runArm(ctx, o, a, c)
		if err != nil {
			return fmt.Errorf("arm %s: %w", a.name, err)
		}
		results = append(results, r)
		fmt.Fprintf(stderr, "pool: arm %s done in %v: hold on time %s, created %.2f x C per node\n", a.name,
			r.wall.Round(time.Second), humanize.Pct(r.f.HoldOnTime), r.f.holdCreated)
	}
	printResults(stdout, results, c)
	return nil
}
