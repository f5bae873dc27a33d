package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/simclient"
	"github.com/vigil-dev/vigil/util/humanize"
)

// arm is one way of serving the same calls.
type arm struct {
	name string
	what string
	// abort is the engine's AbortOnDisconnect.
	abort bool
	// retries: the client retries 3 times (else it makes one attempt).
	retries bool
	// vigil, when set, puts the admission limiter in front of the engine
	// with the default config changed by it.
	vigil func(*configs.Admission)
	// keyless: the calls carry no Idempotency-Key (the SDKs' default).
	keyless bool
}

var arms = []arm{
	{name: "direct-noretry", what: "direct, retries off, abort on", abort: true},
	{name: "direct-retry-abort", what: "direct, retries on, abort on", abort: true, retries: true},
	{name: "direct-retry-noabort", what: "direct, retries on, abort off", retries: true},
	// The best control of the paper, rebuilt from vigil's parts: coalescing
	// and cancellation deferred 10 s, with no cap and no retry budget in the
	// way. It checks the simulation against the published figures.
	{name: "published-best", what: "coalescing + cancel deferred 10 s, no cap", abort: true, retries: true,
		vigil: func(a *configs.Admission) { a.MaxInFlight, a.RetryRatio = 1_000_000, 1 }},
	{name: "vigil", what: "vigil defaults", abort: true, retries: true, vigil: func(*configs.Admission) {}},
	{name: "vigil-keyless", what: "vigil defaults, no Idempotency-Key", abort: true, retries: true,
		vigil: func(*configs.Admission) {}, keyless: true},
	{name: "vigil-nocoalesce", what: "vigil, coalesce off", abort: true, retries: true,
		vigil: func(a *configs.Admission) { a.Coalesce = false }},
	{name: "vigil-fifo", what: "vigil, order fifo", abort: true, retries: true,
		vigil: func(a *configs.Admission) { a.Order = "fifo" }},
}

func armNames() []string {
	var n []string
	for _, a := range arms {
		n = append(n, a.name)
	}
	return n
}

// findArm returns a listed arm, or a vigil arm with config changes
// spelled after "vigil+": "vigil+cap=128+retry_ratio=1+queue_wait=60s+
// max_queue=512+cancel_after=30s+fifo+nocoalesce" (for exploring what
// limits the limiter; not part of "all").
func findArm(name string) (arm, bool) {
	for _, a := range arms {
		if a.name == name {
			return a, true
		}
	}
	mods, ok := strings.CutPrefix(name, "vigil+")
	if !ok {
		return arm{}, false
	}
	var changes []func(*configs.Admission)
	for _, m := range strings.Split(mods, "+") {
		k, v, _ := strings.Cut(m, "=")
		var f func(*configs.Admission)
		switch k {
		case "fifo":
			f = func(a *configs.Admission) { a.Order = "fifo" }
		case "nocoalesce":
			f = func(a *configs.Admission) { a.Coalesce = false }
		case "cap", "max_queue":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return arm{}, false
			}
			f = func(a *configs.Admission) {
				if k == "cap" {
					a.MaxInFlight = n
				} else {
					a.MaxQueue = n
				}
			}
		case "retry_ratio":
			r, err := strconv.ParseFloat(v, 64)
			if err != nil || r < 0 || r > 1 {
				return arm{}, false
			}
			f = func(a *configs.Admission) { a.RetryRatio = r }
		case "queue_wait", "cancel_after":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return arm{}, false
			}
			f = func(a *configs.Admission) {
				if k == "queue_wait" {
					a.MaxQueueWait = d
				} else {
					a.CancelAfter = d
				}
			}
		default:
			return arm{}, false
		}
		changes = append(changes, f)
	}
	return arm{name: name, what: "vigil, " + strings.ReplaceAll(mods, "+", ", "), abort: true, retries: true,
		vigil: func(a *configs.Admission) {
			for _, f := range changes {
				f(a)
			}
		}}, true
}

// sample is the engine (and limiter) state at one engine time.
type sample struct {
	at      time.Duration
	engine  enginesim.Stats
	limiter string
}

type armResult struct {
	arm      arm
	calls    []simclient.Result
	phase    []int
	hold0    enginesim.Stats // engine at the hold's start
	hold1    enginesim.Stats // and at its end
	samples  []sample
	limiter  string // the limiter's counters at the end
	wall     time.Duration
	m        metrics
	capacity float64
}

