package recoverer

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/state"
)

// A guard that refuses the restart of a hung engine used to leave the host
// in rotation at full weight: half of all client requests failed for as
// long as the refusal lasted. Now the host is drained anyway and held out
// of rotation, unless the pool guard forbids it or there is no load
// balancer; every refusal that changes what happens is paged.
func TestRefusedRestartStillProtectsClients(t *testing.T) {
	type check struct {
		drained  bool             // host out of rotation while refused
		guards   []recovery.Guard // guard_refused steps reported, in order
		words    []string         // in the first refusal's detail
		restarts int              // by the end
		steps    string           // reported steps by the end ("" : not checked)
	}
	cases := []struct {
		name    string
		history func(now time.Time) []time.Time
		setup   func(h *harness)
		during  time.Duration // how long the refusal is watched
		after   func(h *harness)
		want    check
	}{
		{
			name:    "a hang during the cooldown: drained, held, restarted once the cooldown lifts",
			history: func(now time.Time) []time.Time { return []time.Time{now.Add(-20 * time.Minute)} },
			during:  5 * time.Minute,
			want: check{drained: true, guards: []recovery.Guard{recovery.GuardCooldown}, words: []string{"cooldown of 30m lifts", "out of rotation"}, restarts: 1,
				steps: "drain,guard_refused,restarting,restart,wait_ready,restore,resolved"},
		},
		{
			name: "a hang after the budget is spent: drained, held, never restarted; restored when the engine comes back by itself",
			history: func(now time.Time) []time.Time {
				return []time.Time{now.Add(-5 * time.Hour), now.Add(-4 * time.Hour), now.Add(-3 * time.Hour)}
			},
			during: 50 * time.Minute,
			after:  func(h *harness) { h.w.selfRestart() },
			want: check{drained: true, guards: []recovery.Guard{recovery.GuardBudget}, words: []string{"restart budget spent", "out of rotation"}, restarts: 0,
				// The engine's own restart starts its startup grace: a
				// different guard, paged, the host still held.
				steps: "drain,guard_refused,guard_refused,restore,resolved"},
		},
		{
			name: "the cooldown gives way to a spent budget: both refusals page",
			history: func(now time.Time) []time.Time {
				return []time.Time{now.Add(-5 * time.Hour), now.Add(-4 * time.Hour), now.Add(-20 * time.Minute)}
			},
			during: 50 * time.Minute,
			want:   check{drained: true, guards: []recovery.Guard{recovery.GuardCooldown, recovery.GuardBudget}, words: []string{"cooldown", "out of rotation"}, restarts: 1},
		},
		{
			name:    "the pool guard forbids the drain: paged as still taking traffic, nothing changed",
			history: func(now time.Time) []time.Time { return []time.Time{now.Add(-20 * time.Minute)} },
			setup:   func(h *harness) { h.w.others[0].Drained = true },
			during:  5 * time.Minute,
			want:    check{guards: []recovery.Guard{recovery.GuardCooldown}, words: []string{"cannot drain it either", "node1 (drained", "still takes traffic"}},
		},
		{
			name:    "no load balancer: paged as still taking traffic, no drain words",
			history: func(now time.Time) []time.Time { return []time.Time{now.Add(-20 * time.Minute)} },
			setup: func(h *harness) {
				h.opts.Drainer = balancer.NoDrain{}
				h.opts.LoadBalancer.Kind = "none"
			},
			during: 5 * time.Minute,
			want:   check{guards: []recovery.Guard{recovery.GuardCooldown}, words: []string{"load_balancer.kind none", "still takes traffic"}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, nil)
				h.store.Save(JournalSection, Journal{Incident: "old", Step: recovery.StepResolved, History: c.history(time.Now())})
				if c.setup != nil {
					c.setup(h)
				}
				h.rec = h.newRecovery(t)
				inc, v := hungIncident()
				h.rec.Recover(context.Background(), inc, v)
				time.Sleep(c.during)
				synctest.Wait()

				self, restarts := h.w.now()
				if self.Drained != c.want.drained || restarts != 0 {
					t.Fatalf("while refused: drained %v (want %v), restarts %d (want 0); steps %v", self.Drained, c.want.drained, restarts, h.rep.names())
				}
				var refusals []recovery.Step
				for _, s := range h.rep.snapshot() {
					if s.Name == recovery.StepGuardRefused {
						refusals = append(refusals, s)
					}
				}
				var guards []recovery.Guard
				for _, s := range refusals {
					guards = append(guards, s.Guard)
				}
				if joined(guards) != joined(c.want.guards) {
					t.Fatalf("refusals paged %v, want %v: %+v", guards, c.want.guards, refusals)
				}
				for _, w := range c.want.words {
					if !strings.Contains(refusals[0].Detail, w) {
						t.Errorf("first refusal %q lacks %q", refusals[0].Detail, w)
					}
				}
				if c.want.drained {
					if j := h.journal(t); !j.unfinished() || !j.Drained || j.Step != recovery.StepHeld {
						t.Errorf("the hold is not journaled for a restarted vigil to resume: %+v", j)
					}
					if !h.rec.Busy() {
						t.Error("a held host must keep the recovery busy, so the incident stays open")
					}
				} else {
					if m := h.w.mutating(); len(m) != 0 {
						t.Errorf("changes made %v, want none", m)
					}
					if h.opts.LoadBalancer.Kind == "none" && strings.Contains(refusals[0].Detail, "drain") {
						t.Errorf("drain words without a load balancer: %q", refusals[0].Detail)
					}
					return
				}
				if c.after != nil {
					c.after(h)
				}
				h.rec.Wait()
				if h.w.restarts != c.want.restarts || h.w.self.Drained || h.w.self.Weight != 100 {
					t.Errorf("at the end: restarts %d (want %d), host %+v", h.w.restarts, c.want.restarts, h.w.self)
				}
				if c.want.steps != "" {
					if got := joined(h.rep.names()); got != c.want.steps {
						t.Errorf("steps %s, want %s", got, c.want.steps)
					}
				}
				if got := strings.Join(h.w.limiter, ","); !strings.HasPrefix(got, "recovering=true") || !strings.HasSuffix(got, "recovering=false,slow_start") {
					t.Errorf("limiter told %s", got)
				}
			})
		})
	}
}

