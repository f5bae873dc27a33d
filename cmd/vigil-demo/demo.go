package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/admission"
	"github.com/vigil-dev/vigil/alerts"
	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/daemon"
	"github.com/vigil-dev/vigil/internal/simclient"
	"github.com/vigil-dev/vigil/restarter"
	"github.com/vigil-dev/vigil/util/humanize"
	"github.com/vigil-dev/vigil/watchdog"
)

// The demo's clock: the engine runs demoScale times faster than the wall,
// and vigil's thresholds are set in wall time to match (hang_after 3s of
// wall is 30s of engine time; the limiter's durations are divided by
// demoScale).
const demoScale = 10

// The overload chapters: 2.5x the engine's capacity for overloadFor, then
// at most overloadTail for the calls still going to end; what is left is
// cut off, the same in both runs.
const (
	overloadX    = 2.5
	overloadFor  = 6 * time.Second
	overloadTail = 5 * time.Second
)

// demoClient is how the overload's callers behave, in engine time: as the
// official OpenAI SDKs do (two retries, Retry-After obeyed up to 60 s,
// else a short backoff), with a 50 s timeout per attempt (5 s of wall) and
// an Idempotency-Key on every call.
var demoClient = simclient.RetryPolicy{MaxRetries: 2, Timeout: 50 * time.Second,
	BackoffMin: 250 * time.Millisecond, BackoffMax: 3 * time.Second, MaxRetryAfter: 60 * time.Second}

// runDemo is `vigil demo`: the whole story on a simulated engine, no GPU,
// in under a minute, run by the daemon `vigil run` builds: healthy; an
// overload through vigil's limiter (the engine's queue stays shallow); the
// same overload straight at the engine (saturated: not restarting); a
// collective hang under load (hung: drain, restart, restore); healthy.
func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	verbose := fs.Bool("v", false, "also print vigil's own log lines")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	d := &demo{out: stdout, start: time.Now()}
	if err := d.run(ctx, *verbose, stderr); err != nil {
		fmt.Fprintf(stderr, "vigil demo: %v\n", err)
		return exitFail
	}
	return exitOK
}

type demo struct {
	out   io.Writer
	start time.Time
	mu    sync.Mutex

	engineMu sync.Mutex
	engine   *enginesim.Server
	addr     string
	cfg      enginesim.Config
	started  time.Time
	restarts int

	lastState watchdog.State
	// retell: narrate the next verdict even if its state is unchanged (a
	// chapter starts: the reader wants vigil's view of it).
	retell     atomic.Bool
	seen       sync.Map     // watchdog.State -> true, every state vigil called
	restoredAt atomic.Int64 // UnixNano when traffic came back, 0 before
}

func (d *demo) say(format string, a ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "[%5.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, a...))
}

// demoConfig is the configuration the demo's vigil runs: the defaults,
// with the watchdog's thresholds in the demo's wall time, the limiter's
// durations divided by demoScale, a load balancer and a Docker container
// named as they would be on a node (the demo swaps in simulated drivers
// for them), and every listener on a free loopback port.
func demoConfig(engineURL, stateFile string) *configs.Config {
	cfg := configs.Default()
	cfg.Node = "node1"
	cfg.Engine.URL = engineURL
	cfg.Engine.RequestTimeout = 2 * time.Second
	cfg.Watchdog.Interval = 500 * time.Millisecond
	cfg.Watchdog.HangAfter = configs.Fixed(3 * time.Second)
	cfg.Watchdog.ProbeTimeout = 2 * time.Second
	cfg.Watchdog.ProbeSLO = time.Second
	cfg.Watchdog.StartupGrace = 8 * time.Second
	cfg.Watchdog.StateFile = stateFile
	cfg.Alerts.UnknownAfter = 5 * time.Second
	cfg.Alerts.ResolveAfter = 3 * time.Second // 30 s of engine time
	cfg.LoadBalancer.Kind = "haproxy"
	cfg.LoadBalancer.HAProxy.Backend, cfg.LoadBalancer.HAProxy.Server = "vllm", "node1"
	cfg.LoadBalancer.DrainTimeoutHung = time.Second
	cfg.LoadBalancer.RampDuration = 2 * time.Second
	cfg.Restart.Kind = "docker"
	cfg.Restart.Docker.Container = "vllm"
	cfg.Restart.Cooldown = time.Minute
	cfg.Restart.ReadyTimeout = 30 * time.Second
	cfg.Admission = simclient.ScaleAdmission(cfg.Admission, demoScale)
	cfg.Admission.Listen = "127.0.0.1:0"
	cfg.Status.Listen = "127.0.0.1:0"
	return &cfg
}

