package recoverer

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

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/restarter"
	"github.com/vigil-dev/vigil/state"
	"github.com/vigil-dev/vigil/util/faultlog"
	"github.com/vigil-dev/vigil/watchdog"
)

// LimiterControl is the narrow view of the admission limiter recovery
// needs: reject while the engine is being recovered, then ramp up slowly.
type LimiterControl interface {
	SetRecovering(bool)
	SlowStart()
}

// Options wires a Recovery. Drainer, Restarter, Ready and Store
// are required; the rest may be left zero.
type Options struct {
	LoadBalancer configs.LoadBalancer
	Restart      configs.Restart
	// StartupGrace is watchdog.startup_grace: no restart within it of the
	// engine's last start.
	StartupGrace time.Duration
	// Unwritable says why the state file cannot be written ("" when it
	// can): no step can be journaled, so every recovery is refused with
	// GuardStateUnwritable, and the pages say so from the first one.
	Unwritable string

	Drainer   balancer.Drainer
	Restarter restarter.Restarter
	// Ready reports the engine ready: /v1/models answers 200 and a
	// completion probe completes. It is called repeatedly after a restart.
	Ready func(ctx context.Context) error
	// Store keeps the journal (section "recovery").
	Store *state.Store
	// Reporter is told every step (the pager); nil drops them.
	Reporter recovery.Reporter
	// Limiter is told when recovery starts and ends; nil if there is none.
	Limiter LimiterControl
	// Calls reads what became of the calls the limiter cut from the
	// engine, and how many it holds for the engine now (in its queue or
	// cut and waiting): those are not lost, so the drain wait does not
	// wait for them and the restart does not count them aborted. nil
	// without a limiter.
	Calls func() (recovery.CallFate, int)
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
	Coordinator             recovery.Coordinator
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
	// (util/backoff); nil draws at random. Tests fix it.
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
	o       Options
	log     *logrus.Entry
	saveBad faultlog.Fault // the journal's writes failing
	m       *metrics

	mu      sync.Mutex
	j       Journal
	running bool
	// dryHistory holds a dry run's would-be restarts: they pace the dry
	// run (cooldown, budget) but start no grace.
	dryHistory []time.Time
	turn       recovery.TurnHold // the pool's turn, while held
	wg         sync.WaitGroup
}

var _ watchdog.Recoverer = (*Recovery)(nil)

// errBackedOff ends an attempt that lost the pool lock: not a failure.
var errBackedOff = errors.New("backed off")

