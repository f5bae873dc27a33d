package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/internal/simclient"
)

// arm is a situation a hang is injected in (issue 37): how the load
// reaches the engine and how long vigil has watched it.
type arm struct {
	name, desc string
	// warmup is the load before the hang, engine time (0: -warmup).
	warmup time.Duration
	// light: one client at a time, a pause between its calls, instead of
	// the open-loop load.
	light bool
	// around: the calls go straight at the engine; the limiter sees none.
	around bool
	// target is the issue's: HUNG within this, engine time.
	target time.Duration
}

// lightPause is the one client's pause between calls, engine time: the
// engine's gauges read 0/0 at most samples.
const lightPause = 2 * time.Second

var arms = []arm{
	{name: "load", desc: "open-loop at the load through the limiter, after the warm-up", target: 20 * time.Second},
	{name: "light", desc: "one client at a time through the limiter (a call, then 2 s of pause)", light: true, target: 30 * time.Second},
	{name: "firstminute", desc: "open-loop through the limiter, the hang 40 s after vigil started", warmup: 40 * time.Second, target: 30 * time.Second},
	{name: "around", desc: "open-loop straight at the engine (the limiter sends none of it)", around: true, target: time.Minute},
}

// clientsOf is where the rig's clients send their calls for an arm.
func (r *rig) clientsOf(a arm) string {
	if a.around {
		return r.engSrv.URL
	}
	return r.limSrv.URL
}

// offerOne is one client at a time: a call, a pause, the next, until ctx
// ends.
func (r *rig) offerOne(ctx context.Context, wl workload, target string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x11e7))
	caller := simclient.NewCaller(target+"/v1/completions", "", r.clock, clientPolicy, seed)
	defer caller.CloseIdle()
	for ctx.Err() == nil {
		r.sent.Add(1)
		if caller.Do(ctx, simclient.Request{Body: wl.body(wl.call(rng))}).Delivered {
			r.answered.Add(1)
		}
		if !r.clock.Sleep(ctx, lightPause) {
			return
		}
	}
}

// wallMetrics serves the engine with its prefill-time histogram's sum in
// wall seconds: the simulated engine keeps its histograms in engine time,
// while the watchdog runs on the wall clock with its durations divided by
// the scale. Unconverted, the engine's own prefill rate would read scale
// times slower than the rate vigil measures itself, and every window
// sized from it scale times too long.
func wallMetrics(h http.Handler, scale float64) http.Handler {
	const sum = "vllm:request_prefill_time_seconds_sum"
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/metrics" {
			h.ServeHTTP(w, req)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var out bytes.Buffer
		sc := bufio.NewScanner(rec.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, sum) {
				if i := strings.LastIndexByte(line, ' '); i > 0 {
					if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
						line = line[:i+1] + strconv.FormatFloat(v/scale, 'g', -1, 64)
					}
				}
			}
			out.WriteString(line)
			out.WriteByte('\n')
		}
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.Code)
		_, _ = w.Write(out.Bytes())
	})
}

// battery is one false-hang case: a fresh rig with the defaults (auto),
// no fault, and a script of what makes a quiet engine legitimately
// silent.
type battery struct {
	name string
	// load: the open-loop load through the limiter runs beside the script
	// (else no clients but the script's).
	load bool
	run  func(ctx context.Context, r *rig, wl workload) error
}

// oneCall sends one call of prompt tokens (no shared prefix) to target
// and waits for it.
func (r *rig) oneCall(ctx context.Context, target string, prompt, output int) {
	caller := simclient.NewCaller(target+"/v1/completions", "", r.clock, clientPolicy, uint64(prompt))
	defer caller.CloseIdle()
	r.sent.Add(1)
	if caller.Do(ctx, simclient.Request{Body: body(simclient.SimCall{Prompt: prompt, Output: output})}).Delivered {
		r.answered.Add(1)
	}
}

