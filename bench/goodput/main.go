// Command goodput measures goodput, streamed completions whose time to
// first token meets an SLO per second, on the simulated engine under about
// twice its capacity ("When 503s Are the Right Answer"): ungated, behind
// fixed in-flight caps of 8, 32 and 64 (vigil's limiter with max_in_flight
// set), behind the no-queue gateway (max_queue: 0, 503 at the cap) at the
// best of those caps, and behind vigil's defaults (automatic cap).
//
// Two workloads (-workload chat|longprompt|both). chat: chat-like calls,
// the SLO the p99 TTFT measured at half capacity in the same run.
// longprompt (issue #17): 12,000-token prompts sharing a 2,000-token
// prefix, no client timeout and no deadline header, a fixed 0.69 s TTFT
// objective (see longprompt.go).
//
// family (issue #28): every arm on each engine of enginesim's cost models
// (-models), the paper's call shape unless the model is about the calls;
// there the no-queue gateway runs at every fixed cap, and the caps double
// past the largest while it is the best.
//
//	go run ./bench/goodput [-workload both|family] [-scale 5] [-window 120s] [-load 2]
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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/admission"
	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/simclient"
	"github.com/vigil-dev/vigil/util/humanize"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// The workload: chat-like streamed calls, prompts of 2,000 ± 1,000 tokens
// with no shared prefix and lognormal answers (median 100 tokens).
const (
	promptMean, promptSpread = 2000, 1000
	answerMedian, answerSig  = 100, 0.5
	answerMax                = 400

	model     = "sim-llama-8b"
	engineKey = "sk-engine-bench"
	clientKey = "sk-client-bench"

	// clientTimeout bounds every request (engine time): a request still
	// waiting then gives up, so an ungated run ends too.
	clientTimeout = 120 * time.Second
)

// arm is one way of serving the same arrivals. cap < 0: ungated (no
// limiter); 0: vigil's automatic cap; > 0: a fixed cap. ttftTarget, when
// set, replaces vigil's default ttft_target. noQueue sets max_queue: 0:
// the seed's gateway, 503 at once at the cap.
type arm struct {
	name       string
	cap        int
	ttftTarget time.Duration
	noQueue    bool
	// atObjective marks the family's arm of vigil told the objective;
	// lax its arm told a lax one (-lax-arm).
	atObjective, lax bool
}

// spec is a workload: its engine's time scale, its calls and its clients.
type spec struct {
	name   string
	scale  float64
	call   func(*rand.Rand) simclient.SimCall
	policy simclient.RetryPolicy
	// engine, when set, changes the engine (a cost model of the family);
	// speed is that engine's against the default's: vigil's configured
	// durations (ttft_target first) are divided by it, as an operator
	// sets them for the engine, while its built-in constants stay.
	engine func(*enginesim.Config)
	speed  float64
}

func (o options) chatSpec() spec {
	return spec{name: "chat", scale: o.scale, call: workload, policy: simclient.RetryPolicy{Timeout: clientTimeout}}
}

