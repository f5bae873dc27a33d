package recoverer

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/restarter"
	"github.com/vigil-dev/vigil/util/faultlog"
	"github.com/vigil-dev/vigil/util/humanize"
)

// drain asks the load balancer to drain this host, then re-reads its state:
// if another server was drained at the same moment and sorts first, this
// host backs off.
func (r *Recovery) drain(ctx context.Context) error {
	if _, none := r.o.Drainer.(balancer.NoDrain); none {
		// No load balancer: there is nothing to take out of rotation, and
		// nothing to page about it (the head already says so).
		return nil
	}
	if err := r.journal(recovery.StepDrain, func(j *Journal) {
		j.Drained = true
		if j.DrainStarted.IsZero() {
			j.DrainStarted = r.o.Now()
		}
		if j.Began.IsZero() {
			j.Began = j.DrainStarted
		}
	}); err != nil {
		return err
	}
	if err := r.o.Drainer.Drain(ctx); err != nil {
		if ctx.Err() != nil {
			return err // vigil is stopping: the journal says "drain", resume redoes it
		}
		// The answer may have been lost after HAProxy applied it: put the
		// host back so a failed drain never leaves it drained.
		if rerr := r.o.Drainer.Ready(ctx); rerr != nil {
			r.log.WithError(rerr).Warn("could not make sure the host is in rotation after a failed drain")
		}
		r.update(func(j *Journal) { j.Drained = false; j.DrainStarted = time.Time{} })
		return err
	}
	r.m.drains.Inc()
	st, err := r.o.Drainer.State(ctx)
	if err != nil {
		r.log.WithError(err).Warn("cannot re-read the load balancer after draining; keeping the drain")
	}
	a := r.decide(facts{Event: evDrained, LB: st, LBErr: err, HasTurn: r.hasTurn()})
	if a.Kind != actBackOff {
		return nil
	}
	if err := r.o.Drainer.Ready(ctx); err != nil {
		return fmt.Errorf("back off from the pool lock: %w", err)
	}
	a = r.decide(facts{Event: evBackedOff, Refusal: a.Refusal})
	r.refuse(a.Refusal, a.Outcome)
	return errBackedOff
}

