package recoverer

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-dev/vigil/recovery"
)

// A refusal pages again when what it means for the clients changes: here
// the same guard (startup grace, an engine that keeps restarting itself)
// first leaves the host taking traffic (the load balancer is unreadable,
// so vigil cannot drain it), then, once the load balancer answers, holds
// it drained. The outcome used to be read back from its words, and "take
// it out of rotation" in the serving outcome read as "out of rotation":
// the hold was never paged and the operator kept believing the host still
// took traffic.
func TestARefusalPagesAgainWhenTheHostGoesFromServingToHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.w.started = time.Now().Add(-2 * time.Minute) // within the 10m startup grace
		h.w.stateErr = errors.New("haproxy runtime API: connection refused")
		h.w.readyFn = func(*world) error { return errors.New("probe outstanding for 240s") }
		inc, v := hungIncident()
		ctx, cancel := context.WithCancel(context.Background())
		defer func() { cancel(); h.rec.Wait() }()

		h.rec.Recover(ctx, inc, v)
		h.rec.Wait()

		// The engine restarts itself just before the grace lifts: the
		// same guard refuses again; the load balancer answers again.
		time.Sleep(7 * time.Minute)
		h.w.selfRestart()
		h.w.mu.Lock()
		h.w.stateErr = nil
		h.w.mu.Unlock()
		time.Sleep(2 * time.Minute)
		inc.Changed = time.Now()
		v.At = time.Now()
		h.rec.Recover(ctx, inc, v)
		time.Sleep(time.Minute)
		synctest.Wait()

		if self, _ := h.w.now(); !self.Drained {
			t.Fatalf("the host should be held drained by now; steps %v", h.rep.names())
		}
		var refusals []recovery.Step
		for _, s := range h.rep.snapshot() {
			if s.Name == recovery.StepGuardRefused {
				refusals = append(refusals, s)
			}
		}
		if len(refusals) != 2 {
			t.Fatalf("%d refusals paged, want 2 (serving, then held): %+v", len(refusals), refusals)
		}
		for i, want := range []bool{true, false} {
			if refusals[i].Guard != recovery.GuardStartupGrace {
				t.Errorf("refusal %d: guard %s, want %s", i, refusals[i].Guard, recovery.GuardStartupGrace)
			}
			if refusals[i].Serving != want {
				t.Errorf("refusal %d: Serving %v, want %v: %q", i, refusals[i].Serving, want, refusals[i].Detail)
			}
		}
	})
}
