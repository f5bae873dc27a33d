package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/admission"
	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/simclient"
	"github.com/vigil-dev/vigil/util/humanize"
	"github.com/vigil-dev/vigil/watchdog"
)

// recorder is the watchdog's pager and recoverer: it keeps every verdict
// and counts the recoveries asked for. It is also its LimiterControl and
// passes saturation on to the real limiter, as the daemon wires them, so
// the limiter's cap reacts to the verdicts as it would in production.
type recorder struct {
	lim *admission.Limiter

	mu       sync.Mutex
	verdicts []watchdog.Verdict
	recovers int
	busy     bool
}

func (r *recorder) Observe(v watchdog.Verdict, _ *watchdog.Incident) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.verdicts = append(r.verdicts, v)
}

// Recover only counts: nothing is restarted, and from then on the
// recovery stays busy, so the watchdog asks once per incident.
func (r *recorder) Recover(context.Context, watchdog.Incident, watchdog.Verdict) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recovers++
	r.busy = true
}

func (r *recorder) Busy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.busy
}

func (r *recorder) LastRestart() time.Time { return time.Time{} }

func (r *recorder) SetSaturated(on bool) { r.lim.SetSaturated(on) }

func (r *recorder) all() []watchdog.Verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]watchdog.Verdict(nil), r.verdicts...)
}

func (r *recorder) recoveries() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recovers
}

// firstHung is the first HUNG verdict sampled at or after from (nil if none).
func (r *recorder) firstHung(from time.Time) *watchdog.Verdict {
	for _, v := range r.all() {
		if v.State == watchdog.StateHung && !v.At.Before(from) {
			return &v
		}
	}
	return nil
}

// lastBefore is the latest verdict sampled before t (zero if none).
func (r *recorder) lastBefore(t time.Time) watchdog.Verdict {
	var last watchdog.Verdict
	for _, v := range r.all() {
		if v.At.Before(t) {
			last = v
		}
	}
	return last
}

// rig is one engine, its limiter, a watchdog and open-loop clients, all
// in this process on loopback.
type rig struct {
	eng   *enginesim.Engine
	lim   *admission.Limiter
	rec   *recorder
	clock *simclient.Clock
	// started is the wall time the watchdog and the clients started.
	started time.Time
	// watch is the watchdog config in force (wall time, scaled).
	watch configs.Watchdog

	engSrv, limSrv *httptest.Server
	cancel         context.CancelFunc
	calls, wd      sync.WaitGroup
	sent, answered atomic.Int64
	// pauses are the simulated engine's own pauses: no step for longer
	// than pauseMin of wall time while it held work (stepWatch).
	pausesMu sync.Mutex
	pauses   []pause
}

// pause is a wall-time stretch in which the simulated engine completed
// no step although it held work: the engine really made no progress, as
// a CPU-starved process on a loaded machine does, whatever the watchdog
// reads.
type pause struct {
	end time.Time
	d   time.Duration
}

// pauseMin is the shortest pause stepWatch records, and pausePoll how
// often it looks: a step under load is ~11 ms of wall time at scale 25.
const (
	pauseMin  = 50 * time.Millisecond
	pausePoll = 5 * time.Millisecond
)

// stepWatch polls the engine's step count until ctx ends and records
// every pause.
func (r *rig) stepWatch(ctx context.Context) {
	t := time.NewTicker(pausePoll)
	defer t.Stop()
	var steps uint64
	var since time.Time // the last step seen, or when work appeared
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			st := r.eng.Stats()
			busy := st.Running+st.Waiting+st.Pending > 0 && st.Fault == "none"
			switch {
			case st.Steps != steps || !busy:
				if d := now.Sub(since); busy && !since.IsZero() && d >= pauseMin {
					r.pausesMu.Lock()
					r.pauses = append(r.pauses, pause{end: now, d: d})
					r.pausesMu.Unlock()
				}
				steps, since = st.Steps, now
				if !busy {
					since = time.Time{}
				}
			case since.IsZero():
				since = now
			}
		}
	}
}

// longestPause is the longest pause of the engine that ended before t,
// engine time (0: none).
func (r *rig) longestPause(t time.Time) time.Duration {
	r.pausesMu.Lock()
	defer r.pausesMu.Unlock()
	var longest time.Duration
	for _, p := range r.pauses {
		if p.end.Before(t) {
			longest = max(longest, p.d)
		}
	}
	return r.engine(longest)
}

