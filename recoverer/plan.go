package recoverer

import (
	"fmt"
	"time"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/restarter"
	"github.com/vigil-dev/vigil/util/humanize"
	"github.com/vigil-dev/vigil/watchdog"
)

// The recovery is a planner and an executor. plan decides, from the
// journal, what the executor just observed and now, every step, guard,
// hold, park, refusal and dry-run outcome, and says what to page; it reads
// no clock and calls nothing. The executor (executor.go, steps.go) only
// drains, restarts, waits, restores, saves the journal and reports.

// event names what the executor asks the planner about.
type event int

const (
	evRecover   event = iota // the watchdog asks for a recovery (Recover)
	evGuards                 // an attempt read the engine and the time guards
	evPool                   // the load balancer read and the pool gate passed or refused
	evDrained                // the load balancer drained this host and was read again
	evBackedOff              // this host was put back after losing the pool lock
	evStepDone               // a step returned: Next on success, else Err
	evRestart                // the restart step is about to act, with the evidence for it
	evParked                 // a parked host's retry came due
	evHeld                   // a held host's check came due
	evRefused                // a guard refused: record it, page it if it changes what happens
	evFailed                 // an attempt failed with nothing drained
	evResolved               // the sequence reached its end
)

// planConfig is what the planner needs of the configuration.
type planConfig struct {
	DryRun           bool
	NoDrain          bool // load_balancer.kind none
	RestartUndrained bool // load_balancer.restart_undrained
	Drainer          string
	Restarter        string
	BudgetKeep       time.Duration // how long the restart history is kept
}

// facts is what the executor observed for one event.
type facts struct {
	Event event
	Cfg   planConfig

	// evRecover
	Incident watchdog.Incident
	Verdict  watchdog.Verdict
	Running  bool

	// evStepDone: the step that ran, its planned successor, its error;
	// Stopping is vigil shutting down (the context ended).
	Step      recovery.StepName
	Next      recovery.StepName
	Err       error
	Stopping  bool
	BackedOff bool

	// evGuards, evRestart, evParked, evHeld: the engine as read now,
	// whether it serves, and the time guard refusing a restart now.
	Engine  restarter.EngineStatus
	Ready   bool
	Refusal *recovery.Refusal
	// evRestart: Resumed is a restart step begun by a vigil that stopped;
	// Settled says the engine's start changed since EngineBefore; Stuck
	// that the engine kept answering /v1/models without completing a
	// request (for a restarter that cannot tell start times).
	Resumed bool
	Settled bool
	Stuck   bool

	// evPool, evDrained: ForHold is the pool gate of a hold (a refused
	// restart that still drains); LB the load balancer's state, LBErr
	// why it could not be read; HasTurn a pool turn held (the turn is the
	// lock then).
	ForHold bool
	LB      balancer.State
	LBErr   error
	HasTurn bool

	// evRefused: the refusal's outcome; Backoff the wait before the next
	// attempt when the refusal does not say when it lifts.
	Outcome outcome
	Backoff time.Duration
}

// actionKind is what the executor does next.
type actionKind int

const (
	actNone        actionKind = iota // nothing
	actWait                          // the retry backoff has not elapsed
	actAttempt                       // start an attempt at the guards
	actResume                        // continue the journal's unfinished recovery
	actRun                           // run Step (and the steps after it)
	actHold                          // a guard refused the restart: drain and hold anyway
	actPoolGate                      // read the load balancer and the pool gate
	actDryRun                        // report what the attempt would do
	actRefuse                        // page Refusal with Outcome, then stop
	actFail                          // fail Step with Err: nothing drained
	actPark                          // Step failed with the host drained: park it
	actRestartNow                    // restart the engine (the restart step)
	actRestartDone                   // the restart step is done without a restart now
	actBackOff                       // drained with another member that sorts first: put the host back
	actStop                          // end the sequence here
)

// action is the planner's answer: what to do, and what to report first.
type action struct {
	Kind    actionKind
	Step    recovery.StepName
	Refusal *recovery.Refusal
	Outcome outcome
	Err     error
	// Save: the journal changed and must be saved (never in a dry run).
	Save bool
	// Recovering: tell the limiter the engine is being recovered (true)
	// or no longer (false); nil leaves it.
	Recovering *bool
	// Record is a restart to add to the history (zero: none).
	Record time.Time
	// Report is paged (after the journal is saved, outside any lock).
	Report *recovery.Step
}

