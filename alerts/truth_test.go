package alerts

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/recoverer"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/restarter"
	"github.com/vigil-dev/vigil/state"
	"github.com/vigil-dev/vigil/watchdog"
)

// #40: every sentence a page says about the world is derived from the
// state it describes. Each row is a situation seen from outside where a
// page said something untrue (false: the clause that was said) and what
// it must say instead (true). The first page of the incident is judged.
func TestHeadPagesSayOnlyWhatIsTrue(t *testing.T) {
	clk := newClock()
	// A restarter and a recovery built as the daemon builds them, so the
	// outlook is the real guards'.
	outlook := func(t *testing.T, cfg configs.Config, unwritable string) func() *recovery.Refusal {
		drainer := balancer.Drainer(fakeDrainer{})
		if cfg.LoadBalancer.Kind == "none" {
			drainer = balancer.NoDrain{}
		}
		restarter, err := restarter.New(cfg.Restart, nil)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := recoverer.New(recoverer.Options{
			LoadBalancer: cfg.LoadBalancer, Restart: cfg.Restart, Unwritable: unwritable,
			Drainer: drainer, Restarter: restarter, Ready: func(context.Context) error { return nil },
			Store: state.Memory(), Now: clk.Now,
		})
		if err != nil {
			t.Fatal(err)
		}
		return rec.Outlook
	}
	command := func(c *configs.Config) {
		c.Restart.Kind, c.Restart.Command.Argv = "command", []string{"/usr/local/bin/restart-engine"}
	}
	noLB := func(c *configs.Config) { c.LoadBalancer.Kind = "none" }
	cases := []struct {
		name       string
		edit       func(*configs.Config)
		unwritable string
		v          watchdog.Verdict
		false      []string
		true       []string
	}{
		{name: "no load balancer, the limiter on: in-flight calls are held, not lost",
			edit: noLB, v: hung(clk.Now()),
			false: []string{"so requests in flight are lost"},
			true:  []string{"Will restart container vllm.", "calls through vigil's limiter are held for the restarted engine or moved to a peer; calls sent straight to the engine are lost."}},
		{name: "no load balancer, no limiter: in-flight requests are lost",
			edit: func(c *configs.Config) { noLB(c); c.Admission.Enabled = false }, v: hung(clk.Now()),
			true: []string{"No load balancer is configured (load_balancer.kind none), so requests in flight are lost."}},
		{name: "a state directory vigil cannot write: no restart is announced",
			edit: command, unwritable: "directory /var/lib/vigil is not writable (watchdog.state_file)", v: hung(clk.Now()),
			false: []string{"Will run the restart command", "Will drain", "Holding"},
			true:  []string{"Not restarting: the state file cannot be written (watchdog.state_file)", "It cannot be taken out of rotation either: the host still takes traffic."}},
		{name: "a state directory vigil cannot write, no load balancer",
			edit: func(c *configs.Config) { command(c); noLB(c) }, unwritable: "read-only file system", v: hung(clk.Now()),
			false: []string{"Will run the restart command"},
			true:  []string{"Not restarting: the state file cannot be written", "No load balancer is configured, so the host still takes traffic."}},
		{name: "an agent-check balancer is a load balancer: calls are not said lost",
			edit: func(c *configs.Config) {
				c.LoadBalancer.Kind, c.LoadBalancer.Agent.Listen = "agent", "127.0.0.1:9005"
			}, v: hung(clk.Now()),
			false: []string{"No load balancer is configured", "lost"},
			true:  []string{"Will drain the host at HAProxy (agent-check on 127.0.0.1:9005), restart container vllm"}},
		{name: "the restart command allowed is announced",
			edit: command, v: hung(clk.Now()),
			true: []string{"Will drain vllm/node1 at HAProxy, run the restart command, restore traffic gradually"}},
		{name: "saturated with the load going around the limiter: it sheds nothing",
			v:     saturated(clk.Now(), 99),
			false: []string{"shedding"},
			true:  []string{"No call came through vigil's limiter lately: the load reaches the engine around it"}},
		{name: "saturated with the limiter admitting every call: shedding 0% is not shedding",
			v:     shedding(saturated(clk.Now(), 99), 0, 240, 0),
			false: []string{"shedding excess"},
			true:  []string{"The limiter sheds nothing: it admitted all 240 calls lately."}},
		{name: "saturated at the limiter: vigil's queue is in the figures",
			v: func() watchdog.Verdict {
				v := shedding(saturated(clk.Now(), 0), 0.1, 400, 22)
				v.Evidence.Running = 2
				return v
			}(),
			true: []string{"engine 0 waiting, 2 running", "22 queued in vigil's limiter", "The limiter is shedding excess load: 10% of 400 calls answered 429/503 with Retry-After."}},
		{name: "saturated with the limiter queueing and not shedding",
			v:    shedding(saturated(clk.Now(), 3), 0, 80, 14),
			true: []string{"14 queued in vigil's limiter", "The limiter sheds nothing yet: it holds the excess in its queue (14 calls)."}},
		{name: "saturated without a limiter says so",
			edit: func(c *configs.Config) { c.Admission.Enabled = false },
			v:    saturated(clk.Now(), 99),
			true: []string{"No admission limiter is in front of it (admission.enabled is off)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := demoConfig()
			if tc.edit != nil {
				tc.edit(&cfg)
			}
			n := &memNotifier{}
			o := OptionsFromConfig(cfg)
			o.Now, o.Sleep = clk.Now, (&sleeps{}).Sleep
			if tc.v.State.NeedsRecovery() {
				o.Outlook = outlook(t, cfg, tc.unwritable)
			}
			p := newTestPager(t, n, o)
			p.Observe(tc.v, &watchdog.Incident{ID: "inc-truth", Opened: clk.Now(), State: tc.v.State})
			got := delivered(t, p, n)
			if len(got) == 0 {
				t.Fatal("no page")
			}
			head := got[0].Text
			for _, s := range tc.false {
				if strings.Contains(head, s) {
					t.Errorf("the page says %q, which is untrue here:\n%s", s, head)
				}
			}
			for _, s := range tc.true {
				if !strings.Contains(head, s) {
					t.Errorf("the page lacks %q:\n%s", s, head)
				}
			}
		})
	}
}

