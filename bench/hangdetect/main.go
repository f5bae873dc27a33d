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
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-dev/vigil/admission"
	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/simclient"
	"github.com/vigil-dev/vigil/util/humanize"
	"github.com/vigil-dev/vigil/watchdog"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// fixedWindow is the arm auto is compared with: vigil's window before
// hang_after: auto, still its ceiling (hang_after_max), and what auto held
// before issue 37 in every arm but load (one client at a time, the first
// minutes, work around the limiter: bench/README.md). It runs with
// oldInterval, the default interval before issue 37.
const (
	fixedWindow = 3 * time.Minute
	oldInterval = 15 * time.Second
)

// workload is a call shape and how to size the engine's capacity for it.
type workload struct {
	name, desc string
	call       func(*rand.Rand) simclient.SimCall
	body       func(simclient.SimCall) []byte
	mean       enginesim.Workload // the mean call, for MeasureCapacity
}

// Answers for both workloads: lognormal, median 300 tokens, as the
// metastable experiment's (harness.PaperCall).
const answerMedian, answerSigma, answerMax = 300, 0.5, 1200

var meanAnswer = harness.MeanLogNormal(answerMedian, answerSigma, answerMax)

var workloads = []workload{
	{
		name: "chat", desc: "prompts 2,000 ± 1,000 tokens (uniform, no shared prefix)",
		call: func(rng *rand.Rand) simclient.SimCall {
			return simclient.SimCall{Prompt: 1000 + rng.IntN(2001), Output: harness.LogNormal(rng, answerMedian, answerSigma, answerMax)}
		},
		body: body,
		mean: enginesim.Workload{PromptTokens: 2000, OutputTokens: int(meanAnswer + 0.5)},
	},
	{
		name: "longprompt", desc: "prompts 12,000 ± 1,200 tokens (uniform, a 2,000-token prefix shared)",
		call: harness.PaperCall,
		body: body,
		mean: enginesim.Workload{PromptTokens: 12000, PrefixTokens: 2000, OutputTokens: int(meanAnswer + 0.5)},
	},
}

type options struct {
	scale    float64
	load     float64
	reps     int
	warmup   time.Duration
	duration time.Duration
	seed     uint64
	only     string
	arms     string
	battery  bool
	only37   string
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hangdetect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.Float64Var(&o.scale, "scale", 25, "engine time runs this many times faster than wall time")
	fs.Float64Var(&o.load, "load", 1, "offered load as a multiple of the engine's capacity")
	fs.IntVar(&o.reps, "reps", 3, "hangs injected per workload and window (0: skip the detection runs)")
	fs.DurationVar(&o.warmup, "warmup", 90*time.Second, "load before each hang, engine time (the firstminute arm has its own 40 s)")
	fs.DurationVar(&o.duration, "duration", 20*time.Minute, "length of the false-hang run per workload, engine time (0: skip it)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the arrivals and calls (rep i uses seed+i)")
	fs.StringVar(&o.only, "workload", "both", "chat, longprompt or both")
	fs.StringVar(&o.arms, "arms", "load,light,firstminute,around", "the detection arms, comma-separated")
	fs.BoolVar(&o.battery, "battery", true, "run the false-hang battery (on the first workload)")
	fs.StringVar(&o.only37, "battery-match", "", "run only the battery cases whose name contains this")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if !(o.scale > 0) || !(o.load > 0) || o.reps < 0 || o.warmup <= 0 || o.duration < 0 {
		fmt.Fprintln(stderr, "hangdetect: -scale, -load and -warmup must be positive, -reps and -duration not negative")
		return 2
	}
	var list []workload
	for _, wl := range workloads {
		if o.only == "both" || o.only == wl.name {
			list = append(list, wl)
		}
	}
	if len(list) == 0 {
		fmt.Fprintf(stderr, "hangdetect: -workload %q: want chat, longprompt or both\n", o.only)
		return 2
	}
	var chosen []arm
	for _, name := range strings.Split(o.arms, ",") {
		i := slices.IndexFunc(arms, func(a arm) bool { return a.name == name })
		if i < 0 {
			fmt.Fprintf(stderr, "hangdetect: -arms: %q is not one of load, light, firstminute, around\n", name)
			return 2
		}
		chosen = append(chosen, arms[i])
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := experiment(ctx, o, list, chosen, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "hangdetect: %v\n", err)
		return 1
	}
	rep.print(stdout)
	return 0
}