type options struct {
	scale       float64
	seed        uint64
	window      time.Duration
	sloFor      time.Duration
	load        float64
	limiterTime harness.TimeMode
	caps        []int
	sloArm      bool
	// laxArm, when > 0: the family also runs vigil's automatic cap told
	// a ttft_target this many times the model's objective, one its first
	// tokens do not reach, so that what bounds the cap past the
	// objective shows (the throughput knee).
	laxArm float64
	// allGateways runs the no-queue gateway at every fixed cap instead of
	// at the best one only.
	allGateways bool
	// trace prints the automatic cap's state every 10 s of engine time to
	// traceTo (stderr).
	trace   bool
	traceTo io.Writer
	// steps, when set, gets the automatic cap's every control step
	// (core.Step, logged at trace level).
	steps    io.Writer
	workload string
	long     longOptions
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("goodput", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.Float64Var(&o.scale, "scale", 5, "engine time runs this many times faster than wall time")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the arrivals and workload (the same for every arm)")
	fs.DurationVar(&o.window, "window", 120*time.Second, "measurement window at -load x capacity (engine time)")
	fs.DurationVar(&o.sloFor, "slo-window", 120*time.Second, "window at half capacity that sets the TTFT SLO (engine time)")
	fs.Float64Var(&o.load, "load", 2, "offered load as a multiple of capacity")
	caps := fs.String("caps", "8,32,64", "fixed caps to compare")
	fs.BoolVar(&o.allGateways, "all-gateways", false, "run the no-queue gateway at every -caps value, not only at the best fixed cap's (family: always)")
	fs.BoolVar(&o.trace, "trace", false, "print the automatic cap's state every 10 s of engine time (stderr)")
	o.traceTo = stderr
	stepsTo := fs.String("trace-steps", "", "write the automatic cap's every control step (cap, objective, first tokens, what moved or held it) to this file")
	fs.BoolVar(&o.sloArm, "slo-arm", true, "also run vigil's automatic cap with ttft_target set to the measured SLO")
	fs.Float64Var(&o.laxArm, "lax-arm", 0, "family: also run vigil's automatic cap with ttft_target this many times the model's objective (0: not)")
	limiterTime := fs.String("limiter-time", "clock", "how vigil keeps time beside the time-scaled engine: clock or config (see bench/README.md)")
	fs.StringVar(&o.workload, "workload", "both", "chat, longprompt, both, or family (every arm on each -models engine)")
	models := fs.String("models", "all", "family: the cost models to run, comma-separated, or all ("+strings.Join(enginesim.CostModelNames(), ", ")+")")
	fs.Float64Var(&o.long.scale, "long-scale", 30, "longprompt: engine time runs this many times faster than wall time")
	fs.DurationVar(&o.long.window, "long-window", 300*time.Second, "longprompt: arrivals window at -load x capacity (engine time)")
	fs.DurationVar(&o.long.objective, "long-objective", 690*time.Millisecond, "longprompt: TTFT objective (engine time)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var err error
	if o.limiterTime, err = harness.ParseTimeMode(*limiterTime); err != nil {
		fmt.Fprintf(stderr, "goodput: -limiter-time: %v\n", err)
		return 2
	}
	for _, c := range strings.Split(*caps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "goodput: -caps: %q is not a positive integer\n", c)
			return 2
		}
		o.caps = append(o.caps, n)
	}
	if !(o.scale > 0) || o.window <= 0 || o.sloFor <= 0 || !(o.load > 0) ||
		!(o.long.scale > 0) || o.long.window <= 0 || o.long.objective <= 0 {
		fmt.Fprintln(stderr, "goodput: -scale, -window, -slo-window, -load, -long-scale, -long-window and -long-objective must be positive")
		return 2
	}
	chat, long := o.workload == "chat" || o.workload == "both", o.workload == "longprompt" || o.workload == "both"
	family := o.workload == "family"
	if !chat && !long && !family {
		fmt.Fprintf(stderr, "goodput: -workload %q: want chat, longprompt, both or family\n", o.workload)
		return 2
	}
	if *stepsTo != "" {
		f, err := os.Create(*stepsTo)
		if err != nil {
			fmt.Fprintf(stderr, "goodput: -trace-steps: %v\n", err)
			return 2
		}
		defer f.Close()
		o.steps = f
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if family {
		var ms []enginesim.CostModel
		if *models == "all" {
			ms = enginesim.CostModels()
		} else {
			for _, name := range strings.Split(*models, ",") {
				m, err := enginesim.CostModelByName(strings.TrimSpace(name))
				if err != nil {
					fmt.Fprintf(stderr, "goodput: -models: %v\n", err)
					return 2
				}
				ms = append(ms, m)
			}
		}
		if err := familyExperiment(ctx, o, ms, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "goodput: family: %v\n", err)
			return 1
		}
		return 0
	}
	if chat {
		fmt.Fprintln(stdout, "== workload chat")
		if err := experiment(ctx, o, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "goodput: chat: %v\n", err)
			return 1
		}
	}
	if long {
		if chat {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintln(stdout, "== workload longprompt")
		if err := longExperiment(ctx, o, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "goodput: longprompt: %v\n", err)
			return 1
		}
	}
	return 0
}

func engineConfig(scale float64) enginesim.Config {
	cfg := enginesim.DefaultConfig()
	cfg.Model = model
	cfg.APIKey = engineKey
	cfg.Scale = scale
	return cfg
}

func workload(rng *rand.Rand) simclient.SimCall {
	return simclient.SimCall{
		Prompt: promptMean - promptSpread + rng.IntN(2*promptSpread+1),
		Output: harness.LogNormal(rng, answerMedian, answerSig, answerMax),
	}
}

