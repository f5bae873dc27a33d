package recoverer

import (
	"fmt"
	"strings"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/restarter"
	"github.com/vigil-dev/vigil/util/humanize"
)

// dryRun reports every step the attempt would take and changes nothing.
func (r *Recovery) dryRun(eng restarter.EngineStatus, lb balancer.State) {
	lbs := r.o.LoadBalancer
	drain := "would drain " + r.o.Drainer.String()
	if lb.Known {
		drain += fmt.Sprintf(" (%d sessions in flight)", lb.Self.Sessions)
	}
	restart := "would restart " + r.o.Restarter.String()
	if eng.Known {
		restart += " (started at " + humanize.StampUTC(eng.StartedAt) + ")"
	}
	var plan []recovery.Step
	if _, none := r.o.Drainer.(balancer.NoDrain); !none {
		plan = append(plan, recovery.Step{Name: recovery.StepDrain, Detail: drain},
			recovery.Step{Name: recovery.StepDrainWait, Detail: fmt.Sprintf("would wait up to %s for sessions to leave", lbs.DrainTimeoutHung)})
	}
	plan = append(plan, recovery.Step{Name: recovery.StepRestart, Detail: restart},
		recovery.Step{Name: recovery.StepWaitReady, Detail: fmt.Sprintf("would wait up to %s for /v1/models and a completed probe", r.o.Restart.ReadyTimeout)})
	if restore := r.dryRestore(); restore != "" {
		plan = append(plan, recovery.Step{Name: recovery.StepRestore, Detail: restore})
	}
	plan = append(plan, recovery.Step{Name: recovery.StepResolved, Detail: "dry run complete: nothing was changed"})
	for _, s := range plan {
		s.OK = true
		r.report(s)
	}
	now := r.o.Now()
	r.mu.Lock()
	r.dryHistory = append(r.dryHistory, now)
	r.j.Step, r.j.StepAt = recovery.StepResolved, now
	r.mu.Unlock()
}

// dryRestore says what the restore would do: the ramp at the load
// balancer and the limiter's slow start, each only if there is one.
func (r *Recovery) dryRestore() string {
	var parts []string
	if _, none := r.o.Drainer.(balancer.NoDrain); !none {
		lbs := r.o.LoadBalancer
		parts = append(parts, fmt.Sprintf("would restore with weight %s over %s", rampWords(lbs.RampWeights), lbs.RampDuration))
	}
	if r.o.Limiter != nil {
		parts = append(parts, "would tell the admission limiter to slow-start")
	}
	return strings.Join(parts, "; ")
}