func experiment(ctx context.Context, o options, list []workload, chosen []arm, stdout, stderr io.Writer) (*report, error) {
	start := time.Now()
	d := configs.Default().Watchdog
	fmt.Fprintf(stdout, "Simulated engine: enginesim defaults (256 seqs, 8,192-token steps), scale %g. Limiter: vigil's admission defaults (automatic cap), engine-time clock.\n", o.scale)
	fmt.Fprintf(stdout, "Watchdog: defaults, interval %s, hang_after auto (min %s, max %s); or the old defaults' outcome in these arms: interval %s, fixed %s; probe timeout %s, SLO %s; all divided by the scale.\n",
		humanize.Duration(d.Interval), humanize.Duration(d.HangAfterMin), humanize.Duration(d.HangAfterMax),
		humanize.Duration(oldInterval), humanize.Duration(fixedWindow), humanize.Duration(d.ProbeTimeout), humanize.Duration(d.ProbeSLO))
	fmt.Fprintf(stdout, "Clients: open-loop Poisson at %.2f C, unary /v1/completions, prompt text ~4 characters a token, 600 s timeout, 2 retries. Answers lognormal, median %d tokens (mean %.0f).\n",
		o.load, answerMedian, meanAnswer)
	for _, a := range chosen {
		fmt.Fprintf(stdout, "Arm %s: %s; target HUNG within %s.\n", a.name, a.desc, humanize.Duration(a.target))
	}
	fmt.Fprintf(stdout, "Each hang: %s of load (firstminute: 40 s) and a random part of an interval, then enginesim Engine.Hang(); detection = first HUNG verdict's sample time - the hang. All figures engine time.\n\n", o.warmup)
	rep := &report{scale: o.scale}
	for _, wl := range list {
		c := enginesim.MeasureCapacity(harness.PaperEngineConfig(o.scale, true, ""), wl.mean)
		fmt.Fprintf(stdout, "%s: %s; capacity C = %.2f calls/s (enginesim.MeasureCapacity)\n", wl.name, wl.desc, c)
		wr := workloadResult{name: wl.name, capacity: c}
		for _, a := range chosen {
			ar := armResult{arm: a}
			// Interleaved, so that noise on the shared machine falls on
			// both windows alike.
			for i := range o.reps {
				seed := o.seed + uint64(i)
				for _, w := range []time.Duration{0, fixedWindow} {
					fmt.Fprintf(stderr, "hangdetect: %s %s: rep %d, hang_after %s ...\n", wl.name, a.name, i+1, windowName(w))
					h, err := detect(ctx, o, wl, c, w, seed, a)
					if err != nil {
						return nil, fmt.Errorf("%s %s rep %d (%s): %w", wl.name, a.name, i+1, windowName(w), err)
					}
					if w == 0 {
						ar.auto = append(ar.auto, h)
					} else {
						ar.fixed = append(ar.fixed, h)
					}
				}
			}
			wr.arms = append(wr.arms, ar)
		}
		if o.duration > 0 {
			fmt.Fprintf(stderr, "hangdetect: %s: %s without a fault, hang_after auto ...\n", wl.name, o.duration)
			l, err := longRun(ctx, o, wl, c, o.seed+1000)
			if err != nil {
				return nil, fmt.Errorf("%s long run: %w", wl.name, err)
			}
			wr.long = &l
		}
		rep.workloads = append(rep.workloads, wr)
	}
	if o.battery {
		wl := list[0]
		c := rep.workloads[0].capacity
		for i, b := range batteries {
			if !strings.Contains(b.name, o.only37) {
				continue
			}
			fmt.Fprintf(stderr, "hangdetect: battery: %s ...\n", b.name)
			res, err := runBattery(ctx, o, wl, c, b, o.seed+2000+uint64(i))
			if err != nil {
				return nil, fmt.Errorf("battery %q: %w", b.name, err)
			}
			rep.battery = append(rep.battery, res)
		}
		rep.batteryWorkload = wl.name
	}
	rep.wall = time.Since(start)
	fmt.Fprintln(stdout)
	return rep, nil
}

func windowName(w time.Duration) string {
	if w == 0 {
		return "auto"
	}
	return humanize.Duration(w)
}

// limiterBrief is the limiter's counters that say how loaded it was.
func limiterBrief(st admission.Stats) string {
	var rejected uint64
	for _, n := range st.Rejected {
		rejected += n
	}
	return fmt.Sprintf("calls=%d admitted=%d queued=%d rejected=%d retries=%d queue=%d in_flight=%d cap=%d",
		st.Calls, st.Admitted, st.Queued, rejected, st.Retries, st.QueueDepth, st.InFlight, st.Cap)
}

// hangResult is one injected hang.
type hangResult struct {
	detected bool
	took     time.Duration // hang to the first HUNG verdict's sample, engine time
	window   time.Duration // the window that verdict judged by, engine time
	why      string        // and why, engine time
	// before is the window in force at the last verdict before the hang.
	before    time.Duration
	beforeWhy string
	// falseBefore counts HUNG verdicts during the warm-up (there should be none).
	falseBefore int
	// stalled is Evidence.Stalled at each cycle between the hang and the
	// HUNG verdict (engine time): how close each came to the window.
	stalled []time.Duration
	// closest is the longest stall the watchdog timed before the hang,
	// and closestWindow the window it was judged by (engine time): how
	// near the healthy engine came to a false HUNG.
	closest, closestWindow time.Duration
	// pause is the simulated engine's own longest pause between steps
	// with work before the hang (engine time): when it is as long as
	// closest, the counters really stood still (a CPU-starved engine),
	// and the watchdog read them right.
	pause time.Duration
}

