package recoverer

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/vigil-dev/vigil/recovery"
)

func TestAPeerDrainedByItsVigilRefusesTheDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(o *Options) {
			o.PeerDrained = func(context.Context) (string, bool) { return "node2", true }
		})
		inc, v := hungIncident()
		h.rec.Recover(context.Background(), inc, v)
		h.rec.Wait()
		if got := joined(h.rep.names()); got != "guard_refused" {
			t.Fatalf("reported %s, want one guard_refused", got)
		}
		if s := h.rep.last(); s.Guard != recovery.GuardPoolLock || !strings.Contains(s.Detail, "pool member node2 is drained") {
			t.Fatalf("refusal %+v", s)
		}
		if len(h.w.mutating()) != 0 {
			t.Fatalf("changed the world while a peer was drained: %v", h.w.mutating())
		}
	})
}
