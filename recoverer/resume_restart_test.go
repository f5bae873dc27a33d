package recoverer

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-dev/vigil/recovery"
)

// vigil stopped during its own restart, with a restarter that cannot tell
// the engine's start times (a plain command): the next vigil decides from
// the engine whether the restart ran. Still answering without completing
// a request means still hung: it is restarted again (a second restart of a
// hung engine loses nothing). Not answering means it restarts or loads:
// it is not restarted twice. Either way the host is back in rotation long
// before ready_timeout (20m).
func TestAResumedRestartDecidesFromTheEngineWhetherItRan(t *testing.T) {
	cases := []struct {
		name   string
		event  string
		detail string // the resumed restart step says
	}{
		{name: "killed before the command did anything: the engine is still hung and is restarted",
			event: "restart#1:before", detail: "restarted docker container vllm"},
		{name: "killed after the command restarted the engine: it loads and is not restarted twice",
			event: "restart#1:after", detail: "the engine does not answer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, nil)
				h.w.unknown, h.w.sessions = true, 1
				h.recoverUntilKilled(c.event)
				if !h.w.dead {
					t.Fatalf("the kill point %s was never reached; calls: %v", c.event, h.w.calls)
				}

				h.w.mu.Lock()
				h.w.dead, h.w.kill = false, nil
				h.w.mu.Unlock()
				resumed := time.Now()
				rec2 := h.newRecovery(t)
				if err := rec2.Resume(context.Background()); err != nil {
					t.Fatal(err)
				}
				rec2.Wait()

				if h.w.restarts != 1 {
					t.Errorf("engine restarted %d times, want once; calls %v", h.w.restarts, h.w.calls)
				}
				var restart recovery.Step
				for _, s := range h.rep.snapshot() {
					if s.Name == recovery.StepRestart {
						restart = s
					}
					if strings.Contains(s.Detail, "cannot tell whether it ran") {
						t.Errorf("step %s says %q: the engine tells", s.Name, s.Detail)
					}
				}
				if !strings.Contains(restart.Detail, c.detail) {
					t.Errorf("restart step %q, want it to say %q", restart.Detail, c.detail)
				}
				last := h.rep.last()
				if last.Name != recovery.StepResolved || last.At.Sub(resumed) > 5*time.Minute {
					t.Errorf("last step %s %s after the resume, want resolved within 5m; steps %v", last.Name, last.At.Sub(resumed), h.rep.names())
				}
				if j := h.journal(t); j.Drained || len(j.History) != 1 {
					t.Errorf("journal: drained %v, history %v; want restored with one restart counted", j.Drained, j.History)
				}
			})
		})
	}
}