var (
	on  = true
	off = false
)

// plan is the recovery's decision: the journal as it must now be, and what
// the executor does next.
func plan(j Journal, f facts, now time.Time) (Journal, action) {
	switch f.Event {
	case evRecover:
		return planRecover(j, f, now)
	case evGuards:
		return planGuards(j, f)
	case evPool:
		return planPool(j, f)
	case evDrained:
		return planDrained(j, f)
	case evBackedOff:
		j.Drained, j.DrainStarted, j.Hold = false, time.Time{}, false
		return j, action{Kind: actRefuse, Refusal: f.Refusal, Outcome: stillServing(f.Cfg, j.Verdict), Recovering: &off, Save: true}
	case evStepDone:
		return planStepDone(j, f, now)
	case evRestart:
		return planRestart(j, f, now)
	case evParked:
		return planParked(j, f)
	case evHeld:
		return planHeld(j, f)
	case evRefused:
		return planRefused(j, f, now)
	case evFailed:
		return planFailed(j, f, now)
	case evResolved:
		return planResolved(j, now)
	}
	return j, action{Kind: actNone}
}

func planRecover(j Journal, f facts, now time.Time) (Journal, action) {
	switch {
	case f.Running:
		return j, action{Kind: actNone}
	case j.unfinished() && !f.Cfg.DryRun:
		// A host drained for an earlier incident is owed a restore first.
		return j, action{Kind: actResume}
	case j.Incident == f.Incident.ID && now.Before(j.NextAttempt):
		return j, action{Kind: actWait}
	case j.Incident == f.Incident.ID && j.Refusal != nil && j.Refusal.Guard == recovery.GuardNoRestarter:
		// Refused once for this incident: nothing will lift it.
		return j, action{Kind: actNone}
	}
	if j.Incident != f.Incident.ID {
		j = j.forIncident(f.Incident, f.Verdict)
	}
	j.Verdict, j.Reason = f.Verdict.State, f.Verdict.Reason
	j.Attempts++
	return j, action{Kind: actAttempt}
}

// planGuards follows the time guards at an attempt's start: a refusal
// of a hung or down engine's restart still drains and holds (actHold).
func planGuards(j Journal, f facts) (Journal, action) {
	j.EngineBefore, j.RestartedAt, j.Dropped = f.Engine, time.Time{}, 0
	if f.Refusal == nil {
		return j, action{Kind: actPoolGate, Save: true}
	}
	switch {
	case f.Refusal.Guard == recovery.GuardStateUnwritable:
		// Nothing can be journaled, not even a hold: a drain vigil could
		// not remember would outlive it.
		return j, action{Kind: actRefuse, Refusal: f.Refusal, Outcome: stillServing(f.Cfg, j.Verdict)}
	case f.Cfg.NoDrain:
		return j, action{Kind: actRefuse, Refusal: f.Refusal, Outcome: stillServing(f.Cfg, j.Verdict), Save: true}
	case f.Cfg.DryRun:
		return j, action{Kind: actRefuse, Refusal: f.Refusal, Outcome: outcome{words: fmt.Sprintf(
			"dry run: would drain %s and hold it out of rotation until the engine recovers or a restart is allowed", f.Cfg.Drainer)}}
	}
	j.Refusal = f.Refusal
	if j.Drained {
		// hold journals Hold itself before it waits.
		return j, action{Kind: actRun, Step: recovery.StepHeld, Recovering: &on, Save: true}
	}
	return j, action{Kind: actHold, Save: true}
}

// planPool follows the load balancer's state and the pool gate (Refusal),
// for an attempt or for a hold.
func planPool(j Journal, f facts) (Journal, action) {
	if f.ForHold {
		ref := j.Refusal
		switch {
		case f.LBErr != nil:
			return j, action{Kind: actRefuse, Refusal: ref, Outcome: serving(fmt.Sprintf(
				"cannot read the load balancer to take it out of rotation (%v): the host still takes traffic", f.LBErr))}
		case f.Stopping:
			return j, action{Kind: actStop}
		case f.Refusal != nil:
			return j, action{Kind: actRefuse, Refusal: ref, Outcome: serving("cannot drain it either: " + f.Refusal.Reason + "; the host still takes traffic")}
		}
		j.Hold = true
		return j, action{Kind: actRun, Step: recovery.StepDrain, Recovering: &on, Save: true}
	}
	switch {
	case f.LBErr != nil:
		return planDrainFailed(j, f.Cfg, fmt.Errorf("read load balancer state: %w", f.LBErr))
	case f.Stopping:
		return j, action{Kind: actStop}
	case f.Refusal != nil:
		return j, action{Kind: actRefuse, Refusal: f.Refusal, Outcome: stillServing(f.Cfg, j.Verdict)}
	case f.Cfg.DryRun:
		return j, action{Kind: actDryRun}
	}
	return j, action{Kind: actRun, Step: recovery.StepDrain, Recovering: &on}
}