// #40: vigil was restarted during its own restart step; the resumed vigil
// restarted the engine again, 96 s after the stall began. RESOLVED said
// "was HUNG for 20s" (the first restarting step closed the stretch and the
// resumed vigil kept it closed).
func TestResolvedCountsTheHangAcrossVigilsOwnRestart(t *testing.T) {
	clk, sl := newClock(), &sleeps{}
	store := state.Memory()
	o := testOptions(clk, sl)
	o.Store = store
	n := &memNotifier{}
	p := newTestPager(t, n, o)
	start := clk.Now()
	inc := &watchdog.Incident{ID: "inc-96", Opened: start, State: watchdog.StateHung, Peak: watchdog.StateHung}
	v := hung(start)
	v.Evidence.Stalled, v.Evidence.SinceProgress = 15*time.Second, 15*time.Second
	p.Observe(v, inc) // the stall began 15 s ago
	step := func(p *Pager, name recovery.StepName, detail string) {
		p.RecoveryStep(recovery.Step{Incident: "inc-96", Name: name, OK: true, Detail: detail, At: clk.Now()})
	}
	clk.Advance(5 * time.Second)
	step(p, recovery.StepRestarting, "restarting docker container vllm (expected DOWN while it restarts)")
	p.save()
	// vigil stops here; the restart never ran. A new vigil reads the state.
	clk.Advance(40 * time.Second)
	p2 := newTestPager(t, n, o)
	for range 3 {
		clk.Advance(12 * time.Second)
		hv := hung(clk.Now())
		hv.Evidence.Stalled = clk.Now().Sub(start.Add(-15 * time.Second))
		p2.Observe(hv, inc)
	}
	// 96 s after the stall began: the resumed recovery restarts it.
	clk.Advance(start.Add(81 * time.Second).Sub(clk.Now()))
	step(p2, recovery.StepRestarting, "restarting docker container vllm (expected DOWN while it restarts)")
	clk.Advance(4 * time.Second)
	step(p2, recovery.StepRestart, "restarted docker container vllm in 4s")
	clk.Advance(30 * time.Second)
	step(p2, recovery.StepWaitReady, "engine ready 30s after the restart")
	step(p2, recovery.StepResolved, "recovery took 1m")
	clk.Advance(15 * time.Second)
	resolveNow(p2, inc, clk.Now())
	resolve := lastOfKind(delivered(t, p2, n), KindResolve).Text
	if !strings.Contains(resolve, "was HUNG for 96s;") {
		t.Fatalf("resolve = %q, want the hang counted to the restart that ran, 96s", resolve)
	}
}

// #40: /status's "recovery would" said "Will run the restart command"
// while the state file could not be written: it reads the outlook too.
func TestStatusPlanSaysWhatTheGuardsAllow(t *testing.T) {
	cfg := demoConfig()
	cfg.Restart.Kind, cfg.Restart.Command.Argv = "command", []string{"/usr/local/bin/restart-engine"}
	if got := PlanNow(cfg, nil, t0).Summary; !strings.HasPrefix(got, "Will drain vllm/node1 at HAProxy, run the restart command") {
		t.Errorf("no guard: %s", got)
	}
	got := PlanNow(cfg, &recovery.Refusal{Guard: recovery.GuardStateUnwritable}, t0).Summary
	if strings.Contains(got, "Will ") || !strings.Contains(got, "Not restarting: the state file cannot be written") ||
		!strings.Contains(got, "the host still takes traffic") {
		t.Errorf("state not writable: %s", got)
	}
}