// startRig serves an engine behind the limiter with its defaults, watches
// it with the watchdog's defaults (hangAfter 0: auto; else that fixed
// window, engine time, with the old 15 s interval: the old defaults) and
// starts calls of wl as the arm says: open-loop Poisson at rate calls per
// engine second (0: none), or one client at a time; through the limiter,
// or around it.
func startRig(parent context.Context, o options, wl workload, rate float64, hangAfter time.Duration, seed uint64, a arm) (*rig, error) {
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)

	e := enginesim.New(harness.PaperEngineConfig(o.scale, true, ""))
	engSrv := httptest.NewServer(wallMetrics(e.Handler(), o.scale))
	u, err := url.Parse(engSrv.URL)
	if err != nil {
		engSrv.Close()
		e.Close()
		return nil, err
	}
	// Engine time for the limiter, as the other benches' default
	// (-limiter-time clock): its config as written and its built-in
	// windows keep their proportion to the engine.
	lim, err := admission.New(configs.Default().Admission, u, "",
		admission.WithClock(harness.NewScaledClock(o.scale)), admission.WithLogger(logrus.NewEntry(quiet)))
	if err != nil {
		engSrv.Close()
		e.Close()
		return nil, fmt.Errorf("limiter: %w", err)
	}
	limSrv := httptest.NewServer(lim.Handler())

	// The watchdog runs on the wall clock, so its durations are divided
	// by the scale instead: the ratio of interval to window to engine
	// step stays what it is beside a real engine.
	cfg := configs.Default()
	cfg.Engine.URL = engSrv.URL
	cfg.Engine.Model = harness.PaperModel
	if hangAfter > 0 { // else the default, auto
		cfg.Watchdog.HangAfter = configs.Fixed(hangAfter)
		cfg.Watchdog.Interval = oldInterval
	}
	cfg.Watchdog.StateFile = ""
	cfg = scaled(cfg, o.scale)
	r := &rig{eng: e, lim: lim, rec: &recorder{lim: lim}, engSrv: engSrv, limSrv: limSrv, watch: cfg.Watchdog}
	w, err := watchdog.New(watchdog.Options{
		Engine: cfg.Engine, Watchdog: cfg.Watchdog, UnknownAfter: cfg.Alerts.UnknownAfter, CalmFor: cfg.Alerts.ResolveAfter,
		Node: "bench", Pager: r.rec, Recoverer: r.rec, Limiter: r.rec, Log: logrus.NewEntry(quiet),
		LimiterLoad: func() watchdog.LimiterLoad { return watchdog.LimiterLoad(lim.Load()) },
	})
	if err != nil {
		r.closeServers()
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	ctx, cancel := context.WithCancel(parent)
	r.cancel = cancel
	r.clock = simclient.NewClock(o.scale)
	r.started = time.Now()
	r.wd.Go(func() { w.Run(ctx) })
	r.wd.Go(func() { r.stepWatch(ctx) })
	switch {
	case a.light:
		r.calls.Go(func() { r.offerOne(ctx, wl, r.clientsOf(a), seed) })
	case rate > 0:
		r.calls.Go(func() { r.offer(ctx, wl, rate, seed, r.clientsOf(a)) })
	}
	return r, nil
}

// clientPolicy is the OpenAI SDKs' defaults: 600 s per attempt, 2
// retries, 0.5-8 s backoff, Retry-After honoured up to 60 s.
var clientPolicy = simclient.RetryPolicy{MaxRetries: 2, Timeout: 600 * time.Second,
	BackoffMin: 500 * time.Millisecond, BackoffMax: 8 * time.Second, MaxRetryAfter: 60 * time.Second}

// offer starts calls at Poisson arrivals of rate (per engine second)
// until ctx ends. Unary calls: streams would cost the 2 shared cores an
// event per token, and the window would be the same (the limiter counts
// a call's prompt until the call is done, streamed or not).
func (r *rig) offer(ctx context.Context, wl workload, rate float64, seed uint64, target string) {
	rng := rand.New(rand.NewPCG(seed, 0x4a46))
	caller := simclient.NewCaller(target+"/v1/completions", "", r.clock, clientPolicy, seed)
	defer caller.CloseIdle()
	var at time.Duration
	for {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if !r.clock.SleepUntil(ctx, at) {
			return
		}
		body := wl.body(wl.call(rng))
		r.sent.Add(1)
		r.calls.Go(func() {
			if caller.Do(ctx, simclient.Request{Body: body}).Delivered {
				r.answered.Add(1)
			}
		})
	}
}