// planDrainFailed: nothing was changed; restart undrained only when
// load_balancer.restart_undrained allows it, else fail and retry later.
func planDrainFailed(j Journal, c planConfig, err error) (Journal, action) {
	if c.RestartUndrained && !c.DryRun {
		return j, action{Kind: actRun, Step: recovery.StepRestart, Recovering: &on, Report: &recovery.Step{
			Name: recovery.StepDrain, Err: err.Error(), Detail: "cannot drain; restarting undrained because load_balancer.restart_undrained is set"}}
	}
	return j, action{Kind: actFail, Step: recovery.StepDrain, Err: err}
}

// planDrained re-reads the pool lock after the drain: of two vigils that
// drained at the same moment, the later name backs off, unless it holds a
// pool turn.
func planDrained(j Journal, f facts) (Journal, action) {
	if f.LBErr == nil && !f.HasTurn {
		if ref := poolLock(f.LB, true, true); ref != nil {
			return j, action{Kind: actBackOff, Refusal: ref}
		}
	}
	detail := f.Cfg.Drainer + " DRAIN"
	if f.LBErr == nil && f.LB.Known {
		detail += fmt.Sprintf(", %d sessions in flight", f.LB.Self.Sessions)
	}
	return j, action{Kind: actNone, Report: &recovery.Step{Name: recovery.StepDrain, OK: true, Detail: detail}}
}

// planStepDone follows a step's result: on to the next step, or what its
// failure means given what is drained.
func planStepDone(j Journal, f facts, now time.Time) (Journal, action) {
	step, err := f.Step, f.Err
	switch {
	case err == nil:
		if step == recovery.StepDrain && j.Hold {
			return j, action{Kind: actRun, Step: recovery.StepHeld}
		}
		return j, action{Kind: actRun, Step: f.Next}
	case f.BackedOff, f.Stopping:
		return j, action{Kind: actStop}
	case step == recovery.StepDrain && j.Hold:
		// A guard refused the restart: restart_undrained does not apply,
		// and the host is left as it was.
		j.Hold = false
		return j, action{Kind: actRefuse, Refusal: j.lastRefusal(), Recovering: &off, Save: true, Err: err, Outcome: serving(fmt.Sprintf(
			"cannot take it out of rotation either (%v): the host still takes traffic", err))}
	case step == recovery.StepDrain && !f.Cfg.RestartUndrained:
		return planDrainFailed(j, f.Cfg, err)
	case step == recovery.StepDrain:
		return j, action{Kind: actRun, Step: recovery.StepRestart, Report: &recovery.Step{
			Name: recovery.StepDrain, Err: err.Error(), Detail: "drain failed; restarting undrained because load_balancer.restart_undrained is set"}}
	case !j.Drained:
		return j, action{Kind: actFail, Step: step, Err: err}
	}
	j.Step, j.StepAt, j.FailedStep, j.LastError = recovery.StepFailed, now, step, err.Error()
	j.Failures++
	return j, action{Kind: actPark, Step: step, Err: err, Save: true}
}