// result is one arm's figures.
type result struct {
	arm       arm
	calls     []simclient.Result
	good      int
	goodput   float64 // per engine second of the window
	delivered int
	rejected  int // answered by the limiter (429/503)
	timedOut  int
	p50, p99  time.Duration // TTFT of delivered calls
	// engineWaiting is the engine's own waiting queue averaged over the
	// window (sampled every engine second): what vigil's automatic cap
	// reads from vllm:num_requests_waiting.
	engineWaiting        float64
	limiter              string
	meanInFlight, maxCap int
	// meanFirstToken is the first-token limit averaged over the window
	// (0: none).
	meanFirstToken float64
	// suspicions: stall suspicions the limiter raised (issue #36); on
	// an engine that never stops each one is false.
	suspicions uint64
}

func experiment(ctx context.Context, o options, stdout, stderr io.Writer) error {
	meanAnswer := harness.MeanLogNormal(answerMedian, answerSig, answerMax)
	c := enginesim.MeasureCapacity(engineConfig(o.scale), enginesim.Workload{
		PromptTokens: promptMean, OutputTokens: int(meanAnswer + 0.5)})
	fmt.Fprintf(stdout, "Capacity C (enginesim.MeasureCapacity, %d-token prompts, %.0f-token mean answer): %.2f calls/s (engine time); scale %g\n",
		promptMean, meanAnswer, c, o.scale)

	// The SLO: p99 TTFT of an ungated engine at half capacity.
	fmt.Fprintf(stderr, "goodput: SLO phase (%v at 0.5 C, ungated) ...\n", o.sloFor)
	slo, err := runArm(ctx, o, o.chatSpec(), arm{name: "slo", cap: -1}, 0.5*c, o.sloFor)
	if err != nil {
		return fmt.Errorf("SLO phase: %w", err)
	}
	var ttfts []time.Duration
	for _, r := range slo.calls {
		if r.Delivered {
			ttfts = append(ttfts, r.TTFT)
		}
	}
	sloTTFT := harness.Percentile(ttfts, 99)
	fmt.Fprintf(stdout, "TTFT SLO = p99 TTFT at 0.5 C ungated over %v: %v (p50 %v, %d calls)\n",
		o.sloFor, sloTTFT.Round(time.Millisecond), harness.Percentile(ttfts, 50).Round(time.Millisecond), len(ttfts))
	fmt.Fprintf(stdout, "Window: %v at %.1f C (%.1f calls/s), streamed, no retries, client timeout %v\n\n",
		o.window, o.load, o.load*c, clientTimeout)

	list := []arm{{name: "ungated", cap: -1}}
	for _, n := range o.caps {
		list = append(list, arm{name: fmt.Sprintf("cap %d", n), cap: n})
	}
	list = append(list, arm{name: "vigil defaults (automatic cap)"})
	rs, err := runArms(ctx, o, o.chatSpec(), list, o.load*c, o.window, sloTTFT, stderr)
	if err != nil {
		return err
	}
	if o.sloArm {
		// Not the defaults: the automatic cap told the objective measured
		// above, to separate the cap's law from its default target.
		a := arm{name: fmt.Sprintf("vigil, automatic cap, ttft_target %v", sloTTFT.Round(time.Millisecond)), ttftTarget: sloTTFT}
		fmt.Fprintf(stderr, "goodput: arm %s ...\n", a.name)
		r, err := runArm(ctx, o, o.chatSpec(), a, o.load*c, o.window)
		if err != nil {
			return fmt.Errorf("arm %s: %w", a.name, err)
		}
		r.score(sloTTFT, o.window)
		rs = append(rs, r)
	}
	printResults(stdout, rs, sloTTFT)
	fmt.Fprintln(stdout)
	printIssueTable(stdout, rs, o.window)
	return nil
}

// maxGridCap: the grid of fixed caps stops at vLLM's default
// --max-num-seqs; past it the engine queues whatever it is sent.
const maxGridCap = 256

