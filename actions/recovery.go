package actions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/backoff"
	"github.com/vigil-dev/vigil/internal/humanize"
	"github.com/vigil-dev/vigil/state"
	"github.com/vigil-dev/vigil/watchdog"
)

// LimiterControl is the narrow view of the admission limiter recovery
// needs: reject while the engine is being recovered, then ramp up slowly.
type LimiterControl interface {
	SetRecovering(bool)
	SlowStart()
}

// RecoveryOptions wires a Recovery. Drainer, Restarter, Ready and Store
// are required; the rest may be left zero.
type RecoveryOptions struct {
	LoadBalancer configs.LoadBalancer
	Restart      configs.Restart
	// StartupGrace is watchdog.startup_grace: no restart within it of the
	// engine's last start.
	StartupGrace time.Duration

	Drainer   Drainer
	Restarter Restarter
	// Ready reports the engine ready: /v1/models answers 200 and a
	// completion probe completes. It is called repeatedly after a restart.
	Ready func(ctx context.Context) error
	// Store keeps the journal (section "recovery").
	Store *state.Store
	// Reporter is told every step (the pager); nil drops them.
	Reporter watchdog.Reporter
	// Limiter is told when recovery starts and ends; nil if there is none.
	Limiter LimiterControl
	// PeerDrained reports another member of the pool drained by its vigil
	// (from the peers' /status), for pools whose members sit behind
	// different load balancers; nil skips the check.
	PeerDrained func(ctx context.Context) (node string, drained bool)
	// Coordinator grants the pool's turns (pool.coordination: etcd); nil
	// keeps the load balancer's pool lock. TurnWait bounds one wait for a
	// turn (10m). DrainWithoutCoordinator lets vigil drain on the pool
	// lock alone when the coordinator cannot answer. Floor refuses a drain
	// that would leave fewer than min_serving members serving; nil skips
	// it. See poolturn.go.
	Coordinator             Coordinator
	TurnWait                time.Duration
	DrainWithoutCoordinator bool
	Floor                   func(ctx context.Context) error
	// DryRun runs the guards and reports every step as "would ...", but
	// changes nothing: no drain, restart, weight, limiter or journal write.
	DryRun bool

	// Registerer gets vigil_recovery_* metrics; nil registers nothing.
	Registerer prometheus.Registerer
	Log        *logrus.Entry
	// Now is the clock (time.Now if nil). Waits use real timers, so Now
	// must move with them: time.Now, or time.Now inside a synctest bubble.
	Now func() time.Time

	// DrainPoll and ReadyPoll are how often the drain wait reads the
	// sessions left and the ready wait checks the engine (1s and 5s).
	DrainPoll time.Duration
	ReadyPoll time.Duration
	// RetryMin and RetryMax bound the backoff between failed attempts
	// (30s doubling up to 10m).
	RetryMin time.Duration
	RetryMax time.Duration
	// Jitter returns a number in [0, 1] that spreads the retry waits
	// (internal/backoff); nil draws at random. Tests fix it.
	Jitter func() float64
	// RestartSettle is how long a resumed recovery that finds "restart"
	// begun but the engine's start unchanged waits for the restart to show
	// before it concludes that it never ran (restart.docker.stop_timeout +
	// 30s).
	RestartSettle time.Duration
}

// Recovery runs the guarded, journaled recovery sequence of docs/design.md
// section 5 (guards, drain, drain wait, restart, wait ready, restore,
// resolve). It implements watchdog.Recoverer.
type Recovery struct {
	o   RecoveryOptions
	log *logrus.Entry
	m   *metrics

	mu         sync.Mutex
	j          Journal
	running    bool
	dryHistory []time.Time // would-be restarts in dry run, for the guards
	turn       TurnHold    // the pool's turn, while held
	wg         sync.WaitGroup
}

var _ watchdog.Recoverer = (*Recovery)(nil)

// errBackedOff ends an attempt that lost the pool lock: not a failure.
var errBackedOff = errors.New("backed off")