// planRestart decides the restart step. Resumed after vigil stopped
// during it, it decides from the evidence whether the restart ran: a
// recorded restart time, the engine's start changed, or (when the
// restarter cannot tell start times) the engine serving again or not
// answering as while it restarts. An engine whose start did not change,
// or that still answers without completing, is restarted again within the
// time guards: a second restart of a hung engine loses nothing.
func planRestart(j Journal, f facts, now time.Time) (Journal, action) {
	before := j.EngineBefore
	unproven := f.Resumed && j.RestartedAt.IsZero() && !f.Settled && !f.Ready
	switch {
	case unproven && !before.Known && !f.Stuck:
		// Not answering at all: the restart is under way or has run and
		// the engine loads; wait_ready finds out which.
		return recorded(j, f.Cfg, now), action{Kind: actRestartDone, Record: now, Save: true, Report: &recovery.Step{Name: recovery.StepRestart, OK: true, Dropped: j.Dropped, Detail: fmt.Sprintf(
			"vigil stopped during the restart; the engine does not answer, as while %s restarts it: waiting for it to serve", f.Cfg.Restarter)}}
	case unproven && f.Refusal != nil:
		// The restart never showed, and the guards refuse another: hold
		// the drained host.
		j.Refusal = f.Refusal
		return j, action{Kind: actRestartDone, Step: recovery.StepHeld, Save: true}
	case f.Resumed && !j.RestartedAt.IsZero():
		// vigil stopped after the restart was recorded, before the next
		// step was journaled.
		return j, action{Kind: actRestartDone, Report: &recovery.Step{Name: recovery.StepRestart, OK: true, Dropped: j.Dropped, Detail: fmt.Sprintf(
			"%s was restarted at %s, before vigil stopped", f.Cfg.Restarter, humanize.StampUTC(j.RestartedAt))}}
	case f.Resumed && f.Settled:
		at := startedOr(f.Engine, now)
		return recorded(j, f.Cfg, at), action{Kind: actRestartDone, Record: at, Save: true, Report: &recovery.Step{Name: recovery.StepRestart, OK: true, Dropped: j.Dropped, Detail: fmt.Sprintf(
			"the restart begun before vigil stopped has happened (%s started at %s)", f.Cfg.Restarter, humanize.StampUTC(f.Engine.StartedAt))}}
	case f.Resumed && !before.Known && f.Ready:
		return recorded(j, f.Cfg, now), action{Kind: actRestartDone, Record: now, Save: true, Report: &recovery.Step{Name: recovery.StepRestart, OK: true, Dropped: j.Dropped, Detail: fmt.Sprintf(
			"the engine serves again: the restart by %s begun before vigil stopped has run", f.Cfg.Restarter)}}
	case !f.Resumed && f.Engine.StartedSince(before):
		j.RestartedAt = now
		return j, action{Kind: actRestartDone, Save: true, Report: &recovery.Step{Name: recovery.StepRestartSkipped, OK: true, Detail: fmt.Sprintf(
			"%s restarted by itself (started at %s, was %s); not restarting", f.Cfg.Restarter, humanize.StampUTC(f.Engine.StartedAt), humanize.StampUTC(before.StartedAt))}}
	}
	if j.Began.IsZero() {
		j.Began = now
	}
	// Said before the restart: the watchdog sees the engine DOWN while it
	// restarts, and the pages must not read that as a new failure.
	return j, action{Kind: actRestartNow, Save: true, Report: &recovery.Step{Name: recovery.StepRestarting, OK: true, Detail: fmt.Sprintf(
		"restarting %s (expected DOWN while it restarts)", f.Cfg.Restarter)}}
}

// recorded adds a restart at at to the journal's history.
func recorded(j Journal, c planConfig, at time.Time) Journal {
	j.RestartedAt = at
	j.History = append(append([]time.Time(nil), j.History...), at)
	j.prune(at, c.BudgetKeep)
	return j
}

// planParked follows a parked host's retry: restore the moment the engine
// serves; after a failed wait, restart again only when the time guards
// allow; otherwise retry the failed step.
func planParked(j Journal, f facts) (Journal, action) {
	switch {
	case f.Ready:
		return j, action{Kind: actRun, Step: recovery.StepRestore}
	case f.Stopping:
		return j, action{Kind: actStop}
	}
	switch j.FailedStep {
	case recovery.StepWaitReady:
		if f.Refusal != nil {
			j.Step = recovery.StepFailed
			return j, action{Kind: actRefuse, Refusal: f.Refusal, Outcome: outOfRotation(f.Cfg, f.Refusal), Step: recovery.StepFailed}
		}
		j.EngineBefore, j.RestartedAt = f.Engine, time.Time{}
		return j, action{Kind: actRun, Step: recovery.StepRestart, Save: true}
	case recovery.StepDrain, recovery.StepDrainWait:
		return j, action{Kind: actRun, Step: recovery.StepDrainWait}
	case recovery.StepGuards, "":
		return j, action{Kind: actRun, Step: recovery.StepRestart}
	}
	return j, action{Kind: actRun, Step: j.FailedStep}
}

