package recoverer

import (
	"time"

	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/restarter"
	"github.com/vigil-dev/vigil/watchdog"
)

// JournalSection is the state-file section the recovery journal lives in.
const JournalSection = "recovery"

// Journal is the recovery's persisted state: the incident being recovered,
// the step begun (written before the step runs), what the engine looked
// like before the restart, and the restart history the cooldown and budget
// guards count. vigil restarted mid-sequence continues from it.
type Journal struct {
	Incident string         `json:"incident,omitempty"`
	Opened   time.Time      `json:"opened,omitzero"`
	Verdict  watchdog.State `json:"verdict,omitempty"`
	Reason   string         `json:"reason,omitempty"`

	// Step is the step begun; StepAt when.
	Step   recovery.StepName `json:"step,omitempty"`
	StepAt time.Time         `json:"step_at,omitzero"`
	// FailedStep is the step that failed when Step is StepFailed.
	FailedStep recovery.StepName `json:"failed_step,omitempty"`
	LastError  string            `json:"last_error,omitempty"`
	// Attempts counts recovery attempts for this incident; Failures the
	// consecutive failed ones, which set the retry backoff.
	Attempts    int       `json:"attempts"`
	Failures    int       `json:"failures"`
	NextAttempt time.Time `json:"next_attempt,omitzero"`

	// Drained is set before vigil asks the load balancer to drain this
	// host and cleared once it is back in rotation: while it is set, vigil
	// owes the host a restore.
	Drained      bool      `json:"drained"`
	DrainStarted time.Time `json:"drain_started,omitzero"`
	// Dropped is how many requests were still in flight when the drain
	// wait ended (the restart aborts them).
	Dropped int `json:"dropped"`
	// EngineBefore is the engine's status before the restart; a different
	// start afterwards means the restart happened.
	EngineBefore restarter.EngineStatus `json:"engine_before"`
	RestartedAt  time.Time              `json:"restarted_at,omitzero"`

	// Refusal is the last guard refusal for this incident; RefusalReported
	// whether one was paged, RefusalPaged which guard and outcome it was
	// (a refusal pages again only when either changes).
	Refusal         *recovery.Refusal `json:"refusal,omitempty"`
	RefusalReported bool              `json:"refusal_reported"`
	RefusalPaged    string            `json:"refusal_paged,omitempty"`
	// Hold: a guard refused the restart and vigil drains the host anyway,
	// keeping it out of rotation (step held) until the engine recovers by
	// itself or a restart is allowed.
	Hold bool `json:"hold,omitempty"`
	// RecoveredBySelf: the engine became ready again while held, without
	// a restart.
	RecoveredBySelf bool      `json:"recovered_by_self,omitempty"`
	Finished        time.Time `json:"finished,omitzero"`
	// Began is when the recovery first changed something (the drain, or
	// the restart without a load balancer): how long recovery took is
	// counted from it.
	Began time.Time `json:"began,omitzero"`

	// Turn is the pool's turn held for this recovery (pool coordination),
	// journaled once granted so the next vigil takes it back or lets it
	// expire.
	Turn *recovery.Turn `json:"turn,omitempty"`

	// History is when vigil restarted the engine, across incidents.
	History []time.Time `json:"restart_history"`
}

// unfinished reports whether the journal describes a recovery that a
// restarted vigil must continue: the world was (or may have been) changed
// and not yet put back.
func (j *Journal) unfinished() bool {
	if j.Incident == "" {
		return false
	}
	switch j.Step {
	case recovery.StepDrain, recovery.StepDrainWait, recovery.StepRestart, recovery.StepWaitReady, recovery.StepRestore:
		return true
	case recovery.StepFailed, recovery.StepHeld, recovery.StepGuardRefused:
		return j.Drained
	}
	return false
}

// forIncident starts a fresh journal for inc, keeping the restart history.
func (j *Journal) forIncident(inc watchdog.Incident, v watchdog.Verdict) Journal {
	return Journal{Incident: inc.ID, Opened: inc.Opened, Verdict: v.State, Reason: v.Reason, History: j.History}
}

// prune drops restarts that no guard counts any more, keeping the latest.
func (j *Journal) prune(now time.Time, keep time.Duration) {
	last := lastOf(j.History)
	var kept []time.Time
	for _, t := range j.History {
		if t.After(now.Add(-keep)) || t.Equal(last) {
			kept = append(kept, t)
		}
	}
	j.History = kept
}

// lastRefusal is the journal's refusal, or a placeholder for a journal
// written without one.
func (j *Journal) lastRefusal() *recovery.Refusal {
	if j.Refusal != nil {
		ref := *j.Refusal
		return &ref
	}
	return &recovery.Refusal{Guard: recovery.GuardCooldown, Reason: "a guard refuses the restart"}
}
