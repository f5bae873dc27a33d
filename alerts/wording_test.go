package alerts

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/recoverer"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/restarter"
	"github.com/vigil-dev/vigil/state"
	"github.com/vigil-dev/vigil/watchdog"
)

// countingRestarter restarts nothing and counts the calls; the engine is
// "started" at each.
type countingRestarter struct {
	mu      sync.Mutex
	n       int
	started time.Time
}

func (c *countingRestarter) Restart(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	c.started = time.Now()
	return nil
}

func (c *countingRestarter) Status(context.Context) (restarter.EngineStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return restarter.EngineStatus{Known: true, StartedAt: c.started, StartID: c.started.String(), Running: true}, nil
}

func (c *countingRestarter) String() string { return "docker container vllm" }

// A hang thread rendered for a node without a load balancer and without
// the limiter, with the steps the real recovery reports for that config:
// no page speaks of draining or of the limiter's slow start.
func TestPagesFollowTheConfiguration(t *testing.T) {
	cases := []struct {
		name    string
		edit    func(*configs.Config)
		limiter bool
		absent  []string
		present []string
	}{
		{name: "load_balancer.kind none, admission.enabled false",
			edit:    func(c *configs.Config) { c.LoadBalancer.Kind, c.Admission.Enabled = "none", false },
			absent:  []string{"drain", "limiter", "slow start", "rotation"},
			present: []string{"No load balancer is configured", "restarting the engine: restarting docker container vllm (expected DOWN while it restarts)"}},
		{name: "HAProxy, admission.enabled false",
			edit:    func(c *configs.Config) { c.Admission.Enabled = false },
			absent:  []string{"limiter", "slow start"},
			present: []string{"Will drain vllm/node1 at HAProxy", "haproxy"}},
		{name: "load_balancer.kind none, the limiter on",
			edit:    func(c *configs.Config) { c.LoadBalancer.Kind = "none" },
			limiter: true,
			absent:  []string{"drain"},
			present: []string{"admission limiter slow start"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := demoConfig()
			tc.edit(&cfg)
			n := &memNotifier{}
			o := OptionsFromConfig(cfg)
			p := newTestPager(t, n, o)

			drainer, err := balancer.NewDrainer(cfg.LoadBalancer)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := drainer.(*balancer.HAProxy); ok {
				drainer = fakeDrainer{}
			}
			ro := recoverer.Options{
				LoadBalancer: cfg.LoadBalancer, Restart: cfg.Restart,
				Drainer: drainer, Restarter: &countingRestarter{}, Ready: func(context.Context) error { return nil },
				Store: state.Memory(), Reporter: p, ReadyPoll: time.Millisecond, DrainPoll: time.Millisecond,
			}
			ro.LoadBalancer.DrainTimeoutHung, ro.LoadBalancer.RampDuration = 0, 0
			if tc.limiter {
				ro.Limiter = nopLimiter{}
			}
			rec, err := recoverer.New(ro)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			inc := &watchdog.Incident{ID: "inc-cfg", Opened: now, State: watchdog.StateHung, Peak: watchdog.StateHung}
			p.Observe(hung(now), inc)
			rec.Recover(context.Background(), *inc, hung(now))
			rec.Wait()
			resolveNow(p, inc, time.Now())

			var all []string
			for _, m := range delivered(t, p, n) {
				all = append(all, m.Text)
			}
			text := strings.Join(all, "\n")
			for _, w := range tc.absent {
				if strings.Contains(strings.ToLower(text), w) {
					t.Errorf("pages say %q:\n%s", w, text)
				}
			}
			for _, w := range tc.present {
				if !strings.Contains(text, w) {
					t.Errorf("pages lack %q:\n%s", w, text)
				}
			}
		})
	}
}

type nopLimiter struct{}

func (nopLimiter) SetRecovering(bool) {}
func (nopLimiter) SlowStart()         {}

// fakeDrainer stands in for HAProxy where only the words matter.
type fakeDrainer struct{}