// New checks the options, loads the journal from the store and
// registers the metrics. Call Resume once at startup.
func New(o Options) (*Recovery, error) {
	switch {
	case o.Drainer == nil:
		return nil, errors.New("recovery: recovery needs a Drainer")
	case o.Restarter == nil:
		return nil, errors.New("recovery: recovery needs a Restarter")
	case o.Ready == nil:
		return nil, errors.New("recovery: recovery needs a Ready check")
	case o.Store == nil:
		return nil, errors.New("recovery: recovery needs a state Store for its journal")
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
	o.RestartSettle = orDefault(o.RestartSettle, restartSettle(o.Restart))
	o.TurnWait = orDefault(o.TurnWait, 10*time.Minute)
	if len(o.LoadBalancer.RampWeights) == 0 {
		o.LoadBalancer.RampWeights = []int{100}
	}
	r := &Recovery{o: o, log: o.Log.WithField("component", "recovery"), saveBad: faultlog.Fault{Now: o.Now}}
	if _, err := o.Store.Load(JournalSection, &r.j); err != nil {
		return nil, fmt.Errorf("recovery: recovery journal: %w", err)
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
	now := r.o.Now()
	f := facts{Event: evRecover, Cfg: r.cfg(), Incident: inc, Verdict: v}
	r.mu.Lock()
	f.Running = r.running
	j, a := plan(r.j, f, now)
	earlier, next := r.j.Incident, r.j.NextAttempt
	r.j = j
	if a.Kind == actResume || a.Kind == actAttempt {
		r.running = true
	}
	r.mu.Unlock()
	switch a.Kind {
	case actResume:
		r.log.WithFields(logrus.Fields{"incident": earlier, "new_incident": inc.ID, "step": j.Step}).
			Warn("an earlier recovery is unfinished; continuing it first")
		r.start(func() { r.resume(ctx) })
	case actWait:
		r.log.WithFields(logrus.Fields{"incident": inc.ID, "retry_in_seconds": next.Sub(now).Round(time.Second).Seconds()}).
			Debug("recovery waiting for its retry backoff")
	case actAttempt:
		r.start(func() { r.attempt(ctx) })
	}
}

// Resume continues an unfinished recovery found in the journal (vigil was
// stopped mid-sequence): a drained host is never left without someone to
// restore it, and a restart that was begun is not repeated unless the
// evidence shows it never ran. It returns at once; the sequence runs on
// its own goroutine.
func (r *Recovery) Resume(ctx context.Context) error {
	r.mu.Lock()
	j := r.j
	if r.running || !j.unfinished() {
		r.mu.Unlock()
		return nil
	}
	if !r.o.DryRun {
		r.running = true
	}
	r.mu.Unlock()
	if r.o.DryRun {
		r.report(recovery.Step{Name: j.Step, Detail: fmt.Sprintf(
			"would resume the recovery of incident %s from step %s (dry run: leaving it as it is)", j.Incident, j.Step)})
		return nil
	}
	r.log.WithFields(logrus.Fields{"incident": j.Incident, "step": j.Step, "drained": j.Drained}).
		Warn("resuming an unfinished recovery from the journal")
	r.start(func() { r.resume(ctx) })
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
	Step             recovery.StepName `json:"step,omitempty"`
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

// start runs the sequence on its own goroutine; the caller has set
// running under the lock.
func (r *Recovery) start(run func()) {
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

// cfg is the configuration as the planner sees it.
func (r *Recovery) cfg() planConfig {
	_, noDrain := r.o.Drainer.(balancer.NoDrain)
	return planConfig{
		DryRun: r.o.DryRun, NoDrain: noDrain, RestartUndrained: r.o.LoadBalancer.RestartUndrained,
		Drainer: r.o.Drainer.String(), Restarter: r.o.Restarter.String(),
		BudgetKeep: max(r.o.Restart.BudgetWindow, r.o.Restart.Cooldown),
	}
}

// Outlook is the guard (no restarter, startup grace after vigil's own
// restart, cooldown, budget) that would refuse a restart now, or nil. It reads only
// the journal, never the engine, so the pager may ask it on the watchdog's
// loop to say in a new incident's first page what will really happen.
func (r *Recovery) Outlook() *recovery.Refusal {
	if r == nil {
		return nil
	}
	return r.timeRefusal(restarter.EngineStatus{})
}

func (r *Recovery) timeRefusal(eng restarter.EngineStatus) *recovery.Refusal {
	if r.o.Unwritable != "" {
		return &recovery.Refusal{Guard: recovery.GuardStateUnwritable, Reason: "the state file cannot be written: " + r.o.Unwritable +
			"; vigil drains and restarts nothing until it can (check the directory's owner, permissions and free space)"}
	}
	r.mu.Lock()
	history, dry := append([]time.Time(nil), r.j.History...), append([]time.Time(nil), r.dryHistory...)
	r.mu.Unlock()
	var started time.Time
	if eng.Known {
		started = eng.StartedAt
	}
	_, none := r.o.Restarter.(restarter.NoRestart)
	return timeGuards(r.o.Now(), started, history, dry, guardLimits{
		noRestarter: none, grace: r.o.StartupGrace, cooldown: r.o.Restart.Cooldown, budget: r.o.Restart.Budget, window: r.o.Restart.BudgetWindow,
	})
}

func startedOr(st restarter.EngineStatus, t time.Time) time.Time {
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

// restartSettle is how long a resumed restart waits for one begun before
// vigil stopped to show, by what a restart is: a container's stop takes
// up to its stop timeout, a unit's stop systemd's default 90s; a command
// vigil ran has nothing left running once vigil is gone, so there is
// nothing to wait for but a start already under way.
func restartSettle(r configs.Restart) time.Duration {
	switch r.Kind {
	case "docker":
		return r.Docker.StopTimeout + 30*time.Second
	case "systemd":
		return 90*time.Second + 30*time.Second
	}
	return 5 * time.Second
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
