// Command hanglost measures the requests lost per hang (issue 24): the
// calls in flight when the engine hangs, with today's behaviour (moving
// off: admission.max_moves 0, the calls stay on the hung engine and are
// lost when it restarts) against the calls cut and moved (max_moves 2),
// held for the restarted engine when there is no peer, or moved to a
// peer's limiter, in the same run.
//
// Everything runs in this process on loopback: the simulated engine
// (enginesim, time-scaled, -seqs seats) behind an address where it can be
// stopped and replaced by a fresh one (the restart); vigil's admission
// limiter in front of it with its defaults (an engine-time clock, so its
// durations keep their proportion to the engine); clients that retry like
// the OpenAI SDKs, at -load times the engine's capacity (measured with
// enginesim.MeasureCapacity), a quarter each of unary and streamed calls on
// /v1/completions and /v1/chat/completions. After -warmup the engine hangs
// (Engine.Hang); -detect later the watchdog's verdict is played: the
// limiter's SetRecovering(true), and the engine is stopped; -restart later
// a fresh engine takes its address, then SetRecovering(false) and
// SlowStart(), and the load goes on for -tail.
//
// The simulated engine's text is a function of the prompt, so each call's
// answer is checked against the one a fresh engine gives the same request:
// a continued stream must be the uninterrupted one, word for word.
//
//	go run ./bench/hanglost [-scale 6] [-seqs 32] [-load 1] [-peer-load 1] [-warmup 30s] [-detect 25s]
//		[-restart 45s] [-tail 20s] [-arms a,b,c] [-timeline 10s]
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

	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/util/humanize"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

type options struct {
	scale    float64
	seqs     int
	load     float64
	peerLoad float64
	warmup   time.Duration
	detect   time.Duration
	restart  time.Duration
	tail     time.Duration
	drain    time.Duration
	seed     uint64
	retries  int
	// longPrompts calls of longTokens prompt tokens are added (lone long
	// prefills).
	longPrompts, longTokens int
	arms                    []armSpec
	// timeline, when set, gets the engine and the limiter every every.
	timeline io.Writer
	every    time.Duration
}

// length is how long the calls arrive, engine time.
func (o options) length() time.Duration { return o.warmup + o.detect + o.restart + o.tail }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hanglost", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.Float64Var(&o.scale, "scale", 6, "engine time runs this many times faster than wall time")
	fs.IntVar(&o.seqs, "seqs", 32, "the simulated engine's seats (--max-num-seqs): about the calls in it at the hang")
	fs.Float64Var(&o.load, "load", 1, "offered load as a multiple of the engine's capacity")
	fs.Float64Var(&o.peerLoad, "peer-load", 1, "load the peer's own clients offer it in arm c, as a multiple of its capacity (0: an idle peer)")
	fs.DurationVar(&o.warmup, "warmup", 30*time.Second, "load before the hang, engine time")
	fs.DurationVar(&o.detect, "detect", 25*time.Second, "hang to the watchdog's verdict (the recovery begins), engine time")
	fs.DurationVar(&o.restart, "restart", 45*time.Second, "the recovery's start to the restarted engine ready, engine time")
	fs.DurationVar(&o.tail, "tail", 20*time.Second, "load after the restarted engine is ready, engine time")
	fs.DurationVar(&o.drain, "drain", 3*time.Minute, "longest wait for the calls to end after the load, engine time (the rest are cancelled and counted unfinished)")
	fs.IntVar(&o.retries, "retries", sdkRetries, "retries per call (0: clients that do not retry, as behind HAProxy, which never retries a 503)")
	fs.IntVar(&o.longPrompts, "long-prompts", 0, "add this many streamed calls with long prompts, spread over the run (lone long prefills)")
	fs.IntVar(&o.longTokens, "long-tokens", 60000, "prompt tokens of each -long-prompts call")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the arrivals and calls (the same in every arm)")
	fs.DurationVar(&o.every, "timeline", 0, "print the engine and the limiter at this interval of engine time, to stderr (0: not)")
	arms := fs.String("arms", "a,b,c", "arms to run: a (moving off), b (no peer), c (a peer), d (a peer, suspicion off), e (no peer, suspicion off), f (no hang: false suspicions; use -load past 1 to saturate)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if !(o.scale > 0) || o.seqs < 1 || !(o.load > 0) || o.peerLoad < 0 || o.warmup <= 0 || o.detect < 0 || o.restart < 0 ||
		o.tail < 0 || o.drain <= 0 || o.retries < 0 || o.longPrompts < 0 || o.longTokens < 1 {
		fmt.Fprintln(stderr, "hanglost: -scale, -seqs, -load, -warmup and -drain must be positive, -peer-load, -detect, -restart, -tail, -retries and -long-prompts not negative, -long-tokens positive")
		return 2
	}
	if o.every > 0 {
		o.timeline = stderr
	}
	for _, a := range strings.Split(*arms, ",") {
		i := strings.Index("abcdef", strings.TrimSpace(a))
		if len(strings.TrimSpace(a)) != 1 || i < 0 {
			fmt.Fprintf(stderr, "hanglost: -arms: unknown arm %q (have a, b, c, d, e, f)\n", a)
			return 2
		}
		o.arms = append(o.arms, armSpecs[i])
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := experiment(ctx, o, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "hanglost: %v\n", err)
		return 1
	}
	rep.print(stdout)
	return 0
}