func (fakeDrainer) Drain(context.Context) error          { return nil }
func (fakeDrainer) Ready(context.Context) error          { return nil }
func (fakeDrainer) SetWeight(context.Context, int) error { return nil }
func (fakeDrainer) State(context.Context) (balancer.State, error) {
	return balancer.State{}, nil
}
func (fakeDrainer) String() string { return "haproxy vllm/node1" }

// An incident hung ~25 s (the stall began 20 s before the first HUNG
// verdict, vigil restarted it 5 s later) was resolved as "was HUNG for
// 2m", counted from the incident's opening to its close; vigil's own
// restart then read as a new "HUNG → DOWN".
func TestResolvedSaysHowLongTheEngineWasHungAndHowLongRecoveryTook(t *testing.T) {
	n := &memNotifier{}
	clk, sl := newClock(), &sleeps{}
	p := newTestPager(t, n, testOptions(clk, sl))
	start := clk.Now()
	inc := &watchdog.Incident{ID: "inc-25", Opened: start, State: watchdog.StateHung, Peak: watchdog.StateHung}
	v := hung(start)
	v.Evidence.Stalled, v.Evidence.SinceProgress = 20*time.Second, 20*time.Second
	p.Observe(v, inc)
	step := func(name recovery.StepName, detail string) {
		p.RecoveryStep(recovery.Step{Incident: "inc-25", Name: name, OK: true, Detail: detail, At: clk.Now()})
	}
	clk.Advance(2 * time.Second)
	step(recovery.StepDrain, "haproxy vllm/node1 DRAIN")
	clk.Advance(3 * time.Second)
	step(recovery.StepRestarting, "restarting docker container vllm (expected DOWN while it restarts)")
	for range 3 { // the engine is down while it restarts
		clk.Advance(5 * time.Second)
		p.Observe(watchdog.Verdict{State: watchdog.StateDown, Reason: "connection refused", At: clk.Now()}, inc)
	}
	step(recovery.StepRestart, "restarted docker container vllm in 4s")
	for range 4 {
		clk.Advance(15 * time.Second)
		p.Observe(watchdog.Verdict{State: watchdog.StateLoading, At: clk.Now()}, inc)
	}
	step(recovery.StepWaitReady, "engine ready 60s after the restart")
	clk.Advance(10 * time.Second)
	step(recovery.StepRestore, "haproxy vllm/node1 READY")
	step(recovery.StepResolved, "recovery took 1m30s")
	clk.Advance(15 * time.Second)
	resolveNow(p, inc, clk.Now())

	pages := delivered(t, p, n)
	if m := lastOfKind(pages, KindChange); m.Kind != "" {
		t.Errorf("vigil's own restart paged as a change: %s", m.Text)
	}
	resolve := lastOfKind(pages, KindResolve).Text
	// Stall from 11:59:40 to the restart at 12:00:05; recovery from the
	// drain at 12:00:02 to 12:01:30.
	if !strings.Contains(resolve, "was HUNG for 25s; recovery took 88s") {
		t.Fatalf("resolve = %q, want it to say the engine was hung 25s and recovery took 88s", resolve)
	}
}