// sleepFor is r.clock.Sleep as an error.
func (r *rig) sleepFor(ctx context.Context, d time.Duration) error {
	if !r.clock.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

// longPrompt is the battery's lone long prompt, in tokens: about 3 s of
// the simulated engine's prefill alone, 10x what any chat call costs.
const longPrompt = 100_000

var batteries = []battery{
	{name: "a lone 100k-token prefill on an idle engine", run: func(ctx context.Context, r *rig, _ workload) error {
		if err := r.sleepFor(ctx, 30*time.Second); err != nil {
			return err
		}
		r.oneCall(ctx, r.limSrv.URL, longPrompt, 8)
		return r.sleepFor(ctx, 30*time.Second)
	}},
	{name: "cached-prefix calls, then an uncached 100k-token prompt", run: func(ctx context.Context, r *rig, _ workload) error {
		sub, cancel := context.WithCancel(ctx)
		go r.offer(sub, workloads[1], 2, 7, r.limSrv.URL) // longprompt's shared prefix
		err := r.sleepFor(ctx, 90*time.Second)
		cancel()
		if err != nil {
			return err
		}
		if err := r.sleepFor(ctx, 20*time.Second); err != nil {
			return err
		}
		r.oneCall(ctx, r.limSrv.URL, longPrompt, 8)
		return r.sleepFor(ctx, 30*time.Second)
	}},
	{name: "an engine that slows 20x under load", load: true, run: func(ctx context.Context, r *rig, _ workload) error {
		if err := r.sleepFor(ctx, 60*time.Second); err != nil {
			return err
		}
		r.eng.Slow(20)
		return r.sleepFor(ctx, 3*time.Minute)
	}},
	{name: "a burst of 64 calls after 10 min idle", run: func(ctx context.Context, r *rig, wl workload) error {
		if err := r.sleepFor(ctx, 10*time.Minute); err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(64, 64))
		done := make(chan struct{}, 64)
		for range 64 {
			c := wl.call(rng)
			go func() { r.oneCall(ctx, r.limSrv.URL, c.Prompt, c.Output); done <- struct{}{} }()
		}
		for range 64 {
			<-done
		}
		return r.sleepFor(ctx, 10*time.Second)
	}},
	{name: "vLLM sleep mode for 5 min with calls held", load: true, run: func(ctx context.Context, r *rig, _ workload) error {
		if err := r.sleepFor(ctx, 60*time.Second); err != nil {
			return err
		}
		r.eng.Sleep()
		err := r.sleepFor(ctx, 5*time.Minute)
		r.eng.WakeUp()
		if err != nil {
			return err
		}
		return r.sleepFor(ctx, 30*time.Second)
	}},
	{name: "a 100k-token prompt sent around the limiter", load: true, run: func(ctx context.Context, r *rig, _ workload) error {
		if err := r.sleepFor(ctx, 60*time.Second); err != nil {
			return err
		}
		r.oneCall(ctx, r.engSrv.URL, longPrompt, 8)
		return r.sleepFor(ctx, 30*time.Second)
	}},
}

// batteryResult is one false-hang case's outcome.
type batteryResult struct {
	name string
	verdictTally
	// longest is the longest window in force, engine time, and why.
	longest windowSeen
}

// runBattery runs one false-hang case on a fresh rig with the defaults.
func runBattery(ctx context.Context, o options, wl workload, c float64, b battery, seed uint64) (batteryResult, error) {
	load := 0.0
	if b.load {
		load = o.load
	}
	r, err := startRig(ctx, o, wl, c*load, 0, seed, arm{name: "battery"})
	if err != nil {
		return batteryResult{}, err
	}
	defer r.close()
	if err := b.run(ctx, r, wl); err != nil {
		return batteryResult{}, err
	}
	res := batteryResult{name: b.name, verdictTally: r.tally(o.scale)}
	for _, v := range r.rec.all() {
		if d := r.engine(v.Evidence.HangAfter); d > res.longest.d {
			res.longest = windowSeen{d, engineWhy(v.Evidence.HangAfterWhy, o.scale)}
		}
	}
	return res, nil
}

// armLabel names an arm's window for the table.
func armLabel(w time.Duration) string {
	if w == 0 {
		return "auto (defaults)"
	}
	return fmt.Sprintf("%s fixed (the old ceiling)", windowName(w))
}