func runArm(ctx context.Context, o options, a arm, c float64) (armResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv, err := enginesim.Start(ctx, "127.0.0.1:0", engineConfig(o.scale, a.abort))
	if err != nil {
		return armResult{}, fmt.Errorf("start engine: %w", err)
	}
	defer srv.Close()
	<-srv.Ready()

	target, key, headerScale := srv.URL(), engineKey, 1.0
	var lim *harness.Limiter
	if a.vigil != nil {
		cfg := configs.Default().Admission
		a.vigil(&cfg)
		lim, err = harness.StartLimiter(ctx, cfg, srv.URL(), engineKey, o.scale, o.limiterTime)
		if err != nil {
			return armResult{}, err
		}
		defer lim.Close()
		target, key, headerScale = lim.URL(), clientKey, lim.HeaderScale()
	}

	ph := phases(c)
	arrivals, bodies := harness.PaperCalls(o.seed, ph)
	policy := harness.PaperPolicy()
	if !a.retries {
		policy.MaxRetries = 0
	}
	clock := simclient.NewClock(o.scale)
	caller := simclient.NewCaller(target+"/v1/completions", key, clock, policy, o.seed)
	caller.HeaderScale = headerScale
	defer caller.CloseIdle()

	holdStart := harness.PhaseStart(ph, phaseHold)
	holdEnd := holdStart + holdFor
	res := armResult{arm: a, capacity: c}
	for _, ar := range arrivals {
		res.phase = append(res.phase, ar.Phase)
	}

	// The sampler snapshots the engine at the hold's edges (for the
	// execution counts) and every minute (for the timeline) until the
	// calls are done.
	var times []time.Duration
	for t := time.Duration(0); t <= holdEnd+deliveredWithin; t += 60 * time.Second {
		times = append(times, t)
	}
	times = append(times, holdStart, holdEnd)
	slices.Sort(times)
	times = slices.Compact(times)
	sctx, stopSampler := context.WithCancel(ctx)
	var samplerDone sync.WaitGroup
	samplerDone.Go(func() {
		for _, t := range times {
			if !clock.SleepUntil(sctx, t) {
				return
			}
			s := sample{at: t, engine: srv.Engine.Stats()}
			if lim != nil {
				s.limiter = lim.Brief()
			}
			switch t {
			case holdStart:
				res.hold0 = s.engine
			case holdEnd:
				res.hold1 = s.engine
			}
			res.samples = append(res.samples, s)
		}
	})

	start := time.Now()
	if a.keyless {
		res.calls = harness.SendAllKeyless(ctx, clock, caller, arrivals, bodies)
	} else {
		res.calls = harness.SendAll(ctx, clock, caller, o.seed, arrivals, bodies)
	}
	res.wall = time.Since(start)
	// Wait for the hold-end snapshot if the calls finished first (they
	// cannot: the hold's own arrivals run to its end), then stop sampling.
	if clock.Now() < holdEnd {
		clock.SleepUntil(ctx, holdEnd)
	}
	stopSampler()
	samplerDone.Wait()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if lim != nil {
		res.limiter = lim.Summary()
	}
	res.m = measure(res, c)
	return res, nil
}

func (r armResult) printTimeline(w io.Writer) {
	fmt.Fprintf(w, "\nTimeline, %s (%s): engine seconds; engine waiting/running, executions received/completed/aborted", r.arm.name, r.arm.what)
	if r.arm.vigil != nil {
		fmt.Fprint(w, "; limiter")
	}
	fmt.Fprintln(w)
	for _, s := range r.samples {
		e := s.engine
		fmt.Fprintf(w, "  t=%4.0f waiting=%4d running=%3d received=%5d completed=%5d aborted=%5d %s\n",
			s.at.Seconds(), e.Waiting+e.Pending, e.Running, e.Received, e.Completed, e.Aborted, s.limiter)
	}
	if r.limiter != "" {
		fmt.Fprintf(w, "  limiter at the end: %s\n", r.limiter)
	}
	// What became of the calls, by the minute they started in.
	type bucket struct{ n, ok, onTime, attempts int }
	var bs []bucket
	for _, c := range r.calls {
		i := int(c.Start / time.Minute)
		for len(bs) <= i {
			bs = append(bs, bucket{})
		}
		bs[i].n++
		bs[i].attempts += c.Attempts
		if c.Delivered && c.DeliveredAt-c.Start <= deliveredWithin {
			bs[i].ok++
		}
		if c.Delivered && c.DeliveredAt-c.Start <= harness.PaperPolicy().Timeout {
			bs[i].onTime++
		}
	}
	fmt.Fprintln(w, "  calls by the minute they started: delivered / within the first deadline / attempts per call")
	for i, b := range bs {
		fmt.Fprintf(w, "  start %4d-%4d s: %3d calls, delivered %6s, on time %6s, %.2f attempts\n", i*60, i*60+60, b.n,
			humanize.Pct(harness.Share(b.ok, b.n)), humanize.Pct(harness.Share(b.onTime, b.n)), harness.Share(b.attempts, b.n))
	}
	// How the undelivered calls ended: how long they lasted, and what their
	// attempts got.
	var lost []simclient.Result
	for _, c := range r.calls {
		if !c.Delivered || c.DeliveredAt-c.Start > deliveredWithin {
			lost = append(lost, c)
		}
	}
	if len(lost) == 0 {
		return
	}
	slices.SortFunc(lost, func(a, b simclient.Result) int { return cmp.Compare(a.End-a.Start, b.End-b.Start) })
	statuses := map[int]int{}
	var attempts, timeouts, errs int
	for _, c := range lost {
		attempts += c.Attempts
		timeouts += c.Timeouts
		errs += c.Errors
		for k, v := range c.Statuses {
			statuses[k] += v
		}
	}
	life := func(q float64) time.Duration {
		c := lost[min(len(lost)-1, int(q*float64(len(lost))))]
		return (c.End - c.Start).Round(time.Second)
	}
	fmt.Fprintf(w, "  undelivered: %d calls, lasting %v (min) / %v (median) / %v (max); attempts %d: %d timed out, %d errors, statuses %v\n",
		len(lost), life(0), life(0.5), life(1), attempts, timeouts, errs, statuses)
}
