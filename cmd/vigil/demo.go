package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/actions"
	"github.com/vigil-dev/vigil/alerts"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/state"
	"github.com/vigil-dev/vigil/watchdog"
)

// The demo's clock: the engine runs demoScale times faster than the wall,
// and vigil's thresholds are set in wall time to match (hang_after 3s of
// wall is 30s of engine time).
const demoScale = 10

// runDemo is `vigil demo`: the whole story on a simulated engine, no GPU,
// in under a minute: healthy, an overload (saturated: not restarting), a
// collective hang under load (hung: drain, restart, restore), healthy.
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

	lastState  watchdog.State
	restoredAt atomic.Int64 // UnixNano when traffic came back, 0 before
	sent       atomic.Int64
	ok         atomic.Int64
	failed     atomic.Int64
}

func (d *demo) say(format string, a ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "[%5.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, a...))
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
	d.cfg.LoadTime = 30 * time.Second // engine time: 3s of wall
	work := enginesim.Workload{PromptTokens: 12000, PrefixTokens: 2000, OutputTokens: 300}
	capacity := enginesim.MeasureCapacity(d.cfg, work) * demoScale // calls per wall second

	fmt.Fprintf(d.out, "vigil demo: a simulated vLLM engine at %s (time x%d, capacity %.1f calls/s of 12k-token prompts),\n", d.addr, demoScale, capacity)
	fmt.Fprintf(d.out, "watched by vigil every 0.5s, hang_after 3s. Pages go to this terminal. No GPU needed.\n\n")
	d.say("engine loading (vLLM refuses connections while it loads the model)")
	if err := d.startEngine(ctx); err != nil {
		return err
	}

	// vigil: the watchdog, the pager (printing here), and recovery with a
	// simulated load balancer and a restarter that restarts the in-process
	// engine.
	cfg := configs.Default()
	cfg.Node = "node1"
	cfg.Engine.URL = "http://" + d.addr
	cfg.Engine.RequestTimeout = 2 * time.Second
	cfg.Watchdog.Interval = 500 * time.Millisecond
	cfg.Watchdog.HangAfter = 3 * time.Second
	cfg.Watchdog.ProbeTimeout = 2 * time.Second
	cfg.Watchdog.ProbeSLO = time.Second
	cfg.Watchdog.StartupGrace = 8 * time.Second
	cfg.Alerts.UnknownAfter = 5 * time.Second
	cfg.LoadBalancer.DrainTimeoutHung = time.Second
	cfg.LoadBalancer.RampDuration = 2 * time.Second
	cfg.Restart.Cooldown = time.Minute
	cfg.Restart.ReadyTimeout = 30 * time.Second

	logger := logrus.New()
	logger.SetOutput(io.Discard)
	if verbose {
		logger.SetOutput(stderr)
	}
	log := logrus.NewEntry(logger)
	store := state.Memory()
	po := alerts.OptionsFromConfig(cfg)
	po.Plan = "Will drain node1 at the load balancer, restart the engine, restore traffic gradually (10% → 100% over 2s)."
	po.Limiter = false
	po.Store, po.Log = store, log
	pager, err := alerts.NewPager(demoNotifier{d}, po)
	if err != nil {
		return err
	}
	lb := &demoLB{d: d, weight: 100}
	recovery, err := actions.NewRecovery(actions.RecoveryOptions{
		LoadBalancer: cfg.LoadBalancer, Restart: cfg.Restart, StartupGrace: cfg.Watchdog.StartupGrace,
		Drainer: lb, Restarter: demoRestarter{d}, Ready: readyCheck(&cfg),
		Store: store, Reporter: pager, Log: log,
		DrainPoll: 250 * time.Millisecond, ReadyPoll: 250 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	wd, err := watchdog.New(watchdog.Options{
		Engine: cfg.Engine, Watchdog: cfg.Watchdog, UnknownAfter: cfg.Alerts.UnknownAfter, Node: cfg.Node,
		Pager: pager, Recoverer: recovery, Store: store, Log: log, OnCycle: d.onVerdict,
		EngineStarted: d.started,
	})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = pager.Run(runCtx) }()
	go func() { defer wg.Done(); _ = wd.Run(runCtx) }()
	defer wg.Wait()
	defer stop()

	load := &loadGen{d: d, url: cfg.Engine.URL + "/v1/completions"}
	go load.run(runCtx)

	sleep := func(dur time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(dur):
			return true
		}
	}
	<-d.engineReady()
	sleep(1500 * time.Millisecond)

	d.say("▶ light load: 0.3x capacity")
	load.setRate(0.3 * capacity)
	sleep(4 * time.Second)

	d.say("▶ overload: 2.5x capacity for 9s. The queue grows, and the completion probe gets slow:")
	d.say("  from outside, this looks just like a hang. vigil looks at progress instead.")
	load.setRate(2.5 * capacity)
	sleep(9 * time.Second)

	d.say("▶ load back to 0.5x; then a collective hang under load: the engine stops stepping,")
	d.say("  but /v1/models and /health still answer 200, and the gauges freeze where they were.")
	load.setRate(0.5 * capacity)
	sleep(500 * time.Millisecond)
	d.currentEngine().Engine.Hang()
	hungAt := time.Now()

	// Wait until recovery has restored traffic and the engine is healthy.
	deadline := time.Now().Add(35 * time.Second)
	for time.Now().Before(deadline) {
		if v, inc := wd.Current(); v.State == watchdog.StateHealthy && inc == nil && d.restartCount() > 0 && !recovery.Busy() {
			break
		}
		if !sleep(250 * time.Millisecond) {
			break
		}
	}
	load.setRate(0)
	sleep(time.Second)
	flush, cancelFlush := context.WithTimeout(ctx, 3*time.Second)
	_ = pager.Flush(flush)
	cancelFlush()

	v, _ := wd.Current()
	fmt.Fprintln(d.out)
	fmt.Fprintf(d.out, "Summary: the overload was SATURATED and vigil never restarted it; the hang was caught and\n")
	fmt.Fprintf(d.out, "repaired (%d restart, %.0fs from hang to serving again, engine load time 3s included).\n", d.restartCount(), d.restoredAfter(hungAt))
	fmt.Fprintf(d.out, "Requests: %d sent, %d completed, %d failed (the hang and the restart cost the in-flight work).\n", d.sent.Load(), d.ok.Load(), d.failed.Load())
	fmt.Fprintf(d.out, "Final state: %s. In production the admission limiter (on by default) would also have kept\n", strings.ToUpper(string(v.State)))
	fmt.Fprintf(d.out, "the overload's queue shallow; see `go run ./bench/...` for those figures.\n")
	stop()
	wg.Wait()
	recovery.Wait()
	d.currentEngine().Close()
	return nil
}