// NewRecovery checks the options, loads the journal from the store and
// registers the metrics. Call Resume once at startup.
func NewRecovery(o RecoveryOptions) (*Recovery, error) {
	switch {
	case o.Drainer == nil:
		return nil, errors.New("actions: recovery needs a Drainer")
	case o.Restarter == nil:
		return nil, errors.New("actions: recovery needs a Restarter")
	case o.Ready == nil:
		return nil, errors.New("actions: recovery needs a Ready check")
	case o.Store == nil:
		return nil, errors.New("actions: recovery needs a state Store for its journal")
	}
	if o.Log == nil {
		l := logrus.New()
		l.Out = io.Discard
		o.Log = logrus.NewEntry(l)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.DrainPoll = orDefault(o.DrainPoll, time.Second)
	o.ReadyPoll = orDefault(o.ReadyPoll, 5*time.Second)
	o.RetryMin = orDefault(o.RetryMin, 30*time.Second)
	o.RetryMax = orDefault(o.RetryMax, 10*time.Minute)
	o.RestartSettle = orDefault(o.RestartSettle, o.Restart.Docker.StopTimeout+30*time.Second)
	o.TurnWait = orDefault(o.TurnWait, 10*time.Minute)
	if len(o.LoadBalancer.RampWeights) == 0 {
		o.LoadBalancer.RampWeights = []int{100}
	}
	r := &Recovery{o: o, log: o.Log.WithField("component", "recovery")}
	if _, err := o.Store.Load(JournalSection, &r.j); err != nil {
		return nil, fmt.Errorf("actions: recovery journal: %w", err)
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	r.m = m
	return r, nil
}

// Recover starts a recovery attempt for inc in its own goroutine and
// returns at once. It does nothing while an attempt runs, or while a
// failed attempt's backoff has not elapsed. ctx must live as long as the
// daemon: cancelling it stops the sequence where it is, and the journal
// lets the next vigil resume it.
func (r *Recovery) Recover(ctx context.Context, inc watchdog.Incident, v watchdog.Verdict) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running {
		return
	}
	if r.j.unfinished() && !r.o.DryRun {
		// A host drained for an earlier incident is owed a restore first.
		r.log.WithFields(logrus.Fields{"incident": r.j.Incident, "new_incident": inc.ID, "step": r.j.Step}).
			Warn("an earlier recovery is unfinished; continuing it first")
		r.startLocked(func() { r.resume(ctx) })
		return
	}
	now := r.o.Now()
	if r.j.Incident == inc.ID && now.Before(r.j.NextAttempt) {
		r.log.WithFields(logrus.Fields{"incident": inc.ID, "retry_in_seconds": r.j.NextAttempt.Sub(now).Seconds()}).
			Debug("recovery waiting for its retry backoff")
		return
	}
	if r.j.Incident != inc.ID {
		r.j = r.j.forIncident(inc, v)
	}
	r.j.Verdict, r.j.Reason = v.State, v.Reason
	r.j.Attempts++
	r.startLocked(func() { r.attempt(ctx) })
}

// Resume continues an unfinished recovery found in the journal (vigil was
// stopped mid-sequence): a drained host is never left without someone to
// restore it, and a restart that was begun is not repeated. It returns at
// once; the sequence runs on its own goroutine.
func (r *Recovery) Resume(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running || !r.j.unfinished() {
		return nil
	}
	if r.o.DryRun {
		r.reportLocked(watchdog.Step{Name: r.j.Step, Detail: fmt.Sprintf(
			"would resume the recovery of incident %s from step %s (dry run: leaving it as it is)", r.j.Incident, r.j.Step)})
		return nil
	}
	r.log.WithFields(logrus.Fields{"incident": r.j.Incident, "step": r.j.Step, "drained": r.j.Drained}).
		Warn("resuming an unfinished recovery from the journal")
	r.startLocked(func() { r.resume(ctx) })
	return nil
}

// Busy reports a recovery in progress, including a drained host waiting
// to retry a failed step.
func (r *Recovery) Busy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running
}

// LastRestart is when vigil last restarted the engine (zero if never).
// Dry-run restarts do not count.
func (r *Recovery) LastRestart() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return lastOf(r.j.History)
}

// Wait blocks until the running sequence (if any) returns, e.g. after its
// context was cancelled at shutdown.
func (r *Recovery) Wait() { r.wg.Wait() }

// Snapshot is the recovery's state for /status.
type Snapshot struct {
	Active           bool              `json:"active"`
	DryRun           bool              `json:"dry_run"`
	Incident         string            `json:"incident,omitempty"`
	Step             watchdog.StepName `json:"step,omitempty"`
	StepAt           time.Time         `json:"step_at,omitzero"`
	Drained          bool              `json:"drained"`
	LastRestart      time.Time         `json:"last_restart,omitzero"`
	RestartsInWindow int               `json:"restarts_in_window"`
	Budget           int               `json:"budget"`
	BudgetWindow     string            `json:"budget_window"`
	NextAttempt      time.Time         `json:"next_attempt,omitzero"`
	LastError        string            `json:"last_error,omitempty"`
	Journal          Journal           `json:"journal"`
}

// Snapshot returns the recovery's state for /status.
func (r *Recovery) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	j := r.j
	j.History = append([]time.Time(nil), r.j.History...)
	if j.Refusal != nil {
		ref := *j.Refusal
		j.Refusal = &ref
	}
	return Snapshot{
		Active: r.running, DryRun: r.o.DryRun, Incident: j.Incident, Step: j.Step, StepAt: j.StepAt,
		Drained: j.Drained, LastRestart: lastOf(j.History),
		RestartsInWindow: len(inWindow(j.History, r.o.Now(), r.o.Restart.BudgetWindow)),
		Budget:           r.o.Restart.Budget, BudgetWindow: r.o.Restart.BudgetWindow.String(),
		NextAttempt: j.NextAttempt, LastError: j.LastError, Journal: j,
	}
}

func (r *Recovery) startLocked(run func()) {
	r.running = true
	r.m.active.Set(1)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() {
			r.mu.Lock()
			r.running = false
			r.mu.Unlock()
			r.m.active.Set(0)
		}()
		run()
	}()
}

