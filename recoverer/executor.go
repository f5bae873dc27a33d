package recoverer

import (
	"context"
	"errors"
	"fmt"

	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/restarter"
	"github.com/vigil-dev/vigil/util/humanize"
)

// decide asks the planner about f and carries out its bookkeeping: the
// journal kept (and saved), the limiter told, the report paged. Only the
// planner runs under the lock; everything that calls into another package
// runs after it is released.
func (r *Recovery) decide(f facts) action {
	f.Cfg = r.cfg()
	now := r.o.Now()
	r.mu.Lock()
	j, a := plan(r.j, f, now)
	r.j = j
	r.mu.Unlock()
	if a.Save {
		r.save(j)
	}
	if !a.Record.IsZero() {
		r.m.restarts.Inc()
	}
	if a.Recovering != nil {
		r.setRecovering(*a.Recovering)
	}
	if a.Report != nil {
		s := *a.Report
		if s.Name == recovery.StepResolved && r.o.Calls != nil {
			if fate, _ := r.o.Calls(); fate.Any() {
				s.Calls = &fate
			}
		}
		r.report(s)
	}
	return a
}

// attempt runs one recovery attempt from the guards.
func (r *Recovery) attempt(ctx context.Context) {
	if err := r.journal(recovery.StepGuards, nil); err != nil {
		r.fail(recovery.StepGuards, err)
		return
	}
	eng, err := r.o.Restarter.Status(ctx)
	if err != nil {
		// Not fatal here: the restart step reports it if it persists.
		r.log.WithError(err).Warn("cannot read the engine's start time before recovery")
		eng = restarter.EngineStatus{}
	}
	a := r.decide(facts{Event: evGuards, Engine: eng, Refusal: r.timeRefusal(eng)})
	switch a.Kind {
	case actHold:
		r.poolGateThen(ctx, true, eng)
	case actPoolGate:
		r.poolGateThen(ctx, false, eng)
	default:
		r.follow(ctx, a)
	}
}

// poolGateThen reads the load balancer and passes the pool gate, for an
// attempt or for a hold, then follows the plan.
func (r *Recovery) poolGateThen(ctx context.Context, forHold bool, eng restarter.EngineStatus) {
	lb, err := r.o.Drainer.State(ctx)
	if err != nil {
		r.follow(ctx, r.decide(facts{Event: evPool, ForHold: forHold, LBErr: err}))
		return
	}
	ref, stop := r.poolGate(ctx, lb)
	defer r.releaseTurn(ctx)
	a := r.decide(facts{Event: evPool, ForHold: forHold, Refusal: ref, Stopping: stop})
	if a.Kind == actDryRun {
		r.dryRun(eng, lb)
		return
	}
	r.follow(ctx, a)
}

// follow carries out an action that ends or starts a sequence.
func (r *Recovery) follow(ctx context.Context, a action) {
	switch a.Kind {
	case actRun:
		r.run(ctx, a.Step, false)
	case actRefuse:
		r.refuse(a.Refusal, a.Outcome)
	case actFail:
		r.fail(a.Step, a.Err)
	}
}

// resume continues from the journal's step.
func (r *Recovery) resume(ctx context.Context) {
	r.mu.Lock()
	j := r.j
	r.mu.Unlock()
	r.setRecovering(true)
	r.resumeTurn(ctx)
	defer r.releaseTurn(ctx)
	if j.Step == recovery.StepFailed {
		if next, ok := r.park(ctx, errors.New(j.LastError), false); ok {
			r.run(ctx, next, false)
		}
		return
	}
	r.run(ctx, j.Step, true)
}

// run executes the steps from step on. resumed says step was begun by a
// vigil that stopped before finishing it.
func (r *Recovery) run(ctx context.Context, step recovery.StepName, resumed bool) {
	for {
		if step == recovery.StepResolved {
			r.decide(facts{Event: evResolved})
			return
		}
		next, err, known := r.runStep(ctx, step, resumed)
		if !known {
			r.log.WithField("step", step).Error("recovery journal names an unknown step; starting over at the next attempt")
			r.update(func(j *Journal) { j.Step = "" })
			return
		}
		resumed = false
		a := r.decide(facts{Event: evStepDone, Step: step, Next: next, Err: err,
			Stopping: err != nil && ctx.Err() != nil, BackedOff: errors.Is(err, errBackedOff)})
		switch a.Kind {
		case actRun:
			step = a.Step
			continue
		case actStop:
			if !errors.Is(err, errBackedOff) {
				r.log.WithField("step", step).Warn("recovery stopped mid-sequence (vigil is stopping); the journal resumes it")
			}
			return
		case actRefuse:
			r.m.failures.WithLabelValues(string(recovery.StepDrain)).Inc()
			r.refuse(a.Refusal, a.Outcome)
			return
		case actFail:
			r.fail(a.Step, a.Err)
			return
		case actPark:
			r.m.failures.WithLabelValues(string(step)).Inc()
			var ok bool
			if step, ok = r.park(ctx, err, true); !ok {
				return
			}
		}
	}
}