// detect loads a fresh rig for o.warmup, hangs the engine, and times the
// first HUNG verdict.
func detect(ctx context.Context, o options, wl workload, c float64, hangAfter time.Duration, seed uint64, a arm) (hangResult, error) {
	r, err := startRig(ctx, o, wl, o.load*c, hangAfter, seed, a)
	if err != nil {
		return hangResult{}, err
	}
	defer r.close()
	// The hang lands at a random point of the sampling cycle, as a real
	// one does: detection depends on that phase by up to an interval.
	phase := time.Duration(rand.New(rand.NewPCG(seed, 0x9a5e)).Float64() * float64(configs.Default().Watchdog.Interval))
	warmup := o.warmup
	if a.warmup > 0 {
		warmup = a.warmup
	}
	if !r.clock.Sleep(ctx, warmup+phase) {
		return hangResult{}, ctx.Err()
	}
	hungAt := time.Now()
	r.eng.Hang()
	var h hangResult
	last := r.rec.lastBefore(hungAt)
	h.before, h.beforeWhy = r.engine(last.Evidence.HangAfter), engineWhy(last.Evidence.HangAfterWhy, o.scale)
	for _, v := range r.rec.all() {
		if !v.At.Before(hungAt) {
			continue
		}
		if v.State == watchdog.StateHung {
			h.falseBefore++
		}
		if s := r.engine(v.Evidence.Stalled); s > h.closest {
			h.closest, h.closestWindow = s, r.engine(v.Evidence.HangAfter)
		}
	}
	h.pause = r.longestPause(hungAt)
	// Wait up to the longest window the watchdog may use, plus cycles.
	deadline := hungAt.Add(r.watch.HangAfterCeiling() + 4*r.watch.Interval)
	for time.Now().Before(deadline) {
		if v := r.rec.firstHung(hungAt); v != nil {
			h.detected = true
			h.took = r.engine(v.At.Sub(hungAt))
			h.window, h.why = r.engine(v.Evidence.HangAfter), engineWhy(v.Evidence.HangAfterWhy, o.scale)
			for _, u := range r.rec.all() {
				if !u.At.Before(hungAt) && u.At.Before(v.At) {
					h.stalled = append(h.stalled, r.engine(u.Evidence.Stalled))
				}
			}
			break
		}
		select {
		case <-ctx.Done():
			return h, ctx.Err()
		case <-time.After(r.watch.Interval / 8):
		}
	}
	return h, nil
}

// longResult is the false-hang run of one workload.
type longResult struct {
	duration time.Duration
	verdictTally
	// windows are Evidence.HangAfter of the verdicts after the warm-up
	// (engine time), with their why strings.
	windows []windowSeen
	// atCeiling counts the verdicts at hang_after_max during the
	// warm-up, where auto holds the ceiling until the engine has been
	// seen serving for 8 cycles.
	atCeiling, warmupVerdicts int
	// ceilingAfter counts the verdicts after the warm-up at the ceiling.
	ceilingAfter   int
	served         float64 // completions per engine second, over C
	sent, answered int64
	limiter        string // the limiter's counters at the end
}

type windowSeen struct {
	d   time.Duration
	why string
}

// longRun loads a fresh rig with hang_after: auto for o.duration and
// counts what the watchdog said of an engine that never hangs.
func longRun(ctx context.Context, o options, wl workload, c float64, seed uint64) (longResult, error) {
	r, err := startRig(ctx, o, wl, o.load*c, 0, seed, arm{name: "long"})
	if err != nil {
		return longResult{}, err
	}
	defer r.close()
	// Served is measured after the warm-up, not over the limiter's slow
	// start.
	warmFor := min(o.warmup, o.duration)
	if !r.clock.Sleep(ctx, warmFor) {
		return longResult{}, ctx.Err()
	}
	before := r.eng.Stats()
	if !r.clock.Sleep(ctx, o.duration-warmFor) {
		return longResult{}, ctx.Err()
	}
	after := r.eng.Stats()
	st := r.lim.Stats()
	l := longResult{duration: o.duration, verdictTally: r.tally(o.scale),
		sent: r.sent.Load(), answered: r.answered.Load(), limiter: limiterBrief(st)}
	if dt := after.EngineTime - before.EngineTime; dt > 0 {
		l.served = float64(after.Completed-before.Completed) / dt.Seconds() / c
	}
	warm := r.started.Add(r.clock.Wall(warmFor))
	ceiling := r.watch.HangAfterMax
	for _, v := range r.rec.all() {
		if v.At.Before(warm) {
			l.warmupVerdicts++
			if v.Evidence.HangAfter >= ceiling {
				l.atCeiling++
			}
			continue
		}
		if v.Evidence.HangAfter >= ceiling {
			l.ceilingAfter++
		}
		l.windows = append(l.windows, windowSeen{r.engine(v.Evidence.HangAfter), engineWhy(v.Evidence.HangAfterWhy, o.scale)})
	}
	return l, nil
}