// Every HUNG page says what will really happen given the guards: a
// refused restart is never announced as "will drain … restart …".
func TestHungPagesSayWhatTheGuardsAllow(t *testing.T) {
	clk, sl := newClock(), &sleeps{}
	lifts := clk.Now().Add(20 * time.Minute)

	t.Run("a new incident's head, with the cooldown running", func(t *testing.T) {
		n := &memNotifier{}
		o := testOptions(clk, sl)
		o.Outlook = func() *recovery.Refusal {
			return &recovery.Refusal{Guard: recovery.GuardCooldown, Until: lifts, Reason: "cooldown"}
		}
		p := newTestPager(t, n, o)
		p.Observe(hung(clk.Now()), &watchdog.Incident{ID: "inc-cd", Opened: clk.Now(), State: watchdog.StateHung})
		head := delivered(t, p, n)[0].Text
		if strings.Contains(head, "Will drain") || !strings.Contains(head, "Not restarting: vigil restarted the engine recently (restart.cooldown) until 12:20 UTC (in 20m).") ||
			!strings.Contains(head, "vllm/node1 at HAProxy out of rotation") {
			t.Errorf("head = %s", head)
		}
	})

	t.Run("after a refusal that could not drain, the next page says the host still takes traffic", func(t *testing.T) {
		n := &memNotifier{}
		p := newTestPager(t, n, testOptions(clk, sl))
		inc := &watchdog.Incident{ID: "inc-pool", Opened: clk.Now(), State: watchdog.StateHung}
		p.Observe(hung(clk.Now()), inc)
		p.RecoveryStep(recovery.Step{Incident: "inc-pool", Name: recovery.StepGuardRefused, Guard: recovery.GuardBudget, Until: lifts, At: clk.Now(), Serving: true,
			Detail: "restart budget spent; cannot drain it either: another member is out of rotation; the host still takes traffic"})
		clk.Advance(time.Minute)
		down := watchdog.Verdict{State: watchdog.StateDown, Reason: "connection refused on every endpoint", At: clk.Now()}
		p.Observe(down, inc)
		got := delivered(t, p, n)
		last := got[len(got)-1]
		if last.Kind != KindChange || strings.Contains(last.Text, "Will drain") ||
			!strings.Contains(last.Text, "Not restarting: the restart budget is spent") || !strings.Contains(last.Text, "the host still takes traffic") {
			t.Errorf("change page = %s", last.Text)
		}
	})
}

// The watchdog marks a DOWN caused by vigil's own restart (Recovering):
// it is not paged, even before the "restarting" step arrives.
func TestADownTheWatchdogMarksAsVigilsRestartIsNotPaged(t *testing.T) {
	n := &memNotifier{}
	clk, sl := newClock(), &sleeps{}
	p := newTestPager(t, n, testOptions(clk, sl))
	inc := &watchdog.Incident{ID: "inc-rec", Opened: clk.Now(), State: watchdog.StateHung}
	p.Observe(hung(clk.Now()), inc)
	clk.Advance(15 * time.Second)
	p.Observe(watchdog.Verdict{State: watchdog.StateDown, Reason: "connection refused", At: clk.Now(), Recovering: true}, inc)
	if got := delivered(t, p, n); len(got) != 1 || got[0].Kind != KindHead {
		t.Fatalf("pages %+v, want only the head", got)
	}
}

// A restart that did not help, and a second one that did: the RESOLVED
// page said "was HUNG for 15m30s" of a stall of 4m54s, because every
// HUNG verdict after a failed attempt started a new stretch from the
// stall's beginning, counting it again.
func TestARetriedRestartCountsTheStallOnce(t *testing.T) {
	n := &memNotifier{}
	clk, sl := newClock(), &sleeps{}
	p := newTestPager(t, n, testOptions(clk, sl))
	start := clk.Now()
	began := start.Add(-3 * time.Minute) // the counters last moved here
	inc := &watchdog.Incident{ID: "inc-retry", Opened: start, State: watchdog.StateHung, Peak: watchdog.StateHung}
	hungNow := func() {
		v := hung(clk.Now())
		v.Evidence.Stalled = clk.Now().Sub(began)
		v.Evidence.SinceProgress = v.Evidence.Stalled
		p.Observe(v, inc)
	}
	step := func(name recovery.StepName, ok bool, detail string) {
		p.RecoveryStep(recovery.Step{Incident: inc.ID, Name: name, OK: ok, Detail: detail, At: clk.Now()})
	}
	attempt := func(ready bool) {
		clk.Advance(5 * time.Second)
		step(recovery.StepRestarting, true, "restarting docker container vllm (expected DOWN while it restarts)")
		for range 3 {
			clk.Advance(5 * time.Second)
			p.Observe(watchdog.Verdict{State: watchdog.StateDown, Reason: "connection refused", At: clk.Now(), Recovering: true}, inc)
		}
		step(recovery.StepRestart, true, "restarted docker container vllm in 4s")
		clk.Advance(30 * time.Second)
		if !ready {
			step(recovery.StepFailed, false, "engine did not become ready; staying drained; retrying after 30s")
			return
		}
		step(recovery.StepWaitReady, true, "engine ready 30s after the restart")
	}
	for range 3 {
		hungNow()
		clk.Advance(15 * time.Second)
	}
	attempt(false)
	for range 4 { // the engine came back as frozen as it was
		clk.Advance(15 * time.Second)
		hungNow()
	}
	attempt(true)
	step(recovery.StepRestore, true, "haproxy vllm/node1 READY")
	step(recovery.StepResolved, true, "recovery finished")
	clk.Advance(15 * time.Second)
	resolveNow(p, inc, clk.Now())

	resolve := lastOfKind(delivered(t, p, n), KindResolve).Text
	// The counters last moved at 11:57:00; the second restart began at
	// 12:02:40: one stall of 5m40s, whatever the attempts in between.
	if !strings.Contains(resolve, "was HUNG for 5m40s;") {
		t.Fatalf("resolve = %q, want the stall of 5m40s counted once", resolve)
	}
}

