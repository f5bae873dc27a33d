package actions

import "time"

// StepName names one step of the recovery sequence (docs/design.md section 5).
type StepName string

// The recovery steps, in the order they run.
const (
	StepGuards         StepName = "guards"          // checking the guards (journaled; only a refusal is reported)
	StepGuardRefused   StepName = "guard_refused"   // a guard said no; Until says when it lifts
	StepHeld           StepName = "held"            // drained while a guard refuses the restart, until the engine recovers or the guard lifts
	StepDrain          StepName = "drain"           // set the server to DRAIN at the LB
	StepDrainWait      StepName = "drain_wait"      // wait for sessions to leave (or the timeout)
	StepRestarting     StepName = "restarting"      // about to restart: the engine is expected DOWN until it is back (reported, not journaled)
	StepRestart        StepName = "restart"         // restart the engine
	StepRestartSkipped StepName = "restart_skipped" // the engine already restarted itself
	StepWaitReady      StepName = "wait_ready"      // /v1/models 200 and a probe completes
	StepRestore        StepName = "restore"         // READY with the weight ramp, limiter slow start
	StepResolved       StepName = "resolved"        // recovery finished
	StepFailed         StepName = "failed"          // a step failed; Err says why, Detail what vigil does next
)

// Step is one journaled recovery step with its result, reported to the
// pager as a thread reply.
type Step struct {
	Incident string    `json:"incident"`
	Name     StepName  `json:"name"`
	At       time.Time `json:"at"`
	OK       bool      `json:"ok"`
	// Detail is one operator-readable line, e.g. "haproxy vllm/node1 DRAIN,
	// 3 sessions left after 15s".
	Detail string `json:"detail,omitempty"`
	Err    string `json:"error,omitempty"`
	// Guard names the guard that refused (StepGuardRefused only).
	Guard Guard `json:"guard,omitempty"`
	// Until is when a refused guard lifts (zero when it lifts on someone
	// else's action, e.g. another server being restored).
	Until time.Time `json:"until,omitzero"`
	// Dropped is how many in-flight requests a restart aborted.
	Dropped int  `json:"dropped,omitempty"`
	DryRun  bool `json:"dry_run,omitempty"`
}

// Reporter is told every step as it happens (the pager implements it).
// It must not block.
type Reporter interface {
	RecoveryStep(s Step)
}