// attempt runs one recovery attempt from the guards.
func (r *Recovery) attempt(ctx context.Context) {
	if err := r.journal(watchdog.StepGuards, nil); err != nil {
		r.fail(watchdog.StepGuards, err)
		return
	}
	eng, err := r.o.Restarter.Status(ctx)
	if err != nil {
		// Not fatal here: the restart step reports it if it persists.
		r.log.WithError(err).Warn("cannot read the engine's start time before recovery")
		eng = EngineStatus{}
	}
	r.update(func(j *Journal) { j.EngineBefore, j.RestartedAt, j.Dropped = eng, time.Time{}, 0 })
	if ref := r.timeRefusal(eng); ref != nil {
		r.holdInstead(ctx, ref)
		return
	}
	lb, err := r.o.Drainer.State(ctx)
	if err != nil {
		r.drainFailed(ctx, fmt.Errorf("read load balancer state: %w", err))
		return
	}
	ref, stop := r.poolGate(ctx, lb)
	defer r.releaseTurn(ctx)
	if stop {
		return
	}
	if ref != nil {
		r.refuse(ref, r.stillServing())
		return
	}
	if r.o.DryRun {
		r.dryRun(eng, lb)
		return
	}
	r.setRecovering(true)
	r.run(ctx, watchdog.StepDrain, false)
}

// resume continues from the journal's step.
func (r *Recovery) resume(ctx context.Context) {
	r.mu.Lock()
	j := r.j
	r.mu.Unlock()
	r.setRecovering(true)
	r.resumeTurn(ctx)
	defer r.releaseTurn(ctx)
	if j.Step == watchdog.StepFailed {
		if next, ok := r.park(ctx, j.FailedStep, errors.New(j.LastError), false); ok {
			r.run(ctx, next, false)
		}
		return
	}
	r.run(ctx, j.Step, true)
}

// run executes the steps from step on. resumed says step was begun by a
// vigil that stopped before finishing it.
func (r *Recovery) run(ctx context.Context, step watchdog.StepName, resumed bool) {
	for {
		var err error
		var next watchdog.StepName
		switch step {
		case watchdog.StepDrain:
			err, next = r.drain(ctx), watchdog.StepDrainWait
			if r.holding() {
				next = watchdog.StepHeld
			}
		case watchdog.StepHeld:
			next, err = r.hold(ctx)
		case watchdog.StepDrainWait:
			err, next = r.drainWait(ctx), watchdog.StepRestart
		case watchdog.StepRestart:
			err, next = r.restart(ctx, resumed), watchdog.StepWaitReady
		case watchdog.StepWaitReady:
			err, next = r.waitReady(ctx), watchdog.StepRestore
		case watchdog.StepRestore:
			err, next = r.restore(ctx), watchdog.StepResolved
		case watchdog.StepResolved:
			r.resolve()
			return
		default:
			r.log.WithField("step", step).Error("recovery journal names an unknown step; starting over at the next attempt")
			r.update(func(j *Journal) { j.Step = "" })
			return
		}
		resumed = false
		if err == nil {
			step = next
			continue
		}
		if errors.Is(err, errBackedOff) {
			return
		}
		if ctx.Err() != nil {
			r.log.WithField("step", step).Warn("recovery stopped mid-sequence (vigil is stopping); the journal resumes it")
			return
		}
		if step == watchdog.StepDrain && r.holding() {
			// A guard refused the restart: restart_undrained does not
			// apply, and the host is left as it was.
			r.update(func(j *Journal) { j.Hold = false })
			r.setRecovering(false)
			r.m.failures.WithLabelValues(string(watchdog.StepDrain)).Inc()
			r.refuse(r.lastRefusal(), serving(fmt.Sprintf("cannot take it out of rotation either (%v): the host still takes traffic", err)))
			return
		}
		if step == watchdog.StepDrain {
			if !r.o.LoadBalancer.RestartUndrained {
				r.drainFailed(ctx, err)
				return
			}
			r.report(watchdog.Step{Name: watchdog.StepDrain, Err: err.Error(), Detail: "drain failed; restarting undrained because load_balancer.restart_undrained is set"})
			step = watchdog.StepRestart
			continue
		}
		if !r.drained() {
			r.fail(step, err)
			return
		}
		var ok bool
		if step, ok = r.park(ctx, step, err, true); !ok {
			return
		}
	}
}