// vigil restarted while it holds a host drained resumes the hold: the
// host is never left drained with nobody to restore it.
func TestAHeldHostIsResumedAfterVigilRestarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.store.Save(JournalSection, Journal{Incident: "old", Step: recovery.StepResolved, History: []time.Time{
			time.Now().Add(-5 * time.Hour), time.Now().Add(-4 * time.Hour), time.Now().Add(-3 * time.Hour)}})
		h.rec = h.newRecovery(t)
		ctx, cancel := context.WithCancel(context.Background())
		inc, v := hungIncident()
		h.rec.Recover(ctx, inc, v)
		time.Sleep(time.Minute)
		synctest.Wait()
		cancel() // vigil stops
		h.rec.Wait()
		if j := h.journal(t); j.Step != recovery.StepHeld || !j.Drained || !j.unfinished() {
			t.Fatalf("journal after the stop: %+v", j)
		}
		rec2 := h.newRecovery(t)
		if err := rec2.Resume(context.Background()); err != nil || !rec2.Busy() {
			t.Fatalf("Resume: %v, busy %v", err, rec2.Busy())
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if self, restarts := h.w.now(); !self.Drained || restarts != 0 {
			t.Fatalf("resumed hold: drained %v restarts %d", self.Drained, restarts)
		}
		h.w.selfRestart()
		rec2.Wait()
		if h.w.restarts != 0 || h.w.self.Drained || h.rep.last().Name != recovery.StepResolved {
			t.Fatalf("restarts %d, host %+v, steps %v", h.w.restarts, h.w.self, h.rep.names())
		}
	})
}

