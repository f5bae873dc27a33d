package recoverer

import (
	"context"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/recovery"
)

// callsBack is a reporter that asks the recovery about itself on every
// step, as the pager asks Outlook under its own lock: the recovery must
// hold no lock of its own while it reports.
type callsBack struct {
	steps
	rec **Recovery
}

func (c *callsBack) RecoveryStep(s recovery.Step) {
	r := *c.rec
	r.Outlook()
	r.Snapshot()
	r.Busy()
	r.LastRestart()
	c.steps.RecoveryStep(s)
}

// Run on the real clock with short waits, so that a recovery blocked on
// its own lock fails by the deadline instead of hanging the bubble.
func TestAReporterMayAskTheRecoveryAboutItselfOnEveryStep(t *testing.T) {
	for _, dry := range []bool{false, true} {
		name := map[bool]string{false: "a recovery", true: "a dry run"}[dry]
		t.Run(name, func(t *testing.T) {
			var rec *Recovery
			cb := &callsBack{rec: &rec}
			h := newHarness(t, func(o *Options) {
				o.Reporter, o.DryRun = cb, dry
				o.DrainPoll, o.ReadyPoll, o.LoadBalancer.RampDuration = 5*time.Millisecond, 5*time.Millisecond, 30*time.Millisecond
			})
			h.w.readyAfter = 0
			rec = h.rec
			inc, v := hungIncident()
			done := make(chan struct{})
			go func() {
				rec.Recover(context.Background(), inc, v)
				rec.Wait()
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("the recovery is stuck after the steps %v: a lock is held while it reports", cb.names())
			}
			if last := cb.last(); last.Name != recovery.StepResolved {
				t.Fatalf("last step %+v, want resolved; steps %v", last, cb.names())
			}
		})
	}
}
