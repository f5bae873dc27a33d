package recoverer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/watchdog"
)

// #40: a resumed restart waited 60 s (docker.stop_timeout + 30 s) with
// restart.kind command, where no container is left to stop.
func TestTheResumedRestartSettlesByTheRestartKind(t *testing.T) {
	cases := []struct {
		kind string
		want time.Duration
	}{
		{"docker", 30*time.Second + 30*time.Second},
		{"systemd", 2 * time.Minute},
		{"command", 5 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.kind, func(t *testing.T) {
			h := newHarness(t, func(o *Options) { o.Restart.Kind = tc.kind })
			if got := h.rec.o.RestartSettle; got != tc.want {
				t.Errorf("restart settle %s, want %s", got, tc.want)
			}
		})
	}
}

// #40: what a refusal says of the clients follows the incident's verdict:
// a DOWN engine's refusal said "clients keep reaching the hung engine".
func TestARefusalWithoutALoadBalancerNamesTheEnginesState(t *testing.T) {
	c := planConfig{NoDrain: true}
	cases := []struct {
		state      watchdog.State
		has, hasnt string
	}{
		{watchdog.StateDown, "clients keep reaching the engine while it is down", "hung"},
		{watchdog.StateHung, "clients keep reaching the hung engine", "down"},
	}
	for _, tc := range cases {
		w := stillServing(c, tc.state).words
		if !strings.Contains(w, tc.has) || strings.Contains(w, tc.hasnt) {
			t.Errorf("%s: %q", tc.state, w)
		}
	}
}

// #40: "retrying after 26.858357102s": a person reads seconds.
func TestAFailedAttemptSaysItsRetryInSeconds(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
	j := Journal{Incident: "inc-1", Verdict: watchdog.StateHung}
	for _, step := range []recovery.StepName{recovery.StepDrain, recovery.StepRestart} {
		_, a := plan(j, facts{Event: evFailed, Cfg: planConfig{Drainer: "haproxy vllm/node1"}, Step: step,
			Err: errors.New("boom"), Backoff: 26858357102 * time.Nanosecond}, t0)
		if a.Report == nil || !strings.HasSuffix(a.Report.Detail, "retrying after 27s") {
			t.Errorf("%s failed: %+v", step, a.Report)
		}
	}
}

// #40: with the state directory read-only the HUNG head said "Will run the
// restart command" and the refusal came only after a failed journal write.
// The guard refuses at once, drains nothing (a hold could not be
// journaled either), and says the host keeps its traffic.
func TestAStateFileVigilCannotWriteRefusesEveryRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(o *Options) {
			o.Unwritable = "directory /var/lib/vigil is not writable (watchdog.state_file)"
		})
		if ref := h.rec.Outlook(); ref == nil || ref.Guard != recovery.GuardStateUnwritable {
			t.Fatalf("outlook %+v, want the state_unwritable guard", ref)
		}
		inc, v := hungIncident()
		h.rec.Recover(context.Background(), inc, v)
		h.rec.Wait()
		if m := h.w.mutating(); len(m) != 0 {
			t.Fatalf("the recovery changed the world: %v", m)
		}
		s, ok := h.rep.find(recovery.StepGuardRefused)
		if !ok || s.Guard != recovery.GuardStateUnwritable || !s.Serving || !strings.Contains(s.Detail, "the host still takes traffic") {
			t.Fatalf("refusal %+v (reported %v)", s, h.rep.names())
		}
	})
}