func (d *demo) run(ctx context.Context, verbose bool, stderr io.Writer) error {
	// The engine: the simulated vLLM, time x10, on a free loopback port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	d.addr = ln.Addr().String()
	ln.Close()
	d.cfg = enginesim.DefaultConfig()
	d.cfg.Scale = demoScale
	d.cfg.LoadTime = 30 * time.Second                                  // engine time: 3s of wall
	capacity := enginesim.MeasureCapacity(d.cfg, demoWork) * demoScale // calls per wall second

	fmt.Fprintf(d.out, "vigil demo: a simulated vLLM engine at %s (time x%d, capacity %.1f calls/s of 12k-token prompts),\n", d.addr, demoScale, capacity)
	fmt.Fprintf(d.out, "watched by vigil every 0.5s, hang_after 3s. Pages go to this terminal. No GPU needed.\n")
	if err := d.startEngine(ctx); err != nil {
		return err
	}
	// The engine in place at the end (it may have been restarted).
	defer func() { d.currentEngine().Close() }()

	// vigil: built by daemon.New, as `vigil run` builds it, with a
	// simulated load balancer and a restarter that restarts the in-process
	// engine where HAProxy and Docker would be.
	stateDir, err := os.MkdirTemp("", "vigil-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stateDir)
	cfg := demoConfig("http://"+d.addr, filepath.Join(stateDir, "state.json"))
	logger := logrus.New()
	logger.SetOutput(io.Discard)
	if verbose {
		logger.SetOutput(stderr)
	}
	lb := &demoLB{d: d, weight: 100}
	vd, err := daemon.New(ctx, cfg, logrus.NewEntry(logger), daemon.Options{
		Notifier: demoNotifier{d}, Drainer: lb, Restarter: demoRestarter{d},
		RecoveryPoll: 250 * time.Millisecond, OnCycle: d.onVerdict,
	})
	if err != nil {
		return fmt.Errorf("build vigil: %w", err)
	}
	limiterURL := "http://" + vd.AdmissionAddr()
	statusURL := "http://" + vd.StatusAddr()
	fmt.Fprintf(d.out, "vigil is built as `vigil run` builds it: watchdog, pager, admission limiter (%s),\n", limiterURL)
	fmt.Fprintf(d.out, "/status (%s), and recovery through %s\n", statusURL, lb)
	fmt.Fprintf(d.out, "and %s.\n\n", demoRestarter{d})
	d.say("engine loading (vLLM refuses connections while it loads the model)")

	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- vd.Run(runCtx) }()
	// stopVigil stops vigil as SIGTERM would and returns run's error; the
	// deferred call is a no-op once it has run.
	stopVigil := sync.OnceValue(func() error {
		stop()
		select {
		case err := <-ran:
			return err
		case <-time.After(15 * time.Second):
			return errors.New("vigil did not stop within 15s")
		}
	})
	defer stopVigil()

	load := &loadGen{d: d, url: cfg.Engine.URL + "/v1/completions"}
	go load.run(runCtx)
	// The hang chapter's load goes through vigil's limiter, which holds
	// the calls in flight on the hung engine for the restarted one.
	viaVigil := &loadGen{d: d, url: limiterURL + "/v1/completions"}
	go viaVigil.run(runCtx)

	sleep := func(dur time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(dur):
			return true
		}
	}
	select {
	case <-d.engineReady():
	case <-ctx.Done():
		return ctx.Err()
	}
	sleep(1500 * time.Millisecond)

	d.say("▶ light load: 0.3x capacity")
	load.setRate(0.3 * capacity)
	sleep(3 * time.Second)
	load.setRate(0)

	d.say("▶ overload through vigil's limiter: %.1fx capacity for %s, from clients that behave like the", overloadX, overloadFor)
	d.say("  OpenAI SDK (a %s timeout per attempt, %d retries, Retry-After obeyed, an Idempotency-Key per call).",
		wallTime(demoClient.Timeout), demoClient.MaxRetries)
	d.say("  vigil admits what the engine runs without queueing; the rest waits in vigil's bounded queue.")
	limited := d.overload(ctx, limiterURL+"/v1/completions", overloadX*capacity, vd.Limiter())
	d.say("  limiter: %s", limited.brief())

	d.say("▶ the same overload straight at the engine (no limiter in between). The queue grows, and the")
	d.say("  completion probe gets slow: from outside, this looks just like a hang. vigil looks at progress instead.")
	d.retell.Store(true)
	direct := d.overload(ctx, cfg.Engine.URL+"/v1/completions", overloadX*capacity, nil)
	d.say("  straight: %s", direct.brief())

	d.say("▶ light load again, through vigil's limiter; then a collective hang under load: the engine stops")
	d.say("  stepping, but /v1/models and /health still answer 200, and the gauges freeze where they were.")
	viaVigil.setRate(0.5 * capacity)
	sleep(time.Second)
	// The overload's incident resolves once the engine has stayed healthy
	// for alerts.resolve_after; the hang is a new incident after that.
	for calm := time.Now().Add(10 * time.Second); time.Now().Before(calm); {
		if _, inc := vd.Watchdog().Current(); inc == nil || !sleep(250*time.Millisecond) {
			break
		}
	}
	restartsBeforeHang := d.restartCount()
	d.currentEngine().Engine.Hang()
	hungAt := time.Now()

	// Wait until recovery has restored traffic and the engine is healthy.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if v, inc := vd.Watchdog().Current(); v.State == watchdog.StateHealthy && inc == nil && d.restartCount() > 0 && !vd.Recovery().Busy() {
			break
		}
		if !sleep(250 * time.Millisecond) {
			break
		}
	}
	viaVigil.setRate(0)
	sleep(time.Second)
	flush, cancelFlush := context.WithTimeout(ctx, 3*time.Second)
	_ = vd.Pager().Flush(flush)
	cancelFlush()
	st, err := readStatus(ctx, statusURL)
	if err != nil {
		return err
	}

	fmt.Fprintln(d.out)
	overload := "the overload was SATURATED and vigil never restarted it"
	switch {
	case restartsBeforeHang > 0:
		overload = fmt.Sprintf("vigil restarted the overloaded engine (%d restarts before the hang)", restartsBeforeHang)
	case !d.saw(watchdog.StateSaturated):
		overload = "vigil never called the overload SATURATED"
	}
	fmt.Fprintf(d.out, "Summary: %s; the hang was caught and\n", overload)
	fmt.Fprintf(d.out, "repaired (%d restart, %.0fs from hang to serving again, engine load time 3s included).\n",
		d.restartCount()-restartsBeforeHang, d.restoredAfter(hungAt))
	lost := uint64(0)
	for _, n := range st.Limiter.Lost {
		lost += n
	}
	fmt.Fprintf(d.out, "The calls in flight on the hung engine: %d held and sent to the restarted engine (%d of them streams\n"+
		"continued where they stopped), %d moved to a peer, %d lost.\n", st.Limiter.Held, st.Limiter.Continued, st.Limiter.Moved, lost)
	fmt.Fprintf(d.out, "\nThe same overload (%d calls in %s), with and without vigil's limiter in front of the engine:\n\n", limited.calls, overloadFor)
	printComparison(d.out, direct, limited)
	fmt.Fprintf(d.out, "\nStraight at the engine, every attempt queues behind the whole backlog and times out, and its\n")
	fmt.Fprintf(d.out, "retry is new work for the engine. Through vigil, the engine runs what it can finish in time, the\n")
	fmt.Fprintf(d.out, "rest is told when to come back, and a call's retry picks up the execution it already has.\n")
	fmt.Fprintf(d.out, "\nvigil's /status at the end: %s, %d restart; limiter %d attempts seen, %d executions, %d attached.\n",
		strings.ToUpper(st.Verdict.State), st.Recovery.RestartsInWindow, st.Limiter.Calls, st.Limiter.Executions, st.Limiter.CoalescedAttached)
	if err := stopVigil(); err != nil {
		return fmt.Errorf("vigil stopped on an error: %w", err)
	}
	return nil
}

