package recoverer

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/restarter"
	"github.com/vigil-dev/vigil/watchdog"
)

// The planner's table: every journal state the recovery reaches (the
// unit and e2e tests drive it through each), with what vigil learns
// there, and the journal and action the plan makes of it. No clock, no
// fakes: now is t0.
func TestPlan(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	lb := planConfig{Drainer: "haproxy vllm/node2", Restarter: "docker container vllm", BudgetKeep: 6 * time.Hour}
	noLB, dry, undrained := lb, lb, lb
	noLB.NoDrain, dry.DryRun, undrained.RestartUndrained = true, true, true
	inc := watchdog.Incident{ID: "inc-2", Opened: t0.Add(-4 * time.Minute)}
	hung := watchdog.Verdict{State: watchdog.StateHung, Reason: "no progress for 3m0s with 12 waiting"}
	old := []time.Time{t0.Add(-3 * time.Hour)}
	cooldown := &recovery.Refusal{Guard: recovery.GuardCooldown, Reason: "cooldown of 30m lifts at 12:20:00 UTC", Until: t0.Add(20 * time.Minute)}
	noRestarter := &recovery.Refusal{Guard: recovery.GuardNoRestarter, Reason: "no restarter is configured"}
	pool := &recovery.Refusal{Guard: recovery.GuardPoolLock, Reason: "node1 is drained"}
	boom := errors.New("docker socket /var/run/docker.sock does not exist")
	engine := restarter.EngineStatus{Known: true, StartedAt: t0.Add(-48 * time.Hour), StartID: "1"}
	restarted := restarter.EngineStatus{Known: true, StartedAt: t0.Add(-10 * time.Second), StartID: "2"}
	at := func(step recovery.StepName, mut func(*Journal)) Journal {
		j := Journal{Incident: "inc-1", Verdict: watchdog.StateHung, Step: step, StepAt: t0.Add(-time.Minute), Attempts: 1,
			EngineBefore: engine, History: old}
		if mut != nil {
			mut(&j)
		}
		return j
	}
	drained := func(j *Journal) {
		j.Drained, j.DrainStarted, j.Began = true, t0.Add(-2*time.Minute), t0.Add(-2*time.Minute)
	}
	held := func(j *Journal) {
		drained(j)
		j.Hold, j.Refusal, j.RefusalReported, j.RefusalPaged = true, cooldown, true, "cooldown/out"
	}
	parked := func(failed recovery.StepName) func(*Journal) {
		return func(j *Journal) {
			drained(j)
			j.FailedStep, j.LastError, j.Failures = failed, boom.Error(), 1
		}
	}

	cases := []struct {
		name   string
		in     Journal
		f      facts
		out    func(*Journal) // the journal the plan returns: in, changed so
		kind   actionKind
		step   recovery.StepName
		report recovery.StepName
		detail string // in the report
	}{
		// Recover: the watchdog asks.
		{name: "a first incident starts an attempt", in: Journal{}, f: facts{Event: evRecover, Cfg: lb, Incident: inc, Verdict: hung},
			out: func(j *Journal) {
				*j = Journal{Incident: "inc-2", Opened: inc.Opened, Verdict: watchdog.StateHung, Reason: hung.Reason, Attempts: 1}
			}, kind: actAttempt},
		{name: "a new incident after a resolved one starts afresh, keeping the restart history",
			in: at(recovery.StepResolved, nil), f: facts{Event: evRecover, Cfg: lb, Incident: inc, Verdict: hung},
			out: func(j *Journal) {
				*j = Journal{Incident: "inc-2", Opened: inc.Opened, Verdict: watchdog.StateHung, Reason: hung.Reason, Attempts: 1, History: old}
			}, kind: actAttempt},
		{name: "nothing while an attempt runs", in: at(recovery.StepDrainWait, drained),
			f: facts{Event: evRecover, Cfg: lb, Incident: inc, Running: true}, kind: actNone},
		{name: "a drained host of an earlier incident is resumed first", in: at(recovery.StepDrainWait, drained),
			f: facts{Event: evRecover, Cfg: lb, Incident: inc, Verdict: hung}, kind: actResume},
		{name: "a held host is resumed, not attempted again", in: at(recovery.StepHeld, held),
			f: facts{Event: evRecover, Cfg: lb, Incident: watchdog.Incident{ID: "inc-1"}, Verdict: hung}, kind: actResume},
		{name: "a failed attempt waits for its backoff",
			in: at(recovery.StepFailed, func(j *Journal) { j.FailedStep, j.Failures, j.NextAttempt = recovery.StepDrain, 1, t0.Add(time.Second) }),
			f:  facts{Event: evRecover, Cfg: lb, Incident: watchdog.Incident{ID: "inc-1"}, Verdict: hung}, kind: actWait},
		{name: "a failed attempt is retried once its backoff is over",
			in:  at(recovery.StepFailed, func(j *Journal) { j.FailedStep, j.Failures, j.NextAttempt = recovery.StepDrain, 1, t0 }),
			f:   facts{Event: evRecover, Cfg: lb, Incident: watchdog.Incident{ID: "inc-1"}, Verdict: hung},
			out: func(j *Journal) { j.Attempts, j.Reason = 2, hung.Reason }, kind: actAttempt},
		{name: "a refused restart of an undrained host waits until the guard lifts",
			in: at(recovery.StepGuardRefused, func(j *Journal) { j.Refusal, j.NextAttempt = cooldown, cooldown.Until }),
			f:  facts{Event: evRecover, Cfg: lb, Incident: watchdog.Incident{ID: "inc-1"}, Verdict: hung}, kind: actWait},
		{name: "no restarter: refused once, never attempted again",
			in: at(recovery.StepGuardRefused, func(j *Journal) { j.Refusal = noRestarter }),
			f:  facts{Event: evRecover, Cfg: noLB, Incident: watchdog.Incident{ID: "inc-1"}, Verdict: hung}, kind: actNone},
		{name: "a dry run does not resume, it attempts", in: at(recovery.StepDrain, drained),
			f:   facts{Event: evRecover, Cfg: dry, Incident: watchdog.Incident{ID: "inc-1"}, Verdict: hung},
			out: func(j *Journal) { j.Attempts, j.Reason = 2, hung.Reason }, kind: actAttempt},

		// The time guards at an attempt's start.
		{name: "guards pass: on to the pool gate, with the engine as it is now",
			in: at(recovery.StepGuards, func(j *Journal) { j.RestartedAt, j.Dropped = t0.Add(-time.Hour), 3 }), f: facts{Event: evGuards, Cfg: lb, Engine: restarted},
			out: func(j *Journal) { j.EngineBefore, j.RestartedAt, j.Dropped = restarted, time.Time{}, 0 }, kind: actPoolGate},
		{name: "a refused restart still drains and holds", in: at(recovery.StepGuards, nil), f: facts{Event: evGuards, Cfg: lb, Engine: engine, Refusal: cooldown},
			out: func(j *Journal) { j.Refusal = cooldown }, kind: actHold},
		{name: "a refused restart of a host already drained holds it", in: at(recovery.StepGuards, drained), f: facts{Event: evGuards, Cfg: lb, Engine: engine, Refusal: cooldown},
			out: func(j *Journal) { j.Refusal = cooldown }, kind: actRun, step: recovery.StepHeld},
		{name: "a refused restart without a load balancer leaves the host serving", in: at(recovery.StepGuards, nil),
			f: facts{Event: evGuards, Cfg: noLB, Engine: engine, Refusal: noRestarter}, kind: actRefuse},
		{name: "a refused restart in a dry run says it would hold", in: at(recovery.StepGuards, nil),
			f: facts{Event: evGuards, Cfg: dry, Engine: engine, Refusal: cooldown}, kind: actRefuse},

		// The pool gate.
		{name: "the pool gate passes: drain", in: at(recovery.StepGuards, nil), f: facts{Event: evPool, Cfg: lb}, kind: actRun, step: recovery.StepDrain},
		{name: "the pool gate passes in a dry run: report what would happen", in: at(recovery.StepGuards, nil), f: facts{Event: evPool, Cfg: dry}, kind: actDryRun},
		{name: "the pool lock refuses: the host still takes traffic", in: at(recovery.StepGuards, nil), f: facts{Event: evPool, Cfg: lb, Refusal: pool}, kind: actRefuse},
		{name: "vigil stops while waiting for the pool's turn", in: at(recovery.StepGuards, nil), f: facts{Event: evPool, Cfg: lb, Stopping: true}, kind: actStop},
		{name: "an unreadable load balancer fails the drain", in: at(recovery.StepGuards, nil), f: facts{Event: evPool, Cfg: lb, LBErr: boom},
			kind: actFail, step: recovery.StepDrain},
		{name: "an unreadable load balancer with restart_undrained restarts undrained", in: at(recovery.StepGuards, nil), f: facts{Event: evPool, Cfg: undrained, LBErr: boom},
			kind: actRun, step: recovery.StepRestart, report: recovery.StepDrain, detail: "restarting undrained"},
		{name: "a hold whose pool gate passes drains with Hold set", in: at(recovery.StepGuards, func(j *Journal) { j.Refusal = cooldown }),
			f: facts{Event: evPool, Cfg: lb, ForHold: true}, out: func(j *Journal) { j.Hold = true }, kind: actRun, step: recovery.StepDrain},
		{name: "a hold the pool lock forbids leaves the host serving", in: at(recovery.StepGuards, func(j *Journal) { j.Refusal = cooldown }),
			f: facts{Event: evPool, Cfg: lb, ForHold: true, Refusal: pool}, kind: actRefuse},
		{name: "a hold with an unreadable load balancer leaves the host serving", in: at(recovery.StepGuards, func(j *Journal) { j.Refusal = cooldown }),
			f: facts{Event: evPool, Cfg: lb, ForHold: true, LBErr: boom}, kind: actRefuse},

		// After the drain.
		{name: "drained and alone out of rotation: say so", in: at(recovery.StepDrain, drained),
			f:    facts{Event: evDrained, Cfg: lb, LB: balancer.State{Known: true, Self: balancer.ServerStatus{Server: "node2", Drained: true, Sessions: 3}}},
			kind: actNone, report: recovery.StepDrain, detail: "haproxy vllm/node2 DRAIN, 3 sessions in flight"},
		{name: "drained at the same moment as a member that sorts first: back off", in: at(recovery.StepDrain, drained),
			f: facts{Event: evDrained, Cfg: lb, LB: balancer.State{Known: true, Self: balancer.ServerStatus{Server: "node2", Drained: true},
				Others: []balancer.ServerStatus{{Server: "node1", Drained: true}}}}, kind: actBackOff},
		{name: "drained at the same moment, holding a pool turn: keep the drain", in: at(recovery.StepDrain, drained),
			f: facts{Event: evDrained, Cfg: lb, HasTurn: true, LB: balancer.State{Known: true, Self: balancer.ServerStatus{Server: "node2", Drained: true},
				Others: []balancer.ServerStatus{{Server: "node1", Drained: true}}}}, kind: actNone, report: recovery.StepDrain},
		{name: "the load balancer unreadable after the drain: keep the drain", in: at(recovery.StepDrain, drained),
			f: facts{Event: evDrained, Cfg: lb, LBErr: boom}, kind: actNone, report: recovery.StepDrain, detail: "haproxy vllm/node2 DRAIN"},
		{name: "backed off: back in rotation, the host still takes traffic", in: at(recovery.StepDrain, held),
			f:    facts{Event: evBackedOff, Cfg: lb, Refusal: pool},
			out:  func(j *Journal) { j.Drained, j.DrainStarted, j.Hold = false, time.Time{}, false },
			kind: actRefuse},

		// A step returned.
		{name: "drained: on to the drain wait", in: at(recovery.StepDrain, drained), f: facts{Event: evStepDone, Cfg: lb, Step: recovery.StepDrain, Next: recovery.StepDrainWait},
			kind: actRun, step: recovery.StepDrainWait},
		{name: "drained for a hold: held", in: at(recovery.StepDrain, held), f: facts{Event: evStepDone, Cfg: lb, Step: recovery.StepDrain, Next: recovery.StepDrainWait},
			kind: actRun, step: recovery.StepHeld},
		{name: "the drain wait is over: restart", in: at(recovery.StepDrainWait, drained), f: facts{Event: evStepDone, Cfg: lb, Step: recovery.StepDrainWait, Next: recovery.StepRestart},
			kind: actRun, step: recovery.StepRestart},
		{name: "the engine is ready: restore", in: at(recovery.StepWaitReady, drained), f: facts{Event: evStepDone, Cfg: lb, Step: recovery.StepWaitReady, Next: recovery.StepRestore},
			kind: actRun, step: recovery.StepRestore},
		{name: "the engine never got ready: park the drained host", in: at(recovery.StepWaitReady, drained), f: facts{Event: evStepDone, Cfg: lb, Step: recovery.StepWaitReady, Err: boom},
			out: func(j *Journal) {
				j.Step, j.StepAt, j.FailedStep, j.LastError, j.Failures = recovery.StepFailed, t0, recovery.StepWaitReady, boom.Error(), 1
			}, kind: actPark, step: recovery.StepWaitReady},
		{name: "restored: resolved", in: at(recovery.StepRestore, nil), f: facts{Event: evStepDone, Cfg: lb, Step: recovery.StepRestore, Next: recovery.StepResolved},
			kind: actRun, step: recovery.StepResolved},
		{name: "backed off from the pool lock: stop quietly", in: at(recovery.StepDrain, nil), f: facts{Event: evStepDone, Cfg: lb, Step: recovery.StepDrain, Err: errBackedOff, BackedOff: true},
			kind: actStop},
		{name: "vigil stops mid-step: the journal resumes it", in: at(recovery.StepWaitReady, drained), f: facts{Event: evStepDone, Cfg: lb, Step: recovery.StepWaitReady, Err: boom, Stopping: true},
			kind: actStop},
		{name: "a hold that cannot drain leaves the host serving", in: at(recovery.StepDrain, func(j *Journal) { j.Hold, j.Refusal = true, cooldown }),
			f: facts{Event: evStepDone, Cfg: lb, Step: recovery.StepDrain, Err: boom}, out: func(j *Journal) { j.Hold = false }, kind: actRefuse},
		{name: "a failed drain fails the attempt", in: at(recovery.StepDrain, nil), f: facts{Event: evStepDone, Cfg: lb, Step: recovery.StepDrain, Err: boom},
			kind: actFail, step: recovery.StepDrain},
		{name: "a failed drain with restart_undrained restarts", in: at(recovery.StepDrain, nil), f: facts{Event: evStepDone, Cfg: undrained, Step: recovery.StepDrain, Err: boom},
			kind: actRun, step: recovery.StepRestart, report: recovery.StepDrain, detail: "drain failed; restarting undrained"},
		{name: "a failed restart of an undrained host fails the attempt", in: at(recovery.StepRestart, nil), f: facts{Event: evStepDone, Cfg: noLB, Step: recovery.StepRestart, Err: boom},
			kind: actFail, step: recovery.StepRestart},
		{name: "a failed restart of a drained host parks it", in: at(recovery.StepRestart, drained), f: facts{Event: evStepDone, Cfg: lb, Step: recovery.StepRestart, Err: boom},
			out: func(j *Journal) {
				j.Step, j.StepAt, j.FailedStep, j.LastError, j.Failures = recovery.StepFailed, t0, recovery.StepRestart, boom.Error(), 1
			}, kind: actPark, step: recovery.StepRestart},

		// The restart step.
		{name: "restart: the engine restarted by itself since the attempt began", in: at(recovery.StepRestart, drained), f: facts{Event: evRestart, Cfg: lb, Engine: restarted},
			out: func(j *Journal) { j.RestartedAt = t0 }, kind: actRestartDone, report: recovery.StepRestartSkipped, detail: "restarted by itself"},
		{name: "restart: said before it happens, from the drain's start", in: at(recovery.StepRestart, drained), f: facts{Event: evRestart, Cfg: lb, Engine: engine},
			kind: actRestartNow, report: recovery.StepRestarting, detail: "expected DOWN"},
		{name: "restart without a drain: recovery begins with it", in: at(recovery.StepRestart, nil), f: facts{Event: evRestart, Cfg: noLB, Engine: engine},
			out: func(j *Journal) { j.Began = t0 }, kind: actRestartNow, report: recovery.StepRestarting},
		{name: "resumed: the restart was recorded before vigil stopped",
			in: at(recovery.StepRestart, func(j *Journal) { drained(j); j.RestartedAt = t0.Add(-time.Minute) }), f: facts{Event: evRestart, Cfg: lb, Resumed: true},
			kind: actRestartDone, report: recovery.StepRestart, detail: "before vigil stopped"},
		{name: "resumed: the engine's start changed, so the restart ran", in: at(recovery.StepRestart, drained),
			f:   facts{Event: evRestart, Cfg: lb, Resumed: true, Engine: restarted, Settled: true},
			out: func(j *Journal) { j.RestartedAt, j.History = restarted.StartedAt, append(old, restarted.StartedAt) }, kind: actRestartDone, report: recovery.StepRestart, detail: "has happened"},
		{name: "resumed: the engine's start never changed, so restart now", in: at(recovery.StepRestart, drained),
			f:    facts{Event: evRestart, Cfg: lb, Resumed: true, Engine: engine},
			kind: actRestartNow, report: recovery.StepRestarting},
		{name: "resumed, start times unknown: the engine serves, so the restart ran",
			in: at(recovery.StepRestart, func(j *Journal) { drained(j); j.EngineBefore = restarter.EngineStatus{} }), f: facts{Event: evRestart, Cfg: lb, Resumed: true, Ready: true},
			out: func(j *Journal) { j.RestartedAt, j.History = t0, append(old, t0) }, kind: actRestartDone, report: recovery.StepRestart, detail: "serves again"},
		{name: "resumed, start times unknown: the engine does not answer, so it restarts or loads",
			in: at(recovery.StepRestart, func(j *Journal) { drained(j); j.EngineBefore = restarter.EngineStatus{} }), f: facts{Event: evRestart, Cfg: lb, Resumed: true},
			out: func(j *Journal) { j.RestartedAt, j.History = t0, append(old, t0) }, kind: actRestartDone, report: recovery.StepRestart, detail: "does not answer"},
		{name: "resumed, start times unknown: still hung, so restarted again",
			in: at(recovery.StepRestart, func(j *Journal) { drained(j); j.EngineBefore = restarter.EngineStatus{} }), f: facts{Event: evRestart, Cfg: lb, Resumed: true, Stuck: true},
			kind: actRestartNow, report: recovery.StepRestarting},
		{name: "resumed, still hung, and the budget is spent: held",
			in: at(recovery.StepRestart, func(j *Journal) { drained(j); j.EngineBefore = restarter.EngineStatus{} }), f: facts{Event: evRestart, Cfg: lb, Resumed: true, Stuck: true, Refusal: cooldown},
			out: func(j *Journal) { j.Refusal = cooldown }, kind: actRestartDone, step: recovery.StepHeld},

		// A parked host's retry.
		{name: "parked: the engine serves, restore", in: at(recovery.StepFailed, parked(recovery.StepRestart)), f: facts{Event: evParked, Cfg: lb, Ready: true},
			kind: actRun, step: recovery.StepRestore},
		{name: "parked: vigil stops", in: at(recovery.StepFailed, parked(recovery.StepRestart)), f: facts{Event: evParked, Cfg: lb, Stopping: true}, kind: actStop},
		{name: "parked after a failed restart: restart again", in: at(recovery.StepFailed, parked(recovery.StepRestart)), f: facts{Event: evParked, Cfg: lb},
			kind: actRun, step: recovery.StepRestart},
		{name: "parked after a failed drain wait: wait again", in: at(recovery.StepFailed, parked(recovery.StepDrainWait)), f: facts{Event: evParked, Cfg: lb},
			kind: actRun, step: recovery.StepDrainWait},
		{name: "parked after a failed restore: restore again", in: at(recovery.StepFailed, parked(recovery.StepRestore)), f: facts{Event: evParked, Cfg: lb},
			kind: actRun, step: recovery.StepRestore},
		{name: "parked after a failed guards journal: on to the restart", in: at(recovery.StepFailed, parked(recovery.StepGuards)), f: facts{Event: evParked, Cfg: lb},
			kind: actRun, step: recovery.StepRestart},
		{name: "parked after the engine never got ready: restart when the guards allow", in: at(recovery.StepFailed, parked(recovery.StepWaitReady)),
			f: facts{Event: evParked, Cfg: lb, Engine: restarted}, out: func(j *Journal) { j.EngineBefore = restarted }, kind: actRun, step: recovery.StepRestart},
		{name: "parked after the engine never got ready: the cooldown refuses, stay parked", in: at(recovery.StepFailed, parked(recovery.StepWaitReady)),
			f: facts{Event: evParked, Cfg: lb, Refusal: cooldown}, kind: actRefuse, step: recovery.StepFailed},

		// A held host's check.
		{name: "held: the engine recovered by itself", in: at(recovery.StepHeld, held), f: facts{Event: evHeld, Cfg: lb, Ready: true},
			out: func(j *Journal) { j.Hold, j.RecoveredBySelf = false, true }, kind: actRun, step: recovery.StepRestore},
		{name: "held: the guard lifted, restart", in: at(recovery.StepHeld, held), f: facts{Event: evHeld, Cfg: lb, Engine: engine},
			out: func(j *Journal) { j.Hold = false }, kind: actRun, step: recovery.StepRestart},
		{name: "held: still refused", in: at(recovery.StepHeld, held), f: facts{Event: evHeld, Cfg: lb, Refusal: cooldown}, kind: actRefuse, step: recovery.StepHeld},
		{name: "held: vigil stops", in: at(recovery.StepHeld, held), f: facts{Event: evHeld, Cfg: lb, Stopping: true}, kind: actStop},

		// A refusal, paged only when it changes what happens.
		{name: "a first refusal is paged and lifts when the guard says", in: at(recovery.StepGuards, nil),
			f: facts{Event: evRefused, Cfg: lb, Refusal: cooldown, Outcome: outOfRotation(lb, cooldown), Backoff: time.Minute},
			out: func(j *Journal) {
				j.Step, j.StepAt, j.Refusal, j.RefusalReported, j.RefusalPaged, j.NextAttempt = recovery.StepGuardRefused, t0, cooldown, true, "cooldown/out", cooldown.Until
			}, kind: actStop, report: recovery.StepGuardRefused, detail: "stays drained"},
		{name: "the same refusal again is not paged", in: at(recovery.StepHeld, held),
			f:    facts{Event: evRefused, Cfg: lb, Refusal: cooldown, Outcome: outOfRotation(lb, cooldown), Backoff: time.Minute},
			out:  func(j *Journal) { j.NextAttempt = cooldown.Until },
			kind: actStop},
		{name: "the same guard with another outcome is paged again", in: at(recovery.StepHeld, held),
			f:    facts{Event: evRefused, Cfg: lb, Refusal: cooldown, Outcome: stillServing(lb, watchdog.StateHung), Backoff: time.Minute},
			out:  func(j *Journal) { j.RefusalPaged, j.NextAttempt = "cooldown/serving", cooldown.Until },
			kind: actStop, report: recovery.StepGuardRefused, detail: "still takes traffic"},
		{name: "a refusal with no lifting time retries after the backoff", in: at(recovery.StepGuards, nil),
			f: facts{Event: evRefused, Cfg: lb, Refusal: pool, Outcome: stillServing(lb, watchdog.StateHung), Backoff: time.Minute},
			out: func(j *Journal) {
				j.Step, j.StepAt, j.Refusal, j.RefusalReported, j.RefusalPaged, j.NextAttempt = recovery.StepGuardRefused, t0, pool, true, "pool_lock/serving", t0.Add(time.Minute)
			}, kind: actStop, report: recovery.StepGuardRefused},
		{name: "no restarter: no next attempt", in: at(recovery.StepGuards, nil),
			f: facts{Event: evRefused, Cfg: noLB, Refusal: noRestarter, Outcome: stillServing(noLB, watchdog.StateHung), Backoff: time.Minute},
			out: func(j *Journal) {
				j.Step, j.StepAt, j.Refusal, j.RefusalReported, j.RefusalPaged = recovery.StepGuardRefused, t0, noRestarter, true, "no_restarter/serving"
			}, kind: actStop, report: recovery.StepGuardRefused, detail: "no load balancer is configured"},
		{name: "a refusal while parked keeps the failed step", in: at(recovery.StepFailed, parked(recovery.StepWaitReady)),
			f: facts{Event: evRefused, Cfg: lb, Refusal: cooldown, Outcome: outOfRotation(lb, cooldown)},
			out: func(j *Journal) {
				j.Refusal, j.RefusalReported, j.RefusalPaged, j.NextAttempt = cooldown, true, "cooldown/out", cooldown.Until
			}, kind: actStop, report: recovery.StepGuardRefused},

		// A failed attempt with nothing drained.
		{name: "a failed drain retries after the backoff", in: at(recovery.StepDrain, nil), f: facts{Event: evFailed, Cfg: lb, Step: recovery.StepDrain, Err: boom, Backoff: 30 * time.Second},
			out: func(j *Journal) {
				j.Step, j.StepAt, j.FailedStep, j.LastError, j.Failures, j.NextAttempt = recovery.StepFailed, t0, recovery.StepDrain, boom.Error(), 1, t0.Add(30*time.Second)
			}, kind: actStop, report: recovery.StepFailed, detail: "not restarting an undrained host"},
		{name: "a failed restart without a load balancer retries after the backoff", in: at(recovery.StepRestart, nil), f: facts{Event: evFailed, Cfg: noLB, Step: recovery.StepRestart, Err: boom, Backoff: time.Minute},
			out: func(j *Journal) {
				j.Step, j.StepAt, j.FailedStep, j.LastError, j.Failures, j.NextAttempt = recovery.StepFailed, t0, recovery.StepRestart, boom.Error(), 1, t0.Add(time.Minute)
			}, kind: actStop, report: recovery.StepFailed, detail: "host not drained, nothing restarted"},
		{name: "a dry run's failure changes nothing", in: at(recovery.StepGuards, nil), f: facts{Event: evFailed, Cfg: dry, Step: recovery.StepDrain, Err: boom},
			kind: actStop, report: recovery.StepFailed, detail: "nothing changed (dry run)"},

		// The end.
		{name: "resolved: from the drain to serving, with the aborted count",
			in: at(recovery.StepRestore, func(j *Journal) { drained(j); j.Dropped, j.RestartedAt = 2, t0.Add(-time.Minute) }), f: facts{Event: evResolved, Cfg: lb},
			out:  resolvedAt(t0, func(j *Journal) { j.Dropped, j.RestartedAt = 2, t0.Add(-time.Minute) }),
			kind: actStop, report: recovery.StepResolved, detail: "recovery took 2m0s, from its first action to the engine serving again; 2 in-flight requests were aborted"},
		{name: "resolved: recovered by itself while held",
			in: at(recovery.StepRestore, func(j *Journal) { drained(j); j.RecoveredBySelf = true }), f: facts{Event: evResolved, Cfg: lb},
			out: resolvedAt(t0, nil), kind: actStop, report: recovery.StepResolved, detail: "recovered by itself while held"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := c.in
			want.History = append([]time.Time(nil), c.in.History...)
			if c.out != nil {
				c.out(&want)
			}
			got, a := plan(c.in, c.f, t0)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("journal\n got %+v\nwant %+v", got, want)
			}
			if a.Kind != c.kind || a.Step != c.step {
				t.Errorf("action %v %q, want %v %q", a.Kind, a.Step, c.kind, c.step)
			}
			var name recovery.StepName
			if a.Report != nil {
				name = a.Report.Name
			}
			if name != c.report {
				t.Fatalf("report %q, want %q (%+v)", name, c.report, a.Report)
			}
			if a.Report != nil && !strings.Contains(a.Report.Detail, c.detail) {
				t.Errorf("report says %q, want %q in it", a.Report.Detail, c.detail)
			}
		})
	}
}

// resolvedAt is a journal closed at now by planResolved, after mut.
func resolvedAt(now time.Time, mut func(*Journal)) func(*Journal) {
	return func(j *Journal) {
		if mut != nil {
			mut(j)
		}
		j.Step, j.StepAt, j.Finished = recovery.StepResolved, now, now
		j.Drained, j.DrainStarted, j.Hold, j.RecoveredBySelf, j.Began = false, time.Time{}, false, false, time.Time{}
	}
}