// runArms runs list (ungated and fixed caps first), then the no-queue
// gateway at the best fixed cap of the run (o.allGateways: at every fixed
// cap, the grid of caps doubled past its largest while that is the best),
// scoring each against slo.
func runArms(ctx context.Context, o options, sp spec, list []arm, rate float64, window, slo time.Duration,
	stderr io.Writer) ([]result, error) {
	var rs []result
	run := func(a arm) error {
		fmt.Fprintf(stderr, "goodput: %s: arm %s ...\n", sp.name, a.name)
		r, err := runArm(ctx, o, sp, a, rate, window)
		if err != nil {
			return fmt.Errorf("arm %s: %w", a.name, err)
		}
		r.score(slo, window)
		rs = append(rs, r)
		return nil
	}
	var auto []arm
	for _, a := range list {
		if a.cap == 0 {
			auto = append(auto, a) // after the no-queue arm, as in the table
			continue
		}
		if err := run(a); err != nil {
			return nil, err
		}
	}
	caps := o.caps
	if o.allGateways {
		// The grid grows until the best fixed cap is inside it: a best at
		// its largest cap says only that more in flight paid, and the bar
		// vigil is held to would be set by a cap nobody ran.
		for best := bestFixed(rs); best != nil && best.arm.cap == slices.Max(caps) && best.arm.cap < maxGridCap; best = bestFixed(rs) {
			n := min(maxGridCap, 2*best.arm.cap)
			caps = append(caps, n)
			if err := run(arm{name: fmt.Sprintf("cap %d", n), cap: n}); err != nil {
				return nil, err
			}
		}
	}
	gateways := caps
	if !o.allGateways {
		gateways = nil
		if best := bestFixed(rs); best != nil {
			gateways = []int{best.arm.cap}
		}
	}
	for _, n := range gateways {
		if err := run(arm{name: fmt.Sprintf("no-queue gateway, cap %d (max_queue: 0)", n), cap: n, noQueue: true}); err != nil {
			return nil, err
		}
	}
	for _, a := range auto {
		if err := run(a); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// bestFixed is the fixed-cap arm (with a queue) of the highest goodput, or
// nil without one.
func bestFixed(rs []result) *result { return bestOf(rs, false) }

// bestGateway is the no-queue gateway arm of the highest goodput, or nil
// without one.
func bestGateway(rs []result) *result { return bestOf(rs, true) }

func bestOf(rs []result, noQueue bool) *result {
	var best *result
	for i := range rs {
		if r := &rs[i]; r.arm.cap > 0 && r.arm.noQueue == noQueue && (best == nil || r.goodput > best.goodput) {
			best = r
		}
	}
	return best
}

func runArm(ctx context.Context, o options, sp spec, a arm, rate float64, window time.Duration) (result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ecfg := engineConfig(sp.scale)
	if sp.engine != nil {
		sp.engine(&ecfg)
	}
	srv, err := enginesim.Start(ctx, "127.0.0.1:0", ecfg)
	if err != nil {
		return result{}, fmt.Errorf("start engine: %w", err)
	}
	defer srv.Close()
	<-srv.Ready()
	target, key, hs := srv.URL(), engineKey, 1.0
	var lim *harness.Limiter
	if a.cap >= 0 {
		cfg := configs.Default().Admission
		cfg.MaxInFlight = a.cap
		if a.ttftTarget > 0 {
			cfg.TTFTTarget = configs.Fixed(a.ttftTarget)
		}
		if a.noQueue {
			cfg.MaxQueue = 0
		}
		if sp.speed > 0 {
			cfg = simclient.ScaleAdmission(cfg, sp.speed)
		}
		var extra []admission.Option
		if o.steps != nil && a.cap == 0 {
			lg := logrus.New()
			lg.SetOutput(o.steps)
			lg.SetLevel(logrus.TraceLevel)
			extra = append(extra, admission.WithLogger(lg.WithFields(logrus.Fields{"model": sp.name, "arm": a.name})))
		}
		lim, err = harness.StartLimiter(ctx, cfg, srv.URL(), engineKey, sp.scale, o.limiterTime, extra...)
		if err != nil {
			return result{}, err
		}
		defer lim.Close()
		target, key, hs = lim.URL(), clientKey, lim.HeaderScale()
	}
	rng := rand.New(rand.NewPCG(o.seed, 0x600d))
	arrivals := harness.Arrivals(rng, []harness.Phase{{Name: "window", Duration: window, Rate: rate}})
	bodies := make([][]byte, len(arrivals))
	for i := range arrivals {
		bodies[i] = sp.call(rng).Body(model, true)
	}
	clock := simclient.NewClock(sp.scale)
	caller := simclient.NewCaller(target+"/v1/completions", key, clock, sp.policy, o.seed)
	caller.HeaderScale = hs
	defer caller.CloseIdle()

	r := result{arm: a, calls: make([]simclient.Result, len(arrivals))}
	// Sample the limiter's cap and in-flight count over the window.
	var sampler sync.WaitGroup
	var inSum, waitSum, samples, ftSum int
	sampler.Go(func() {
		for t := time.Second; t < window; t += time.Second {
			if !clock.SleepUntil(ctx, t) {
				return
			}
			e := srv.Engine.Stats()
			waitSum += e.Waiting + e.Pending
			samples++
			if lim != nil {
				s := lim.Stats()
				inSum += s.InFlight
				ftSum += s.FirstTokenLimit
				r.maxCap = max(r.maxCap, s.Cap)
				if o.trace && a.cap == 0 && t%(10*time.Second) == 0 {
					fmt.Fprintf(o.traceTo, "goodput: %s: %s: t %v: in flight %d, cap %d, first-token limit %d, objective %v, service %v (min %v), engine waiting %d running %d\n",
						sp.name, a.name, t, s.InFlight, s.Cap, s.FirstTokenLimit, s.TTFTObjective.Round(time.Millisecond),
						s.Service.Round(time.Millisecond), s.ServiceBaseline.Round(time.Millisecond), e.Waiting+e.Pending, e.Running)
				}
			}
		}
	})
	var calls sync.WaitGroup
	for i, ar := range arrivals {
		if !clock.SleepUntil(ctx, ar.At) {
			break
		}
		calls.Go(func() {
			r.calls[i] = caller.Do(ctx, simclient.Request{Body: bodies[i], Stream: true})
		})
	}
	calls.Wait()
	sampler.Wait()
	if err := ctx.Err(); err != nil {
		return r, err
	}
	if samples > 0 {
		r.meanInFlight = inSum / samples
		r.meanFirstToken = float64(ftSum) / float64(samples)
		r.engineWaiting = float64(waitSum) / float64(samples)
	}
	if lim != nil {
		r.limiter = lim.Summary()
		r.suspicions = lim.Stats().Suspicions
	}
	return r, nil
}

func (r *result) score(slo, window time.Duration) {
	var ttfts []time.Duration
	delivered := 0
	for _, c := range r.calls {
		switch {
		case c.Delivered:
			delivered++
			ttfts = append(ttfts, c.TTFT)
			if c.TTFT <= slo {
				r.good++
			}
		case c.Timeouts > 0:
			r.timedOut++
		case c.Statuses[429]+c.Statuses[503] > 0:
			r.rejected++
		}
	}
	r.goodput = float64(r.good) / window.Seconds()
	r.delivered = delivered
	r.p50, r.p99 = harness.Percentile(ttfts, 50), harness.Percentile(ttfts, 99)
}

func printResults(w io.Writer, rs []result, slo time.Duration) {
	base := rs[0].goodput
	ratio := func(x float64) string {
		if base == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2fx", x/base)
	}
	t := humanize.Table{Header: []string{"arm", "goodput (req/s)", "vs ungated", "delivered",
		"TTFT p50", "TTFT p99", "engine waiting (mean)", "rejected", "timed out", "mean in-flight", "max cap"}}
	best := 0.0
	for _, r := range rs {
		if r.arm.cap > 0 && !r.arm.noQueue {
			best = max(best, r.goodput)
		}
		inflight, maxCap := "", ""
		if r.arm.cap >= 0 {
			inflight, maxCap = strconv.Itoa(r.meanInFlight), strconv.Itoa(r.maxCap)
		}
		t.Add(r.arm.name, fmt.Sprintf("%.2f", r.goodput), ratio(r.goodput), humanize.Pct(harness.Share(r.delivered, len(r.calls))),
			r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), fmt.Sprintf("%.1f", r.engineWaiting),
			humanize.Pct(harness.Share(r.rejected, len(r.calls))), humanize.Pct(harness.Share(r.timedOut, len(r.calls))),
			inflight, maxCap)
	}
	t.Add("published: ungated", "1.01", "1.00x", "", "", "", "", "", "", "", "")
	t.Add("published: cap 32", "4.04", "4.00x", "", "", "", "", "", "", "", "")
	t.Print(w)
	for _, r := range rs {
		if r.arm.cap != 0 {
			continue
		}
		verdict := "MET"
		if r.goodput < best {
			verdict = "NOT MET"
		}
		what := "vigil's defaults"
		if r.arm.ttftTarget > 0 {
			what = "vigil with ttft_target = SLO (not a default)"
		}
		fmt.Fprintf(w, "\nTarget: %s >= the best fixed cap in the same run: %.2f vs %.2f req/s (%s). SLO %v.",
			what, r.goodput, best, verdict, slo.Round(time.Millisecond))
	}
	fmt.Fprintln(w)
	for _, r := range rs {
		if r.limiter != "" {
			fmt.Fprintf(w, "%s limiter counters: %s\n", r.arm.name, r.limiter)
		}
	}
}