// demoWork is every call of the demo: a 12,000-token prompt (2,000 of
// them a prefix every call shares) and a 300-token answer.
var demoWork = enginesim.Workload{PromptTokens: 12000, PrefixTokens: 2000, OutputTokens: 300}

// demoBody is a /v1/completions body for demoWork.
func demoBody() []byte {
	return simclient.SimCall{Prompt: demoWork.PromptTokens, Prefix: demoWork.PrefixTokens, PrefixID: "demo",
		Output: demoWork.OutputTokens}.Body("", false)
}

// saw reports whether vigil ever called the engine s.
func (d *demo) saw(s watchdog.State) bool { _, ok := d.seen.Load(s); return ok }

// onVerdict narrates each change of state.
func (d *demo) onVerdict(v watchdog.Verdict) {
	if v.State == d.lastState && !d.retell.Swap(false) {
		return
	}
	d.lastState = v.State
	d.seen.Store(v.State, true)
	why := map[watchdog.State]string{
		watchdog.StateSaturated: "→ progress is moving: busy, not broken. Page, tell the limiter, NEVER restart.",
		watchdog.StateHung:      "→ no progress for hang_after with work pending: drain, restart, restore.",
		watchdog.StateLoading:   "→ within startup grace: waiting for the engine to serve.",
		watchdog.StateHealthy:   "→ serving.",
		watchdog.StateUnknown:   "→ not sure yet (a stall shorter than hang_after); never restart on a guess.",
		watchdog.StateDown:      "→ refused / 5xx: drain, restart, restore.",
	}[v.State]
	d.say("vigil: %s", v.Reason)
	if why != "" {
		d.say("       %s", why)
	}
}