func experiment(ctx context.Context, o options, stdout, stderr io.Writer) (*report, error) {
	start := time.Now()
	c := enginesim.MeasureCapacity(engineConfig(o), meanCall)
	calls := withLongPrompts(draw(o.seed, "Node", o.load*c, o.length()), o.longPrompts, o.longTokens, o.length())
	var peerCalls []call
	if o.peerLoad > 0 {
		peerCalls = draw(o.seed+1000, "Peer", o.peerLoad*c, o.length())
	}
	fmt.Fprintf(stdout, "Simulated engine: enginesim defaults with %d seats, scale %g; capacity C = %.2f calls/s (enginesim.MeasureCapacity, %d-token prompts, %d-token answers).\n",
		o.seqs, o.scale, c, meanCall.PromptTokens, meanCall.OutputTokens)
	fmt.Fprintf(stdout, "Calls: open-loop Poisson at %.2f C, %d calls over %s, prompts %d ± %d tokens, answers lognormal median %d (mean %.0f), a quarter each unary/streamed on /v1/completions and /v1/chat/completions, n=1.\n",
		o.load, len(calls), humanize.Duration(o.length()), promptMean, promptSpread, answerMedian, meanAnswer)
	fmt.Fprintf(stdout, "Clients: the OpenAI SDKs' retries: %s timeout, %d retries, backoff 0.5 s doubling to 8 s, Retry-After up to 60 s honoured.\n",
		humanize.Duration(sdkTimeout), o.retries)
	fmt.Fprintf(stdout, "Limiter: vigil's admission defaults (engine_max_seqs %d), engine-time clock; max_moves per arm. Peer (arm c): the same limiter and engine, its own clients at %.2f C.\n",
		o.seqs, o.peerLoad)
	fmt.Fprintf(stdout, "Schedule (engine time): %s of load, Engine.Hang(); %s later SetRecovering(true) and the engine stopped; %s later a fresh engine, SetRecovering(false), SlowStart(); %s more load.\n\n",
		humanize.Duration(o.warmup), humanize.Duration(o.detect), humanize.Duration(o.restart), humanize.Duration(o.tail))

	t0 := time.Now()
	want, err := expectedTexts(ctx, calls)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "hanglost: expected texts of %d calls in %s\n", len(calls), time.Since(t0).Round(time.Millisecond))
	rep := &report{o: o, capacity: c}
	for _, spec := range o.arms {
		fmt.Fprintf(stderr, "hanglost: arm %s ...\n", spec.name)
		r, err := runArm(ctx, o, spec, calls, peerCalls)
		if err != nil {
			return nil, fmt.Errorf("arm %s: %w", spec.name, err)
		}
		f := measure(r, calls, want)
		fmt.Fprintf(stderr, "hanglost: arm %s done in %s: at the hang %d calls, %d right, %d wrong, %d lost\n",
			spec.name, r.wall.Round(time.Second), f.atHang, f.right, f.wrong, f.lost)
		rep.arms = append(rep.arms, armFigures{run: r, fig: f})
	}
	rep.wall = time.Since(start)
	return rep, nil
}