// onVerdict narrates each change of state.
func (d *demo) onVerdict(v watchdog.Verdict) {
	if v.State == d.lastState {
		return
	}
	d.lastState = v.State
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
	r.d.say("restart: stopping the hung engine (its in-flight requests are lost) and starting a new one")
	r.d.currentEngine().Close()
	r.d.engineMu.Lock()
	r.d.restarts++
	r.d.engineMu.Unlock()
	return r.d.startEngine(ctx)
}

func (r demoRestarter) Status(context.Context) (actions.EngineStatus, error) {
	r.d.engineMu.Lock()
	defer r.d.engineMu.Unlock()
	return actions.EngineStatus{Known: true, StartedAt: r.d.started, RestartCount: r.d.restarts, Running: true}, nil
}

func (r demoRestarter) String() string { return "the simulated engine" }

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

func (l *demoLB) State(context.Context) (actions.LBState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	status := "UP"
	if l.drained {
		status = "DRAIN"
	}
	return actions.LBState{Known: true, Self: actions.ServerStatus{
		Backend: "vllm", Server: "node1", Status: status, Drained: l.drained, Weight: l.weight, InitialWeight: 100,
	}}, nil
}

func (l *demoLB) String() string { return "the demo load balancer" }

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

// loadGen is an open-loop client: requests of 12,000 prompt tokens
// (2,000 shared) and 300 output tokens at a set rate, bounded in number.
type loadGen struct {
	d    *demo
	url  string
	rate atomic.Uint64 // requests per second, as float64 bits
}

func (g *loadGen) setRate(r float64) { g.rate.Store(uint64(r * 1000)) }

func (g *loadGen) run(ctx context.Context) {
	client := &http.Client{Timeout: 20 * time.Second}
	body, _ := json.Marshal(map[string]any{
		"prompt": "demo", "max_tokens": 300,
		"vigil_sim": enginesim.SimParams{PromptTokens: 12000, PrefixTokens: 2000, PrefixID: "demo", OutputTokens: 300},
	})
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
		g.d.sent.Add(1)
		go func() {
			defer func() { <-sem }()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.url, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				g.d.failed.Add(1)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				g.d.ok.Add(1)
			} else {
				g.d.failed.Add(1)
			}
		}()
	}
}