// planHeld follows a held host's check: ready again by itself → restore;
// the guards allow a restart → restart; else the refusal as it is now.
func planHeld(j Journal, f facts) (Journal, action) {
	switch {
	case f.Ready:
		j.Hold, j.RecoveredBySelf = false, true
		return j, action{Kind: actRun, Step: recovery.StepRestore, Save: true}
	case f.Stopping:
		return j, action{Kind: actStop}
	case f.Refusal == nil:
		j.Hold, j.EngineBefore, j.RestartedAt = false, f.Engine, time.Time{}
		return j, action{Kind: actRun, Step: recovery.StepRestart, Save: true}
	}
	return j, action{Kind: actRefuse, Refusal: f.Refusal, Outcome: outOfRotation(f.Cfg, f.Refusal), Step: recovery.StepHeld}
}

// planRefused records a refusal and pages it only when it changes what
// happens: the first of an incident, another guard, or another outcome
// (the shape of alertmanager's needsUpdate). A refusal that nothing lifts
// (no restarter) sets no next attempt.
func planRefused(j Journal, f facts, now time.Time) (Journal, action) {
	ref, o := f.Refusal, f.Outcome
	key := string(ref.Guard) + "/" + o.class()
	same := j.RefusalPaged == key // set with RefusalReported, never empty
	next := ref.Until
	switch {
	case ref.Guard == recovery.GuardNoRestarter:
		next = time.Time{}
	case next.IsZero():
		next = now.Add(f.Backoff)
	}
	if j.Step != recovery.StepFailed && j.Step != recovery.StepHeld {
		j.Step, j.StepAt = recovery.StepGuardRefused, now
	}
	j.Refusal, j.RefusalReported, j.RefusalPaged, j.NextAttempt = ref, true, key, next
	a := action{Kind: actStop, Save: true}
	if same {
		return j, a
	}
	detail := ref.Reason
	if o.words != "" {
		detail += "; " + o.words
	}
	a.Report = &recovery.Step{Name: recovery.StepGuardRefused, Guard: ref.Guard, Detail: detail, Until: ref.Until, Serving: o.serving}
	return j, a
}

// planFailed ends an attempt that left nothing drained: the incident
// stays open and the next Recover after the backoff retries.
func planFailed(j Journal, f facts, now time.Time) (Journal, action) {
	step, err := f.Step, f.Err
	if f.Cfg.DryRun {
		return j, action{Kind: actStop, Recovering: &off, Report: &recovery.Step{Name: recovery.StepFailed, Err: err.Error(), Detail: fmt.Sprintf("%s failed; nothing changed (dry run)", step)}}
	}
	j.Step, j.StepAt, j.FailedStep, j.LastError = recovery.StepFailed, now, step, err.Error()
	j.Failures++ // the executor's Backoff already counts this failure
	j.NextAttempt = now.Add(f.Backoff)
	detail := fmt.Sprintf("%s failed; host not drained, nothing restarted; retrying after %s", step, humanize.Span(f.Backoff))
	if step == recovery.StepDrain {
		detail = fmt.Sprintf("cannot drain at %s; not restarting an undrained host (set load_balancer.restart_undrained to allow it); retrying after %s", f.Cfg.Drainer, humanize.Span(f.Backoff))
	}
	return j, action{Kind: actStop, Save: true, Recovering: &off, Report: &recovery.Step{Name: recovery.StepFailed, Err: err.Error(), Detail: detail}}
}

// planResolved closes the journal and says how long the recovery took.
func planResolved(j Journal, now time.Time) (Journal, action) {
	began := j.Began
	if began.IsZero() {
		began = j.RestartedAt
	}
	var detail string
	switch {
	case j.RecoveredBySelf:
		detail = fmt.Sprintf("the engine recovered by itself while held out of rotation; back in rotation %s after it was taken out", humanize.GoTenths(now.Sub(began)))
	case began.IsZero():
		detail = "recovered"
	default:
		detail = fmt.Sprintf("recovery took %s, from its first action to the engine serving again", humanize.GoTenths(now.Sub(began)))
	}
	if j.Dropped > 0 {
		detail += fmt.Sprintf("; %d in-flight requests were aborted", j.Dropped)
	}
	j.Step, j.StepAt, j.Finished = recovery.StepResolved, now, now
	j.Failures, j.NextAttempt, j.LastError, j.FailedStep = 0, time.Time{}, "", ""
	j.Drained, j.DrainStarted, j.Hold, j.RecoveredBySelf, j.Began = false, time.Time{}, false, false, time.Time{}
	return j, action{Kind: actStop, Save: true, Report: &recovery.Step{Name: recovery.StepResolved, OK: true, Detail: detail}}
}