// drain asks the load balancer to drain this host, then re-reads its state:
// if another server was drained at the same moment and sorts first, this
// host backs off.
func (r *Recovery) drain(ctx context.Context) error {
	if _, none := r.o.Drainer.(NoDrain); none {
		// No load balancer: there is nothing to take out of rotation, and
		// nothing to page about it (the head already says so).
		return nil
	}
	if err := r.journal(watchdog.StepDrain, func(j *Journal) {
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
	} else if ref := poolLock(st, true, true); ref != nil && !r.hasTurn() {
		if rerr := r.o.Drainer.Ready(ctx); rerr != nil {
			return fmt.Errorf("back off from the pool lock: %w", rerr)
		}
		r.update(func(j *Journal) { j.Drained = false; j.DrainStarted = time.Time{}; j.Hold = false })
		r.setRecovering(false)
		r.refuse(ref, r.stillServing())
		return errBackedOff
	}
	detail := r.o.Drainer.String() + " DRAIN"
	if st.Known {
		detail += fmt.Sprintf(", %d sessions in flight", st.Self.Sessions)
	}
	r.report(watchdog.Step{Name: watchdog.StepDrain, OK: true, Detail: detail})
	return nil
}

// drainWait waits for the sessions to leave, up to drain_timeout_hung from
// the drain. A hung engine never finishes them; the wait only spares the
// requests that were about to complete.
func (r *Recovery) drainWait(ctx context.Context) error {
	if !r.drained() {
		return nil // nothing drained (no load balancer): nothing to wait for
	}
	if err := r.journal(watchdog.StepDrainWait, nil); err != nil {
		return err
	}
	r.mu.Lock()
	deadline := r.j.DrainStarted.Add(r.o.LoadBalancer.DrainTimeoutHung)
	r.mu.Unlock()
	start := r.o.Now()
	left, known := 0, false
	for {
		st, err := r.o.Drainer.State(ctx)
		switch {
		case err != nil:
			r.log.WithError(err).Warn("cannot read sessions during the drain wait")
		case st.Known:
			left, known = st.Self.Sessions+st.Self.Queued, true
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
	waited := humanize.GoTenths(r.o.Now().Sub(start))
	var detail string
	switch {
	case !known:
		detail = fmt.Sprintf("waited %s (cannot read sessions from %s)", waited, r.o.Drainer)
	case left == 0:
		detail = fmt.Sprintf("no sessions left after %s", waited)
	default:
		detail = fmt.Sprintf("%d sessions still in flight after %s (a hung engine never finishes them); restarting anyway", left, waited)
	}
	// Nothing is aborted yet: the restart step reports the dropped count.
	r.report(watchdog.Step{Name: watchdog.StepDrainWait, OK: true, Detail: detail})
	return nil
}

// restart restarts the engine unless it already restarted itself since
// the recovery read its status. Resumed after vigil stopped during this
// step, it first decides whether the restart already happened, so an
// incident never gets two.
func (r *Recovery) restart(ctx context.Context, resumed bool) error {
	if err := r.journal(watchdog.StepRestart, nil); err != nil {
		return err
	}
	r.mu.Lock()
	before, dropped, restartedAt := r.j.EngineBefore, r.j.Dropped, r.j.RestartedAt
	r.mu.Unlock()
	if resumed && !restartedAt.IsZero() {
		// vigil stopped after the restart was recorded, before the next
		// step was journaled.
		r.report(watchdog.Step{Name: watchdog.StepRestart, OK: true, Dropped: dropped, Detail: fmt.Sprintf(
			"%s was restarted at %s, before vigil stopped", r.o.Restarter, humanize.StampUTC(restartedAt))})
		return nil
	}
	if resumed {
		if !before.Known {
			r.recordRestart(r.o.Now())
			r.report(watchdog.Step{Name: watchdog.StepRestart, OK: true, Detail: fmt.Sprintf(
				"vigil stopped during the restart and %s cannot tell whether it ran; not restarting twice", r.o.Restarter)})
			return nil
		}
		if st, ok := r.settle(ctx, before); ok {
			r.recordRestart(startedOr(st, r.o.Now()))
			r.report(watchdog.Step{Name: watchdog.StepRestart, OK: true, Dropped: dropped, Detail: fmt.Sprintf(
				"the restart begun before vigil stopped has happened (%s started at %s)", r.o.Restarter, humanize.StampUTC(st.StartedAt))})
			return nil
		}
		r.log.Warn("the restart begun before vigil stopped never happened; restarting now")
	}
	st, err := r.o.Restarter.Status(ctx)
	if err != nil {
		r.log.WithError(err).Warn("cannot read the engine's start time before restarting")
	} else if st.StartedSince(before) {
		r.m.skipped.Inc()
		r.report(watchdog.Step{Name: watchdog.StepRestartSkipped, OK: true, Detail: fmt.Sprintf(
			"%s restarted by itself (started at %s, was %s); not restarting", r.o.Restarter, humanize.StampUTC(st.StartedAt), humanize.StampUTC(before.StartedAt))})
		r.update(func(j *Journal) { j.RestartedAt = r.o.Now() })
		return nil
	}
	// Said before the restart: the watchdog sees the engine DOWN while it
	// restarts, and the pages must not read that as a new failure.
	r.report(watchdog.Step{Name: watchdog.StepRestarting, OK: true, Detail: fmt.Sprintf("restarting %s (expected DOWN while it restarts)", r.o.Restarter)})
	began := r.o.Now()
	r.update(func(j *Journal) {
		if j.Began.IsZero() {
			j.Began = began
		}
	})
	if err := r.o.Restarter.Restart(ctx); err != nil {
		return err
	}
	r.recordRestart(began)
	after, err := r.o.Restarter.Status(ctx)
	detail := "restarted " + r.o.Restarter.String()
	if err == nil && after.Known {
		detail += fmt.Sprintf(" (started %s, was %s)", humanize.StampUTC(after.StartedAt), humanize.StampUTC(before.StartedAt))
	}
	detail += fmt.Sprintf(" in %s", humanize.GoTenths(r.o.Now().Sub(began)))
	// The page adds "aborted N in-flight requests" from Dropped.
	r.report(watchdog.Step{Name: watchdog.StepRestart, OK: true, Detail: detail, Dropped: dropped})
	return nil
}

// settle waits up to RestartSettle for the engine's start to differ from
// before: a restart still in progress when vigil stopped shows late.
func (r *Recovery) settle(ctx context.Context, before EngineStatus) (EngineStatus, bool) {
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

func (r *Recovery) recordRestart(at time.Time) {
	r.m.restarts.Inc()
	r.update(func(j *Journal) {
		j.RestartedAt = at
		j.History = append(j.History, at)
		j.prune(at, max(r.o.Restart.BudgetWindow, r.o.Restart.Cooldown))
	})
}

// waitReady polls the readiness check until it passes or ready_timeout
// has passed since the restart.
func (r *Recovery) waitReady(ctx context.Context) error {
	if err := r.journal(watchdog.StepWaitReady, nil); err != nil {
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
			r.report(watchdog.Step{Name: watchdog.StepWaitReady, OK: true, Detail: fmt.Sprintf("engine ready %s after the restart", humanize.GoTenths(r.o.Now().Sub(from)))})
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
	if err := r.journal(watchdog.StepRestore, nil); err != nil {
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
			r.report(watchdog.Step{Name: watchdog.StepRestore, OK: true, Detail: "admission limiter slow start"})
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
	r.report(watchdog.Step{Name: watchdog.StepRestore, OK: true, Detail: detail})
	return nil
}

func (r *Recovery) resolve() {
	now := r.o.Now()
	r.mu.Lock()
	j := r.j
	r.mu.Unlock()
	r.update(func(j *Journal) {
		j.Step, j.StepAt, j.Finished = watchdog.StepResolved, now, now
		j.Failures, j.NextAttempt, j.LastError, j.FailedStep = 0, time.Time{}, "", ""
		j.Drained, j.DrainStarted, j.Hold, j.RecoveredBySelf, j.Began = false, time.Time{}, false, false, time.Time{}
	})
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
	r.report(watchdog.Step{Name: watchdog.StepResolved, OK: true, Detail: detail})
}

// drainFailed handles a failed drain without restart_undrained: nothing
// was changed, the incident stays open, the next Recover retries.
func (r *Recovery) drainFailed(ctx context.Context, err error) {
	if r.o.LoadBalancer.RestartUndrained && !r.o.DryRun {
		r.report(watchdog.Step{Name: watchdog.StepDrain, Err: err.Error(), Detail: "cannot drain; restarting undrained because load_balancer.restart_undrained is set"})
		r.setRecovering(true)
		r.run(ctx, watchdog.StepRestart, false)
		return
	}
	r.fail(watchdog.StepDrain, err)
}

// fail ends an attempt that left nothing drained: the incident stays open
// and the next Recover after the backoff retries.
func (r *Recovery) fail(step watchdog.StepName, err error) {
	r.m.failures.WithLabelValues(string(step)).Inc()
	r.setRecovering(false)
	if r.o.DryRun {
		r.report(watchdog.Step{Name: watchdog.StepFailed, Err: err.Error(), Detail: fmt.Sprintf("%s failed; nothing changed (dry run)", step)})
		return
	}
	r.update(func(j *Journal) {
		j.Step, j.StepAt, j.FailedStep, j.LastError = watchdog.StepFailed, r.o.Now(), step, err.Error()
		j.Failures++
	})
	wait := r.backoff()
	r.update(func(j *Journal) { j.NextAttempt = r.o.Now().Add(wait) })
	detail := fmt.Sprintf("%s failed; host not drained, nothing restarted; retrying after %s", step, wait)
	if step == watchdog.StepDrain {
		detail = fmt.Sprintf("cannot drain at %s; not restarting an undrained host (set load_balancer.restart_undrained to allow it); retrying after %s", r.o.Drainer, wait)
	}
	r.report(watchdog.Step{Name: watchdog.StepFailed, Err: err.Error(), Detail: detail})
}

// park keeps a drained host drained after a failed step, and retries: the
// moment the engine is ready it goes on to restore; otherwise it retries
// the step (a restart after a failed wait only when the cooldown and
// budget allow). It returns the step to run next, or false when ctx ends.
func (r *Recovery) park(ctx context.Context, failed watchdog.StepName, cause error, report bool) (watchdog.StepName, bool) {
	if report {
		r.m.failures.WithLabelValues(string(failed)).Inc()
		r.update(func(j *Journal) {
			j.Step, j.StepAt, j.FailedStep, j.LastError = watchdog.StepFailed, r.o.Now(), failed, cause.Error()
			j.Failures++
		})
	}
	what := map[watchdog.StepName]string{watchdog.StepRestart: "cannot restart " + r.o.Restarter.String(), watchdog.StepWaitReady: "engine did not become ready",
		watchdog.StepRestore: "cannot restore " + r.o.Drainer.String()}[failed]
	if what == "" {
		what = string(failed) + " failed"
	}
	for {
		wait := r.backoff()
		if report {
			r.report(watchdog.Step{Name: watchdog.StepFailed, Err: cause.Error(), Detail: fmt.Sprintf(
				"%s; staying drained; retrying after %s, and restoring as soon as the engine is ready", what, wait.Round(time.Second))})
			report = false
		}
		r.update(func(j *Journal) { j.NextAttempt = r.o.Now().Add(wait) })
		if err := sleep(ctx, wait); err != nil {
			return "", false
		}
		if err := r.o.Ready(ctx); err == nil {
			r.log.WithField("failed_step", failed).Info("engine is ready while drained; restoring")
			return watchdog.StepRestore, true
		}
		if ctx.Err() != nil {
			return "", false
		}
		switch failed {
		case watchdog.StepWaitReady:
			eng, ref := r.restartRefusal(ctx)
			if ref != nil {
				r.refuse(ref, r.outOfRotation())
				r.update(func(j *Journal) { j.Step = watchdog.StepFailed })
				continue
			}
			r.update(func(j *Journal) { j.EngineBefore, j.RestartedAt = eng, time.Time{} })
			return watchdog.StepRestart, true
		case watchdog.StepDrain, watchdog.StepDrainWait:
			return watchdog.StepDrainWait, true
		case watchdog.StepGuards, "":
			return watchdog.StepRestart, true
		default:
			return failed, true
		}
	}
}

// outcome is what a refusal means for the clients: whether the host
// still takes traffic, and that in words for the page. The pages and the
// dedup key read serving, never the words: a reason may well say "out of
// rotation" about another member while this host serves.
type outcome struct {
	serving bool
	words   string
}

func serving(words string) outcome { return outcome{serving: true, words: words} }

// class is the outcome as the dedup key holds it ("out" or "serving",
// as journals written before the typed outcome hold it too).
func (o outcome) class() string {
	if o.serving {
		return "serving"
	}
	return "out"
}

// refuse records a guard refusal with what it means for the clients
// (out of rotation, or still taking traffic) and pages it when that
// changes what happens: the first refusal of an incident, a different
// guard, or a different outcome. The same refusal again is only logged.
func (r *Recovery) refuse(ref *watchdog.Refusal, o outcome) {
	r.m.refusals.WithLabelValues(string(ref.Guard)).Inc()
	key := string(ref.Guard) + "/" + o.class()
	r.mu.Lock()
	same := r.j.RefusalPaged == key // set with RefusalReported, never empty
	r.mu.Unlock()
	next := ref.Until
	if next.IsZero() {
		next = r.o.Now().Add(r.backoff())
	}
	r.update(func(j *Journal) {
		if j.Step != watchdog.StepFailed && j.Step != watchdog.StepHeld {
			j.Step, j.StepAt = watchdog.StepGuardRefused, r.o.Now()
		}
		j.Refusal, j.RefusalReported, j.RefusalPaged, j.NextAttempt = ref, true, key, next
	})
	if same {
		r.log.WithFields(logrus.Fields{"guard": ref.Guard, "reason": ref.Reason}).Debug("recovery guard still refuses")
		return
	}
	detail := ref.Reason
	if o.words != "" {
		detail += "; " + o.words
	}
	r.report(watchdog.Step{Name: watchdog.StepGuardRefused, Guard: ref.Guard, Detail: detail, Until: ref.Until, Serving: o.serving})
}

// Outcomes of a refusal, as the pages say them.
func (r *Recovery) outOfRotation() outcome {
	return outcome{words: fmt.Sprintf("%s stays drained: the host is out of rotation until the engine recovers by itself or a restart is allowed", r.o.Drainer)}
}

func (r *Recovery) stillServing() outcome {
	if _, none := r.o.Drainer.(NoDrain); none {
		return serving("no load balancer is configured (load_balancer.kind none), so clients keep reaching the hung engine: the host still takes traffic")
	}
	return serving("the host still takes traffic")
}

// poolRefusal is the pool guard: another member out of rotation at the
// load balancer, or drained by its vigil (peers' /status).
func (r *Recovery) poolRefusal(ctx context.Context, lb LBState) *watchdog.Refusal {
	if ref := poolLock(lb, r.drained(), false); ref != nil {
		return ref
	}
	if r.o.PeerDrained != nil && !r.drained() {
		if node, ok := r.o.PeerDrained(ctx); ok {
			return &watchdog.Refusal{Guard: watchdog.GuardPoolLock, Reason: fmt.Sprintf(
				"pool member %s is drained by its vigil; only one member of a pool is drained at a time", node)}
		}
	}
	return nil
}

// holdInstead answers a time guard's refusal (startup grace, cooldown,
// budget) for a hung or down engine: not restarting does not make the
// engine serve, so vigil takes the host out of rotation anyway (a drain
// loses nothing the hang has not already taken) and holds it there, unless
// the pool guard forbids a drain or there is no load balancer.
func (r *Recovery) holdInstead(ctx context.Context, ref *watchdog.Refusal) {
	if _, none := r.o.Drainer.(NoDrain); none {
		r.refuse(ref, r.stillServing())
		return
	}
	if r.o.DryRun {
		r.refuse(ref, outcome{words: fmt.Sprintf("dry run: would drain %s and hold it out of rotation until the engine recovers or a restart is allowed", r.o.Drainer)})
		return
	}
	r.update(func(j *Journal) { j.Refusal = ref })
	if r.drained() {
		// hold journals Hold itself before it waits.
		r.setRecovering(true)
		r.run(ctx, watchdog.StepHeld, false)
		return
	}
	lb, err := r.o.Drainer.State(ctx)
	if err != nil {
		r.refuse(ref, serving(fmt.Sprintf("cannot read the load balancer to take it out of rotation (%v): the host still takes traffic", err)))
		return
	}
	pool, stop := r.poolGate(ctx, lb)
	defer r.releaseTurn(ctx)
	if stop {
		return
	}
	if pool != nil {
		r.refuse(ref, serving("cannot drain it either: "+pool.Reason+"; the host still takes traffic"))
		return
	}
	r.update(func(j *Journal) { j.Hold = true })
	r.setRecovering(true)
	r.run(ctx, watchdog.StepDrain, false)
}

// restartRefusal reads the engine (an unreadable one counts as never
// started) and says which time guard, if any, refuses its restart now.
func (r *Recovery) restartRefusal(ctx context.Context) (EngineStatus, *watchdog.Refusal) {
	eng, err := r.o.Restarter.Status(ctx)
	if err != nil {
		eng = EngineStatus{}
	}
	return eng, r.timeRefusal(eng)
}

// hold keeps a drained host out of rotation while a guard refuses the
// restart. It pages the refusal (and every later one that changes what
// happens, e.g. the cooldown giving way to a spent budget), then checks
// the engine every retry interval: ready again by itself → restore; the
// guards allow a restart → restart.
func (r *Recovery) hold(ctx context.Context) (watchdog.StepName, error) {
	if err := r.journal(watchdog.StepHeld, func(j *Journal) { j.Hold = true }); err != nil {
		return "", err
	}
	ref := r.lastRefusal()
	r.refuse(ref, r.outOfRotation())
	for {
		wait := r.o.RetryMin
		if !ref.Until.IsZero() {
			wait = max(min(wait, ref.Until.Sub(r.o.Now())), 0)
		}
		if err := sleep(ctx, wait); err != nil {
			return "", err
		}
		if err := r.o.Ready(ctx); err == nil {
			r.log.Info("engine is ready again by itself while held drained; restoring")
			r.update(func(j *Journal) { j.Hold, j.RecoveredBySelf = false, true })
			return watchdog.StepRestore, nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		eng, next := r.restartRefusal(ctx)
		if next == nil {
			left := 0
			if st, err := r.o.Drainer.State(ctx); err == nil && st.Known {
				left = st.Self.Sessions + st.Self.Queued
			}
			r.update(func(j *Journal) { j.Hold, j.EngineBefore, j.RestartedAt, j.Dropped = false, eng, time.Time{}, left })
			return watchdog.StepRestart, nil
		}
		ref = next
		r.refuse(ref, r.outOfRotation())
	}
}

func (r *Recovery) holding() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.j.Hold
}

// lastRefusal is the journal's refusal, or a placeholder for a journal
// written without one.
func (r *Recovery) lastRefusal() *watchdog.Refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.j.Refusal != nil {
		ref := *r.j.Refusal
		return &ref
	}
	return &watchdog.Refusal{Guard: watchdog.GuardCooldown, Reason: "a guard refuses the restart"}
}

// Outlook is the time guard (startup grace after vigil's own restart,
// cooldown, budget) that would refuse a restart now, or nil. It reads only
// the journal, never the engine, so the pager may ask it on the watchdog's
// loop to say in a new incident's first page what will really happen.
func (r *Recovery) Outlook() *watchdog.Refusal {
	if r == nil {
		return nil
	}
	return r.timeRefusal(EngineStatus{})
}

func (r *Recovery) timeRefusal(eng EngineStatus) *watchdog.Refusal {
	if _, none := r.o.Restarter.(NoRestart); none {
		// Refused like a guard, so the host is drained and held (or left
		// serving without a load balancer) and nothing is attempted.
		return &watchdog.Refusal{Guard: watchdog.GuardNoRestarter, Reason: "restart.kind is none: nothing is configured to restart the engine"}
	}
	r.mu.Lock()
	history := append(append([]time.Time(nil), r.j.History...), r.dryHistory...)
	r.mu.Unlock()
	var started time.Time
	if eng.Known {
		started = eng.StartedAt
	}
	return timeGuards(r.o.Now(), started, history, guardLimits{
		grace: r.o.StartupGrace, cooldown: r.o.Restart.Cooldown, budget: r.o.Restart.Budget, window: r.o.Restart.BudgetWindow,
	})
}

// dryRun reports every step the attempt would take and changes nothing.
func (r *Recovery) dryRun(eng EngineStatus, lb LBState) {
	lbs := r.o.LoadBalancer
	drain := "would drain " + r.o.Drainer.String()
	if lb.Known {
		drain += fmt.Sprintf(" (%d sessions in flight)", lb.Self.Sessions)
	}
	restart := "would restart " + r.o.Restarter.String()
	if eng.Known {
		restart += " (started at " + humanize.StampUTC(eng.StartedAt) + ")"
	}
	var plan []watchdog.Step
	if _, none := r.o.Drainer.(NoDrain); !none {
		plan = append(plan, watchdog.Step{Name: watchdog.StepDrain, Detail: drain},
			watchdog.Step{Name: watchdog.StepDrainWait, Detail: fmt.Sprintf("would wait up to %s for sessions to leave", lbs.DrainTimeoutHung)})
	}
	plan = append(plan, watchdog.Step{Name: watchdog.StepRestart, Detail: restart},
		watchdog.Step{Name: watchdog.StepWaitReady, Detail: fmt.Sprintf("would wait up to %s for /v1/models and a completed probe", r.o.Restart.ReadyTimeout)})
	if restore := r.dryRestore(); restore != "" {
		plan = append(plan, watchdog.Step{Name: watchdog.StepRestore, Detail: restore})
	}
	plan = append(plan, watchdog.Step{Name: watchdog.StepResolved, Detail: "dry run complete: nothing was changed"})
	for _, s := range plan {
		s.OK = true
		r.report(s)
	}
	r.mu.Lock()
	r.dryHistory = append(r.dryHistory, r.o.Now())
	r.j.Step, r.j.StepAt = watchdog.StepResolved, r.o.Now()
	r.mu.Unlock()
}

// dryRestore says what the restore would do: the ramp at the load
// balancer and the limiter's slow start, each only if there is one.
func (r *Recovery) dryRestore() string {
	var parts []string
	if _, none := r.o.Drainer.(NoDrain); !none {
		lbs := r.o.LoadBalancer
		parts = append(parts, fmt.Sprintf("would restore with weight %s over %s", rampWords(lbs.RampWeights), lbs.RampDuration))
	}
	if r.o.Limiter != nil {
		parts = append(parts, "would tell the admission limiter to slow-start")
	}
	return strings.Join(parts, "; ")
}

// journal records that step is about to run (with mutate's changes) and
// saves the journal: a step that cannot be journaled does not run.
func (r *Recovery) journal(step watchdog.StepName, mutate func(*Journal)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.j.Step, r.j.StepAt = step, r.o.Now()
	if mutate != nil {
		mutate(&r.j)
	}
	if r.o.DryRun {
		return nil
	}
	if err := r.o.Store.Save(JournalSection, r.j); err != nil {
		return fmt.Errorf("journal step %s: %w", step, err)
	}
	return nil
}

// update changes the journal and saves it; a save error is logged (the
// step it follows has already happened).
func (r *Recovery) update(mutate func(*Journal)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	mutate(&r.j)
	if r.o.DryRun {
		return
	}
	if err := r.o.Store.Save(JournalSection, r.j); err != nil {
		r.log.WithError(err).Error("cannot save the recovery journal")
	}
}

func (r *Recovery) drained() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.j.Drained
}

func (r *Recovery) setRecovering(on bool) {
	if r.o.Limiter != nil && !r.o.DryRun {
		r.o.Limiter.SetRecovering(on)
	}
}

// backoff is the wait before the next attempt after the journal's
// failures: doubling from RetryMin to RetryMax, with jitter so that the
// vigils of a pool that failed on the same Docker or HAProxy outage do not
// retry together.
func (r *Recovery) backoff() time.Duration {
	r.mu.Lock()
	n := r.j.Failures
	r.mu.Unlock()
	return backoff.Policy{Min: r.o.RetryMin, Max: r.o.RetryMax, Rand: r.o.Jitter}.Delay(max(n, 1))
}

func (r *Recovery) report(s watchdog.Step) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reportLocked(s)
}

// reportLocked stamps s, logs it and tells the reporter.
func (r *Recovery) reportLocked(s watchdog.Step) {
	s.Incident, s.At, s.DryRun = r.j.Incident, r.o.Now(), r.o.DryRun
	fields := logrus.Fields{"incident": s.Incident, "step": s.Name, "ok": s.OK, "dry_run": s.DryRun}
	if s.Err != "" {
		fields["error"] = s.Err
	}
	if s.Guard != "" {
		fields["guard"] = s.Guard
	}
	if !s.Until.IsZero() {
		fields["until"] = s.Until.UTC().Format(time.RFC3339)
	}
	if s.Dropped > 0 {
		fields["dropped_requests"] = s.Dropped
	}
	l := r.log.WithFields(fields)
	msg := s.Detail
	if s.DryRun && !strings.HasPrefix(msg, "would") && s.Name != watchdog.StepResolved && s.Name != watchdog.StepGuardRefused && s.Name != watchdog.StepFailed {
		msg = "would: " + msg
	}
	switch s.Name {
	case watchdog.StepFailed:
		l.Error(msg)
	case watchdog.StepGuardRefused:
		l.Warn(msg)
	default:
		l.Info(msg)
	}
	if r.o.Reporter != nil {
		r.o.Reporter.RecoveryStep(s)
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func startedOr(st EngineStatus, t time.Time) time.Time {
	if !st.StartedAt.IsZero() {
		return st.StartedAt
	}
	return t
}

func rampWords(ws []int) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = fmt.Sprintf("%d%%", w)
	}
	return strings.Join(parts, " → ")
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