// The two rows of the table against a real HAProxy: a hang during the
// cooldown and a hang after the budget is spent. The host is drained at
// HAProxy (clients go to the peer), paged, never restarted; when the
// engine comes back by itself it is put back at full weight.
func TestRefusedRestartDrainsAtARealHAProxy(t *testing.T) {
	cases := []struct {
		name    string
		history func(now time.Time) []time.Time
		guard   recovery.Guard
	}{
		{"a hang during the cooldown", func(now time.Time) []time.Time { return []time.Time{now.Add(-time.Minute)} }, recovery.GuardCooldown},
		{"a hang after the budget is spent", func(now time.Time) []time.Time {
			return []time.Time{now.Add(-5 * time.Hour), now.Add(-4 * time.Hour), now.Add(-3 * time.Hour)}
		}, recovery.GuardBudget},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			peer, engine := testinfra.SlowBackend(t, nil), testinfra.SlowBackend(t, nil)
			h := testinfra.StartHAProxyConfig(t, testinfra.HAProxyConfig{Backend: "vllm", Servers: []testinfra.Server{
				{Name: "node1", Addr: peer.Listener.Addr().String()},
				{Name: "node2", Addr: engine.Listener.Addr().String()},
			}})
			lb, rs := testConfigs()
			lb.HAProxy = configs.HAProxy{Socket: h.SocketURL(), Backend: "vllm", Server: "node2", Timeout: 2 * time.Second}
			lb.RampWeights, lb.RampDuration = []int{10, 100}, 100*time.Millisecond
			drainer, err := balancer.NewDrainer(lb)
			if err != nil {
				t.Fatal(err)
			}
			store := state.Memory()
			w := newWorld(store)
			store.Save(JournalSection, Journal{Incident: "old", Step: recovery.StepResolved, History: c.history(time.Now())})
			var back atomic.Bool // the engine serves again by itself
			rep := &steps{}
			rec, err := New(Options{
				LoadBalancer: lb, Restart: rs, Drainer: drainer, Restarter: fakeEngine{w}, Store: store, Reporter: rep,
				Ready: func(context.Context) error {
					if back.Load() {
						return nil
					}
					return errors.New("probe outstanding for 240s")
				},
				RetryMin: 50 * time.Millisecond, ReadyPoll: 50 * time.Millisecond, DrainPoll: 50 * time.Millisecond,
				Log: testLog(t),
			})
			if err != nil {
				t.Fatal(err)
			}
			inc, v := hungIncident()
			rec.Recover(context.Background(), inc, v)

			h.WaitStatus(t, "node2", "DRAIN", 5*time.Second)
			deadline := time.Now().Add(5 * time.Second)
			for {
				if s, ok := rep.find(recovery.StepGuardRefused); ok {
					if s.Guard != c.guard || !strings.Contains(s.Detail, "out of rotation") {
						t.Fatalf("refusal %+v, want %s saying the host is out of rotation", s, c.guard)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no refusal paged; steps %v", rep.names())
				}
				time.Sleep(20 * time.Millisecond)
			}
			// Clients reach only the peer while the engine is held.
			for range 10 {
				resp, err := http.Get(h.URL() + "/v1/models")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
			if st := h.Stat(t)["node2"]; st["status"] != "DRAIN" || st["stot"] != "0" {
				t.Fatalf("node2 while held: status %s, sessions total %s; want DRAIN and none", st["status"], st["stot"])
			}
			time.Sleep(300 * time.Millisecond) // several hold checks
			if _, n := w.now(); n != 0 || !rec.Busy() {
				t.Fatalf("restarts %d, busy %v while the guard refuses", n, rec.Busy())
			}

			back.Store(true)
			rec.Wait()
			h.WaitStatus(t, "node2", "no check", 5*time.Second) // in rotation (the test HAProxy runs no checks)
			if wt := h.Stat(t)["node2"]["weight"]; wt != "100" {
				t.Fatalf("node2 weight %s after restore, want 100", wt)
			}
			if _, n := w.now(); n != 0 || rep.last().Name != recovery.StepResolved {
				t.Fatalf("restarts %d, steps %v", n, rep.names())
			}
		})
	}
}
