package recoverer

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/restarter"
)

// restart.kind none with a hung engine: vigil cannot restart it, so it
// refuses once, saying why, and never retries. Behind a load balancer the
// refusal drains and holds the host as any refused restart does; without
// one the host keeps taking traffic. The status must not promise a next
// attempt: nothing lifts this refusal but the engine recovering.
func TestNoRestarterRefusesOnceAndNeverRetries(t *testing.T) {
	cases := []struct {
		name        string
		noDrain     bool
		wantServing bool
		wantStep    recovery.StepName
		wantDrained bool
	}{
		{name: "behind a load balancer the host is drained and held until the engine recovers",
			wantStep: recovery.StepHeld, wantDrained: true},
		{name: "without a load balancer the host still takes traffic and vigil only watches",
			noDrain: true, wantServing: true, wantStep: recovery.StepGuardRefused},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, func(o *Options) {
					o.Restarter = restarter.NoRestart{}
					if c.noDrain {
						o.Drainer = balancer.NoDrain{}
					}
				})
				inc, v := hungIncident()
				ctx, cancel := context.WithCancel(context.Background())
				defer func() { cancel(); h.rec.Wait() }()
				for range 10 { // the watchdog asks on every cycle while the incident is open
					h.rec.Recover(ctx, inc, v)
					time.Sleep(30 * time.Second)
					synctest.Wait()
				}

				var refusals []recovery.Step
				for _, s := range h.rep.snapshot() {
					switch s.Name {
					case recovery.StepGuardRefused:
						refusals = append(refusals, s)
					case recovery.StepFailed, recovery.StepRestarting, recovery.StepRestart:
						t.Errorf("reported %s (%q): with no restarter nothing is attempted", s.Name, s.Detail)
					}
				}
				if len(refusals) != 1 {
					t.Fatalf("%d refusals paged, want 1: %+v", len(refusals), refusals)
				}
				ref := refusals[0]
				if ref.Guard != recovery.Guard("no_restarter") || !strings.Contains(ref.Detail, "no restarter is configured") || !ref.Until.IsZero() {
					t.Errorf("refusal %+v, want guard no_restarter saying no restarter is configured, lifting at no set time", ref)
				}
				if !c.noDrain && (!strings.Contains(ref.Detail, "until the engine serves again") || strings.Contains(ref.Detail, "a restart is allowed")) {
					t.Errorf("refusal %q should say the host stays out until the engine serves, and promise no restart", ref.Detail)
				}
				if ref.Serving != c.wantServing {
					t.Errorf("refusal Serving %v, want %v: %q", ref.Serving, c.wantServing, ref.Detail)
				}
				if slices.Contains(h.w.mutating(), "restart") {
					t.Errorf("the restarter was called: %v", h.w.calls)
				}
				j := h.journal(t)
				if j.Step != c.wantStep || j.Attempts != 1 || !j.NextAttempt.IsZero() {
					t.Errorf("journal step %s, attempts %d, next attempt %v; want %s, 1 attempt, none due", j.Step, j.Attempts, j.NextAttempt, c.wantStep)
				}
				if self, _ := h.w.now(); self.Drained != c.wantDrained {
					t.Errorf("host drained %v, want %v", self.Drained, c.wantDrained)
				}
				if o := h.rec.Outlook(); o == nil || o.Guard != recovery.Guard("no_restarter") {
					t.Errorf("Outlook = %+v, want the no_restarter refusal", o)
				}
				if s := h.rec.Snapshot(); !s.NextAttempt.IsZero() {
					t.Errorf("status says a next attempt at %v", s.NextAttempt)
				}
			})
		})
	}
}

// The held host of a recovery without a restarter goes back into rotation
// once someone restarts the engine by hand.
func TestNoRestarterHeldHostIsRestoredWhenRestartedByHand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(o *Options) { o.Restarter = restarter.NoRestart{} })
		inc, v := hungIncident()
		h.rec.Recover(context.Background(), inc, v)
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		h.w.selfRestart()
		h.rec.Wait()
		if h.w.self.Drained || h.w.self.Weight != 100 {
			t.Fatalf("host %+v, want in rotation at 100%%", h.w.self)
		}
		last := h.rep.last()
		if last.Name != recovery.StepResolved || !strings.Contains(last.Detail, "recovered by itself") {
			t.Fatalf("last step %+v, want resolved by itself; steps %v", last, h.rep.names())
		}
	})
}