func (d *demo) restoredAfter(hungAt time.Time) float64 {
	if t := d.restoredAt.Load(); t > 0 {
		return time.Unix(0, t).Sub(hungAt).Seconds()
	}
	return time.Since(hungAt).Seconds()
}

func (d *demo) startEngine(ctx context.Context) error {
	s, err := enginesim.Start(context.WithoutCancel(ctx), d.addr, d.cfg)
	if err != nil {
		return fmt.Errorf("start the simulated engine: %w", err)
	}
	d.engineMu.Lock()
	d.engine, d.started = s, time.Now()
	d.engineMu.Unlock()
	go func() {
		select {
		case <-s.Ready():
			d.say("engine loaded and serving")
		case <-s.Done():
		}
	}()
	return nil
}

func (d *demo) currentEngine() *enginesim.Server {
	d.engineMu.Lock()
	defer d.engineMu.Unlock()
	return d.engine
}

func (d *demo) engineReady() <-chan struct{} { return d.currentEngine().Ready() }

func (d *demo) restartCount() int {
	d.engineMu.Lock()
	defer d.engineMu.Unlock()
	return d.restarts
}

// demoRestarter restarts the in-process engine, as Docker would restart
// its container: the old process goes, a new one loads.
type demoRestarter struct{ d *demo }

func (r demoRestarter) Restart(ctx context.Context) error {
	r.d.say("restart: stopping the hung engine and starting a new one (vigil holds the calls it had in flight, for the new one)")
	r.d.currentEngine().Close()
	r.d.engineMu.Lock()
	r.d.restarts++
	r.d.engineMu.Unlock()
	return r.d.startEngine(ctx)
}

func (r demoRestarter) Status(context.Context) (restarter.EngineStatus, error) {
	r.d.engineMu.Lock()
	defer r.d.engineMu.Unlock()
	return restarter.EngineStatus{Known: true, StartedAt: r.d.started, RestartCount: r.d.restarts, Running: true}, nil
}

func (r demoRestarter) String() string {
	return "a simulated docker container vllm (it restarts the in-process engine)"
}

// demoLB is a one-server load balancer in memory.
type demoLB struct {
	d       *demo
	mu      sync.Mutex
	drained bool
	weight  int
}

func (l *demoLB) Drain(context.Context) error {
	l.mu.Lock()
	l.drained = true
	l.mu.Unlock()
	l.d.say("load balancer: node1 → DRAIN (no new requests reach the hung engine)")
	return nil
}

func (l *demoLB) Ready(context.Context) error {
	l.mu.Lock()
	l.drained = false
	l.mu.Unlock()
	l.d.restoredAt.Store(time.Now().UnixNano())
	l.d.say("load balancer: node1 → READY")
	return nil
}

func (l *demoLB) SetWeight(_ context.Context, pct int) error {
	l.mu.Lock()
	l.weight = pct
	l.mu.Unlock()
	l.d.say("load balancer: node1 weight %d%%", pct)
	return nil
}

func (l *demoLB) State(context.Context) (balancer.State, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	status := "UP"
	if l.drained {
		status = "DRAIN"
	}
	return balancer.State{Known: true, Self: balancer.ServerStatus{
		Backend: "vllm", Server: "node1", Status: status, Drained: l.drained, Weight: l.weight, InitialWeight: 100,
	}}, nil
}

func (l *demoLB) String() string { return "a simulated HAProxy vllm/node1" }