// close stops the clients and the watchdog, then the servers. The
// engine is closed before waiting for the calls: a hung engine never
// answers them otherwise.
func (r *rig) close() {
	r.cancel()
	r.wd.Wait()
	r.engSrv.CloseClientConnections()
	r.eng.Close()
	r.calls.Wait()
	r.closeServers()
}

func (r *rig) closeServers() {
	r.limSrv.CloseClientConnections()
	r.lim.Close()
	r.limSrv.Close()
	r.engSrv.CloseClientConnections()
	r.eng.Close()
	r.engSrv.Close()
}

// engine converts a wall duration into engine time.
// verdictTally counts what a run's watchdog said: its verdicts, by
// state, the HUNG ones with the first few reasons (engine time), and the
// recoveries it asked for.
type verdictTally struct {
	verdicts, hung, recoveries int
	states                     map[watchdog.State]int
	hungWhy                    []string
	// wedgeHeard counts the verdicts given while every endpoint timed out
	// and the limiter saw any of the engine's answers (Evidence.ThroughVigil);
	// wedgeVetoed those of them with a stretch at hang_after that were not
	// hung for it (the limiter heard the engine).
	wedgeHeard, wedgeVetoed int
}

// tally counts the verdicts r's watchdog gave so far.
func (r *rig) tally(scale float64) verdictTally {
	t := verdictTally{recoveries: r.rec.recoveries(), states: map[watchdog.State]int{}}
	for _, v := range r.rec.all() {
		t.verdicts++
		t.states[v.State]++
		if tv := v.Evidence.ThroughVigil; tv != nil && v.Evidence.Unanswered > 0 && tv.Silent < v.Evidence.Unanswered {
			t.wedgeHeard++
			if v.State != watchdog.StateHung && v.Evidence.HangAfter > 0 && v.Evidence.Unanswered >= v.Evidence.HangAfter {
				t.wedgeVetoed++
			}
		}
		if v.State != watchdog.StateHung {
			continue
		}
		t.hung++
		if len(t.hungWhy) < 3 {
			t.hungWhy = append(t.hungWhy, fmt.Sprintf("at %s: %s; %s", humanize.Duration(r.engine(v.At.Sub(r.started))),
				engineWhy(v.Reason, scale), engineWhy(v.Evidence.HangAfterWhy, scale)))
		}
	}
	return t
}

func (r *rig) engine(d time.Duration) time.Duration { return r.clock.Engine(d) }

// scaled divides every duration vigil's watchdog reads by scale: the
// engine's request timeout, the whole watchdog section (interval, the
// window and its bounds, the probe's timeout and SLO, the startup grace,
// the retry-storm window) and the alert timings it is given. It walks the
// structs, so a duration added to them later is scaled too.
func scaled(c configs.Config, scale float64) configs.Config {
	c.Engine.RequestTimeout = divide(c.Engine.RequestTimeout, scale)
	c.Watchdog = simclient.Scaled(c.Watchdog, scale)
	c.Alerts.UnknownAfter = divide(c.Alerts.UnknownAfter, scale)
	c.Alerts.ResolveAfter = divide(c.Alerts.ResolveAfter, scale)
	return c
}

func divide(d time.Duration, scale float64) time.Duration {
	return time.Duration(float64(d) / scale)
}

// promptText is filler the limiter sizes prompts by: it estimates about
// 4 bytes a token of the prompt's JSON, while the engine takes the exact
// count from vigil_sim.
var promptText = strings.Repeat("lorem ipsum dolor sit amet, ", 2_400)

// body is a unary /v1/completions call of c with a prompt of about 4
// characters a token, so the limiter's estimate matches the engine's
// count (within its 2 quote characters).
func body(c simclient.SimCall) []byte {
	n := min(4*c.Prompt, len(promptText))
	b, _ := json.Marshal(map[string]any{
		"model": harness.PaperModel, "prompt": promptText[:n], "max_tokens": c.Output,
		"vigil_sim": enginesim.SimParams{PromptTokens: c.Prompt, PrefixTokens: c.Prefix,
			PrefixID: c.PrefixID, OutputTokens: c.Output},
	})
	return b
}