// restart.kind none on a hung engine paged "restarting the engine:
// restarting none…" then "recovery step failed", three times in 75 s, for
// a restart that could never happen. Now one page says the engine is hung,
// that no restarter is configured and what the operator must do; with a
// load balancer the drain that really happens is paged too.
func TestNoRestarterPagesWhatToDoAndNoRestart(t *testing.T) {
	cases := []struct {
		name    string
		lb      string
		pages   int
		present []string
	}{
		{"no load balancer: one page", "none", 1, []string{
			":red_circle: HUNG on node1", "No restarter is configured (restart.kind none)",
			"the host still takes traffic", "restart the engine by hand"}},
		{"HAProxy: the head and the drain", "haproxy", 2, []string{
			":red_circle: HUNG on node1", "No restarter is configured (restart.kind none)",
			"Holding vllm/node1 at HAProxy out of rotation", "restart the engine by hand", "drained at the load balancer"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := demoConfig()
				cfg.Restart.Kind, cfg.LoadBalancer.Kind = "none", tc.lb
				n := &memNotifier{}
				var drainer balancer.Drainer = balancer.NoDrain{}
				if tc.lb == "haproxy" {
					drainer = fakeDrainer{}
				}
				restarter, err := restarter.New(cfg.Restart, nil)
				if err != nil {
					t.Fatal(err)
				}
				var rec *recoverer.Recovery
				o := OptionsFromConfig(cfg)
				o.Outlook = func() *recovery.Refusal { return rec.Outlook() }
				p := newTestPager(t, n, o)
				rec, err = recoverer.New(recoverer.Options{
					LoadBalancer: cfg.LoadBalancer, Restart: cfg.Restart,
					Drainer: drainer, Restarter: restarter,
					Ready: func(context.Context) error { return errors.New("probe timed out after 90s") },
					Store: state.Memory(), Reporter: p,
				})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				inc := &watchdog.Incident{ID: "inc-none", Opened: time.Now(), State: watchdog.StateHung, Peak: watchdog.StateHung}
				for range 20 { // 5 minutes of HUNG verdicts, asked for recovery as the watchdog asks
					v := hung(time.Now())
					v.Recovering = rec.Busy()
					p.Observe(v, inc)
					if !v.Recovering {
						rec.Recover(ctx, *inc, v)
					}
					time.Sleep(15 * time.Second)
				}
				cancel()
				rec.Wait()

				runCtx, stop := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- p.Run(runCtx) }()
				flush(t, p)
				stop()
				<-done

				got := n.got()
				var all []string
				for _, m := range got {
					all = append(all, m.Text)
				}
				text := strings.Join(all, "\n")
				if len(got) != tc.pages {
					t.Errorf("%d pages, want %d:\n%s", len(got), tc.pages, text)
				}
				for _, w := range tc.present {
					if !strings.Contains(text, w) {
						t.Errorf("pages lack %q:\n%s", w, text)
					}
				}
				for _, w := range []string{"restarting", "restarted", "Will restart", "will restart", "step failed", "attempt", "retrying", "lifts"} {
					if strings.Contains(text, w) {
						t.Errorf("pages say %q with restart.kind none:\n%s", w, text)
					}
				}
			})
		})
	}
}