// runStep runs one step and names the step after it; known is false for a
// step vigil does not know (a journal from another version).
func (r *Recovery) runStep(ctx context.Context, step recovery.StepName, resumed bool) (next recovery.StepName, err error, known bool) {
	switch step {
	case recovery.StepDrain:
		return recovery.StepDrainWait, r.drain(ctx), true
	case recovery.StepHeld:
		next, err = r.hold(ctx)
		return next, err, true
	case recovery.StepDrainWait:
		return recovery.StepRestart, r.drainWait(ctx), true
	case recovery.StepRestart:
		next, err = r.restart(ctx, resumed)
		return next, err, true
	case recovery.StepWaitReady:
		return recovery.StepRestore, r.waitReady(ctx), true
	case recovery.StepRestore:
		return recovery.StepResolved, r.restore(ctx), true
	}
	return "", nil, false
}

// fail ends an attempt that left nothing drained.
func (r *Recovery) fail(step recovery.StepName, err error) {
	r.m.failures.WithLabelValues(string(step)).Inc()
	r.mu.Lock()
	n := r.j.Failures + 1
	r.mu.Unlock()
	r.decide(facts{Event: evFailed, Step: step, Err: err, Backoff: r.backoffAfter(n)})
}

// park keeps a drained host drained after a failed step (the journal's
// FailedStep), and retries: the moment the engine is ready it goes on to
// restore; otherwise it retries the step (a restart after a failed wait
// only when the time guards allow). It returns the step to run next, or
// false when ctx ends.
func (r *Recovery) park(ctx context.Context, cause error, report bool) (recovery.StepName, bool) {
	r.mu.Lock()
	failed := r.j.FailedStep
	r.mu.Unlock()
	what := map[recovery.StepName]string{recovery.StepRestart: "cannot restart " + r.o.Restarter.String(), recovery.StepWaitReady: "engine did not become ready",
		recovery.StepRestore: "cannot restore " + r.o.Drainer.String()}[failed]
	if what == "" {
		what = string(failed) + " failed"
	}
	for {
		wait := r.backoff()
		if report {
			r.report(recovery.Step{Name: recovery.StepFailed, Err: cause.Error(), Detail: fmt.Sprintf(
				"%s; staying drained; retrying after %s, and restoring as soon as the engine is ready", what, humanize.Span(wait))})
			report = false
		}
		r.update(func(j *Journal) { j.NextAttempt = r.o.Now().Add(wait) })
		if err := sleep(ctx, wait); err != nil {
			return "", false
		}
		f := facts{Event: evParked, Ready: r.o.Ready(ctx) == nil}
		f.Stopping = !f.Ready && ctx.Err() != nil
		if !f.Ready && !f.Stopping && failed == recovery.StepWaitReady {
			f.Engine, f.Refusal = r.restartRefusal(ctx)
		}
		a := r.decide(f)
		switch a.Kind {
		case actStop:
			return "", false
		case actRefuse:
			r.refuse(a.Refusal, a.Outcome)
			continue
		}
		if a.Step == recovery.StepRestore {
			r.log.WithField("failed_step", failed).Info("engine is ready while drained; restoring")
		}
		return a.Step, true
	}
}

// hold keeps a drained host out of rotation while a guard refuses the
// restart. It pages the refusal (and every later one that changes what
// happens, e.g. the cooldown giving way to a spent budget), then checks
// the engine every retry interval: ready again by itself → restore; the
// guards allow a restart → restart.
func (r *Recovery) hold(ctx context.Context) (recovery.StepName, error) {
	if err := r.journal(recovery.StepHeld, func(j *Journal) { j.Hold = true }); err != nil {
		return "", err
	}
	r.mu.Lock()
	ref := r.j.lastRefusal()
	r.mu.Unlock()
	r.refuse(ref, outOfRotation(r.cfg(), ref))
	for {
		wait := r.o.RetryMin
		if !ref.Until.IsZero() {
			wait = max(min(wait, ref.Until.Sub(r.o.Now())), 0)
		}
		if err := sleep(ctx, wait); err != nil {
			return "", err
		}
		f := facts{Event: evHeld, Ready: r.o.Ready(ctx) == nil}
		f.Stopping = !f.Ready && ctx.Err() != nil
		if !f.Ready && !f.Stopping {
			f.Engine, f.Refusal = r.restartRefusal(ctx)
		}
		a := r.decide(f)
		switch {
		case a.Kind == actStop:
			return "", ctx.Err()
		case a.Kind == actRefuse:
			ref = a.Refusal
			r.refuse(ref, a.Outcome)
			continue
		case a.Step == recovery.StepRestore:
			r.log.Info("engine is ready again by itself while held drained; restoring")
		case a.Step == recovery.StepRestart:
			// The requests the restart aborts: what is left on the host.
			left := 0
			if st, err := r.o.Drainer.State(ctx); err == nil && st.Known {
				left = max(0, st.Self.Sessions+st.Self.Queued-r.heldByLimiter())
			}
			r.update(func(j *Journal) { j.Dropped = left })
		}
		return a.Step, nil
	}
}

// refuse records a guard refusal with what it means for the clients and
// pages it when that changes what happens (planRefused); the same refusal
// again is only logged.
func (r *Recovery) refuse(ref *recovery.Refusal, o outcome) {
	r.m.refusals.WithLabelValues(string(ref.Guard)).Inc()
	a := r.decide(facts{Event: evRefused, Refusal: ref, Outcome: o, Backoff: r.backoff()})
	if a.Report == nil {
		r.log.WithField("guard", ref.Guard).WithField("reason", ref.Reason).Debug("recovery guard still refuses")
	}
}