// demoNotifier prints pages in the terminal: heads flush left, thread
// replies indented under them.
type demoNotifier struct{ d *demo }

func (n demoNotifier) Notify(_ context.Context, m alerts.Message) (bool, error) {
	text := m.Fallback()
	if m.Reply() {
		n.d.say("  PAGE ↳ %s", text)
	} else {
		n.d.say("PAGE ▶ %s", text)
	}
	return false, nil
}

// loadGen is the background load: an open-loop client sending demoWork
// calls at a set rate, bounded in number, without retries.
type loadGen struct {
	d    *demo
	url  string
	rate atomic.Uint64 // requests per second, as float64 bits
}

func (g *loadGen) setRate(r float64) { g.rate.Store(uint64(r * 1000)) }

func (g *loadGen) run(ctx context.Context) {
	client := &http.Client{Timeout: 20 * time.Second}
	body := demoBody()
	sem := make(chan struct{}, 600) // bounded: at most 600 requests open
	next := time.Now()
	for {
		rate := float64(g.rate.Load()) / 1000
		if rate <= 0 {
			next = time.Now().Add(50 * time.Millisecond)
		} else {
			next = next.Add(time.Duration(float64(time.Second) / rate))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		if rate <= 0 {
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			continue
		}
		go func() {
			defer func() { <-sem }()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.url, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
}

// overloadRun is what one overload chapter measured: at the clients
// (calls, attempts, answers, the limiter's 429/503 and their Retry-After),
// at the engine (the executions it received, its waiting queue's peak)
// and, through the limiter, what the limiter counted (retries attached to
// a running execution, or answered from its stored result).
type overloadRun struct {
	through     bool // through the limiter
	calls       int
	attempts    int
	answered    int
	timeouts    int
	cutOff      int // calls still going when the chapter ended
	rejected    int // 429 and 503 answers carrying Retry-After
	bare        int // 429 and 503 answers without one
	retryAfter  []int
	executions  uint64 // requests the engine received, vigil's probes included
	waitingPeak int
	attached    uint64
	stored      uint64
	capPeak     int
}

func (r overloadRun) brief() string {
	s := fmt.Sprintf("%d/%d calls answered, the engine's waiting queue peaked at %d", r.answered, r.calls, r.waitingPeak)
	if r.through {
		s += fmt.Sprintf(", cap up to %d in flight; %d answered 429/503 with Retry-After, %d retries attached", r.capPeak, r.rejected, r.attached)
	}
	return s
}

// overload sends overloadX times the engine's capacity at url for
// overloadFor, from SDK-like callers, and measures it. lim is the limiter
// the calls go through, nil when they go straight to the engine.
func (d *demo) overload(ctx context.Context, url string, rate float64, lim *admission.Limiter) overloadRun {
	run := overloadRun{through: lim != nil}
	clock := simclient.NewClock(demoScale)
	caller := simclient.NewCaller(url, "", clock, demoClient, uint64(time.Now().UnixNano()))
	// The limiter's Retry-After and the X-Stainless-Timeout it reads are
	// wall seconds (its durations were divided by demoScale).
	caller.HeaderScale = demoScale
	tap := &wireTap{base: caller.Client.Transport}
	caller.Client.Transport = tap
	defer caller.CloseIdle()

	eng := d.currentEngine().Engine
	before := eng.Stats().Received
	var limBefore admission.Stats
	if lim != nil {
		limBefore = lim.Stats()
	}
	// The engine's waiting queue and the limiter's cap, sampled.
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	sampled := make(chan struct{})
	var waitingPeak, capPeak int // the sampler's until sampled is closed
	go func() {
		defer close(sampled)
		t := time.NewTicker(25 * time.Millisecond)
		defer t.Stop()
		for {
			waitingPeak = max(waitingPeak, eng.Stats().Waiting)
			if lim != nil {
				capPeak = max(capPeak, lim.Stats().Cap)
			}
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
			}
		}
	}()

	callCtx, cutOff := context.WithCancel(ctx)
	defer cutOff()
	body := demoBody()
	type outcome struct {
		res simclient.Result
		cut bool // still going when the chapter ended
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
	)
	var wg sync.WaitGroup
	end := time.Now().Add(overloadFor)
	every := time.Duration(float64(time.Second) / rate)
	tag := "limited"
	if lim == nil {
		tag = "direct"
	}
arrivals:
	for next := time.Now(); next.Before(end); next = next.Add(every) {
		select {
		case <-ctx.Done():
			break arrivals // the calls end at once: callCtx is ctx's
		case <-time.After(time.Until(next)):
		}
		run.calls++
		wg.Add(1)
		go func(n int) {
			defer wg.Done()
			res := caller.Do(callCtx, simclient.Request{Body: body, Key: fmt.Sprintf("demo-%s-%d", tag, n)})
			o := outcome{res, !res.Delivered && callCtx.Err() != nil}
			mu.Lock()
			outcomes = append(outcomes, o)
			mu.Unlock()
		}(run.calls)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(overloadTail):
		cutOff()
		<-done
	}
	for _, o := range outcomes { // every call has ended: no lock needed
		run.attempts += o.res.Attempts
		run.timeouts += o.res.Timeouts
		if o.res.Delivered {
			run.answered++
		}
		if o.cut {
			run.cutOff++
		}
	}
	stopSampling()
	<-sampled
	run.waitingPeak, run.capPeak = waitingPeak, capPeak
	run.executions = eng.Stats().Received - before
	run.rejected, run.bare, run.retryAfter = tap.figures()
	if lim != nil {
		after := lim.Stats()
		run.attached = after.CoalescedAttached - limBefore.CoalescedAttached
		run.stored = after.CoalescedStored - limBefore.CoalescedStored
	}
	return run
}

// wireTap counts, at the clients' side of the wire, the 429 and 503
// answers and the Retry-After each carried.
type wireTap struct {
	base http.RoundTripper
	mu   sync.Mutex
	with int
	bare int
	secs []int
}

func (t *wireTap) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil || (resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable) {
		return resp, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if n, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil {
		t.with++
		t.secs = append(t.secs, n)
	} else {
		t.bare++
	}
	return resp, nil
}

func (t *wireTap) figures() (with, bare int, secs []int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.with, t.bare, slices.Clone(t.secs)
}

// printComparison prints the two overload runs side by side.
func printComparison(w io.Writer, direct, limited overloadRun) {
	tb := humanize.Table{Header: []string{"", "straight at the engine", "through vigil's limiter"}}
	tb.Add(fmt.Sprintf("calls (%s timeout, %d retries)", wallTime(demoClient.Timeout), demoClient.MaxRetries), direct.calls, limited.calls)
	tb.Add("attempts sent", direct.attempts, limited.attempts)
	tb.Add("requests the engine received (with vigil's probes)", direct.executions, limited.executions)
	tb.Add("engine waiting-queue peak", direct.waitingPeak, limited.waitingPeak)
	tb.Add("calls answered", direct.answered, limited.answered)
	tb.Add("attempts timed out at the client", direct.timeouts, limited.timeouts)
	tb.Add("429/503 with Retry-After", rejections(direct), rejections(limited))
	tb.Add("retries attached to their running execution", "-", limited.attached)
	tb.Add("retries answered from its stored result", "-", limited.stored)
	tb.Add("calls still retrying at the chapter's end", direct.cutOff, limited.cutOff)
	tb.Print(w)
}

// rejections is "N (Retry-After 1-4 s)", plus any answer that lacked one.
func rejections(r overloadRun) string {
	if r.rejected == 0 && r.bare == 0 {
		return "0"
	}
	s := strconv.Itoa(r.rejected)
	if len(r.retryAfter) > 0 {
		lo, hi := slices.Min(r.retryAfter), slices.Max(r.retryAfter)
		if lo == hi {
			s += fmt.Sprintf(" (Retry-After %d s)", lo)
		} else {
			s += fmt.Sprintf(" (Retry-After %d-%d s)", lo, hi)
		}
	}
	if r.bare > 0 {
		s += fmt.Sprintf(", %d without Retry-After", r.bare)
	}
	return s
}

// demoStatus is the part of vigil's /status the demo prints.
type demoStatus struct {
	Verdict struct {
		State string `json:"state"`
	} `json:"verdict"`
	Recovery struct {
		RestartsInWindow int `json:"restarts_in_window"`
	} `json:"recovery"`
	Limiter admission.Stats `json:"limiter"`
}

// readStatus reads vigil's /status, as an operator's curl would.
func readStatus(ctx context.Context, base string) (demoStatus, error) {
	var st demoStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, fmt.Errorf("vigil's /status: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("vigil's /status: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("vigil's /status: %w", err)
	}
	return st, nil
}

// wallTime is an engine-time duration as the demo's wall clock runs it.
func wallTime(d time.Duration) time.Duration { return d / demoScale }