// drainWait waits for the sessions to leave, up to drain_timeout_hung from
// the drain. A hung engine never finishes them; the wait only spares the
// requests that were about to complete.
func (r *Recovery) drainWait(ctx context.Context) error {
	if !r.drained() {
		return nil // nothing drained (no load balancer): nothing to wait for
	}
	if err := r.journal(recovery.StepDrainWait, nil); err != nil {
		return err
	}
	r.mu.Lock()
	deadline := r.j.DrainStarted.Add(r.o.LoadBalancer.DrainTimeoutHung)
	r.mu.Unlock()
	start := r.o.Now()
	// open is what the balancer counts on this server (sessions and its
	// queue), held the calls among them vigil's limiter holds for the
	// restarted engine: those are not waiting on the hung one.
	left, open, held, known := 0, 0, 0, false
	unread := faultlog.Fault{Now: r.o.Now} // polled every DrainPoll: told once
	for {
		st, err := r.o.Drainer.State(ctx)
		switch {
		case err != nil:
			unread.Failed(r.log, logrus.WarnLevel, err, "cannot read sessions during the drain wait")
		case st.Known:
			open, held = st.Self.Sessions+st.Self.Queued, r.heldByLimiter()
			left, known = max(0, open-held), true
		}
		if known && left == 0 {
			break
		}
		wait := min(r.o.DrainPoll, deadline.Sub(r.o.Now()))
		if wait <= 0 {
			break
		}
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
	r.update(func(j *Journal) { j.Dropped = left })
	d := r.o.Now().Sub(start)
	waited := humanize.GoTenths(d)
	when := "after " + waited
	if d < time.Second {
		when = "at once"
	}
	var detail string
	switch {
	case !known:
		detail = fmt.Sprintf("waited %s (cannot read sessions from %s)", waited, r.o.Drainer)
	case open == 0:
		detail = "no sessions left " + when
	case left == 0:
		detail = fmt.Sprintf("%d sessions open at %s, all calls vigil's limiter holds for the restarted engine or a peer; none waits on the hung engine (read %s)", open, r.o.Drainer, when)
	case held > 0:
		detail = fmt.Sprintf("%d sessions open at %s %s: vigil's limiter holds %d of them for the restarted engine or a peer, %d are still in flight on the hung engine, which never finishes them; restarting anyway", open, r.o.Drainer, when, held, left)
	default:
		detail = fmt.Sprintf("%d sessions still in flight after %s (a hung engine never finishes them); restarting anyway", left, waited)
	}
	// Nothing is aborted yet: the restart step reports the dropped count.
	r.report(recovery.Step{Name: recovery.StepDrainWait, OK: true, Detail: detail})
	return nil
}

// heldByLimiter is how many of the host's sessions are calls vigil's
// limiter holds for the restarted engine: they are not lost.
func (r *Recovery) heldByLimiter() int {
	if r.o.Calls == nil {
		return 0
	}
	_, held := r.o.Calls()
	return held
}

// restart restarts the engine unless it already restarted itself since
// the recovery read its status. Resumed after vigil stopped during this
// step, it first gathers the evidence of whether the restart ran (planRestart
// decides), so an incident gets a second restart only when the first never
// showed.
func (r *Recovery) restart(ctx context.Context, resumed bool) (recovery.StepName, error) {
	if err := r.journal(recovery.StepRestart, nil); err != nil {
		return "", err
	}
	r.mu.Lock()
	before, dropped, restartedAt := r.j.EngineBefore, r.j.Dropped, r.j.RestartedAt
	r.mu.Unlock()
	f := facts{Event: evRestart, Resumed: resumed}
	switch {
	case resumed && restartedAt.IsZero() && before.Known:
		f.Engine, f.Settled = r.settle(ctx, before)
	case resumed && restartedAt.IsZero():
		f.Ready, f.Stuck = r.settleReady(ctx)
	}
	if resumed && restartedAt.IsZero() && !f.Settled && !f.Ready {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if before.Known || f.Stuck {
			r.log.Warn("the restart begun before vigil stopped never showed; restarting now if the guards allow")
		}
		f.Refusal = r.timeRefusal(f.Engine)
	}
	if !resumed {
		st, err := r.o.Restarter.Status(ctx)
		if err != nil {
			r.log.WithError(err).Warn("cannot read the engine's start time before restarting")
		}
		f.Engine = st
	}
	began := r.o.Now()
	a := r.decide(f)
	if a.Kind == actRestartDone {
		if a.Report != nil && a.Report.Name == recovery.StepRestartSkipped {
			r.m.skipped.Inc()
		}
		return orStep(a.Step, recovery.StepWaitReady), nil
	}
	if err := r.o.Restarter.Restart(ctx); err != nil {
		return "", err
	}
	r.m.restarts.Inc()
	c := r.cfg()
	// Recorded once Restart returned, when the old engine is gone: the
	// watchdog's startup grace runs from this, and an answer the old
	// engine gave while it was being stopped must not end it.
	done := r.o.Now()
	r.update(func(j *Journal) { *j = recorded(*j, c, done) })
	after, err := r.o.Restarter.Status(ctx)
	detail := "restarted " + r.o.Restarter.String()
	if err == nil && after.Known {
		detail += fmt.Sprintf(" (started %s, was %s)", humanize.StampUTC(after.StartedAt), humanize.StampUTC(before.StartedAt))
	}
	detail += fmt.Sprintf(" in %s", humanize.GoTenths(r.o.Now().Sub(began)))
	// The page adds "aborted N in-flight requests" from Dropped.
	r.report(recovery.Step{Name: recovery.StepRestart, OK: true, Detail: detail, Dropped: dropped})
	return recovery.StepWaitReady, nil
}

// settle waits up to RestartSettle for the engine's start to differ from
// before: a restart still in progress when vigil stopped shows late.
func (r *Recovery) settle(ctx context.Context, before restarter.EngineStatus) (restarter.EngineStatus, bool) {
	deadline := r.o.Now().Add(r.o.RestartSettle)
	for {
		st, err := r.o.Restarter.Status(ctx)
		if err == nil && st.StartedSince(before) {
			return st, true
		}
		if !r.o.Now().Before(deadline) {
			return st, false
		}
		if sleep(ctx, min(r.o.DrainPoll, deadline.Sub(r.o.Now()))) != nil {
			return st, false
		}
	}
}

// settleReady is the evidence of a restart from a restarter that cannot
// tell start times: the engine serving (ready), or not answering as while
// it restarts (neither). stuck is the engine answering /v1/models without
// completing a request for the whole of RestartSettle: still hung, so the
// restart never ran.
func (r *Recovery) settleReady(ctx context.Context) (ready, stuck bool) {
	deadline := r.o.Now().Add(r.o.RestartSettle)
	for {
		cctx, cancel := context.WithTimeout(ctx, max(deadline.Sub(r.o.Now()), time.Second))
		err := r.o.Ready(cctx)
		cancel()
		switch {
		case err == nil:
			return true, false
		case !IsStuck(err) || ctx.Err() != nil:
			return false, false
		case !r.o.Now().Before(deadline):
			return false, true
		}
		if sleep(ctx, min(r.o.ReadyPoll, deadline.Sub(r.o.Now()))) != nil {
			return false, false
		}
	}
}

func orStep(s, def recovery.StepName) recovery.StepName {
	if s == "" {
		return def
	}
	return s
}

// waitReady polls the readiness check until it passes or ready_timeout
// has passed since the restart.
func (r *Recovery) waitReady(ctx context.Context) error {
	if err := r.journal(recovery.StepWaitReady, nil); err != nil {
		return err
	}
	r.mu.Lock()
	from := r.j.RestartedAt
	r.mu.Unlock()
	if from.IsZero() {
		from = r.o.Now()
	}
	deadline := from.Add(r.o.Restart.ReadyTimeout)
	for {
		left := deadline.Sub(r.o.Now())
		cctx, cancel := context.WithTimeout(ctx, max(left, time.Second))
		err := r.o.Ready(cctx)
		cancel()
		if err == nil {
			r.report(recovery.Step{Name: recovery.StepWaitReady, OK: true, Detail: fmt.Sprintf("engine ready %s after the restart", humanize.GoTenths(r.o.Now().Sub(from)))})
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !r.o.Now().Before(deadline) {
			return fmt.Errorf("engine not ready %s after the restart (restart.ready_timeout): last check: %w", r.o.Restart.ReadyTimeout, err)
		}
		if err := sleep(ctx, min(r.o.ReadyPoll, deadline.Sub(r.o.Now()))); err != nil {
			return err
		}
	}
}

// restore tells the limiter to start slowly, puts the host back at the
// first ramp weight, and raises the weight to 100% over ramp_duration.
func (r *Recovery) restore(ctx context.Context) error {
	if err := r.journal(recovery.StepRestore, nil); err != nil {
		return err
	}
	r.setRecovering(false)
	if r.o.Limiter != nil {
		r.o.Limiter.SlowStart()
	}
	// DrainStarted, not Drained: a resumed ramp finds the host already
	// READY (Drained cleared) but still at a low weight.
	r.mu.Lock()
	drainedThisTime := !r.j.DrainStarted.IsZero()
	r.mu.Unlock()
	if !drainedThisTime {
		if r.o.Limiter != nil {
			r.report(recovery.Step{Name: recovery.StepRestore, OK: true, Detail: "admission limiter slow start"})
		}
		return nil
	}
	weights := r.o.LoadBalancer.RampWeights
	if err := r.o.Drainer.SetWeight(ctx, weights[0]); err != nil {
		return err
	}
	if err := r.o.Drainer.Ready(ctx); err != nil {
		return err
	}
	r.update(func(j *Journal) { j.Drained = false })
	if len(weights) > 1 {
		every := r.o.LoadBalancer.RampDuration / time.Duration(len(weights)-1)
		for _, w := range weights[1:] {
			if err := sleep(ctx, every); err != nil {
				return err
			}
			if err := r.o.Drainer.SetWeight(ctx, w); err != nil {
				return err
			}
		}
	}
	detail := fmt.Sprintf("%s READY, weight %s over %s", r.o.Drainer, rampWords(weights), r.o.LoadBalancer.RampDuration)
	if r.o.Limiter != nil {
		detail += "; admission limiter slow start"
	}
	r.report(recovery.Step{Name: recovery.StepRestore, OK: true, Detail: detail})
	return nil
}
